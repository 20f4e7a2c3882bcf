"""The Projection's entities are what their types say (rio_ci/core/entities.py): every key a
TypedDict requires is there, no key it does not declare is, and each value has the declared
type — for a Session driven through every kind of entity in-process, and for the golden
Sessions of earlier releases, whose events fold the same way. mypy checks the readers against
these types; this test checks the types against what the fold writes."""

from __future__ import annotations

import shutil
import types
from pathlib import Path
from typing import (
    Any,
    Literal,
    NotRequired,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

import pytest

from rio_ci.commands.bench import drive
from rio_ci.core import events as ev
from rio_ci.core.projection import Projection
from rio_ci.session.session import Session

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def problems(value: Any, hint: Any, where: str) -> list[str]:
    """Where ``value`` is not of type ``hint`` (TypedDicts, unions, lists, dicts, literals and
    JSON's scalars); [] when it is."""
    origin = get_origin(hint)
    if is_typeddict(hint):
        return _typeddict_problems(value, hint, where)
    if origin in (Union, types.UnionType):
        found = [problems(value, member, where) for member in get_args(hint)]
        return [] if any(not p for p in found) else min(found, key=len)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        return [
            p
            for n, item in enumerate(value)
            for p in problems(item, get_args(hint)[0], f"{where}[{n}]")
        ]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {value!r} is not an object"]
        return [
            p
            for k, item in value.items()
            for p in problems(item, get_args(hint)[1], f"{where}.{k}")
        ]
    if origin is Literal:
        return [] if value in get_args(hint) else [f"{where}: {value!r} not in {get_args(hint)}"]
    return _scalar_problems(value, hint, where)


def _scalar_problems(value: Any, hint: Any, where: str) -> list[str]:
    if hint is Any:
        return []
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, hint)
    return [] if ok else [f"{where}: {value!r} is not {hint.__name__}"]


def _typeddict_problems(value: Any, hint: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: {value!r} is not an object"]
    # Read from the annotations: with postponed annotations Python 3.11 counts a NotRequired
    # key as required in __required_keys__.
    fields = get_type_hints(hint, include_extras=True)
    required = {k for k, h in fields.items() if get_origin(h) is not NotRequired}
    found = [f"{where}: no {k!r} ({hint.__name__})" for k in sorted(required - set(value))]
    found += [
        f"{where}: {k!r} undeclared ({hint.__name__})" for k in sorted(set(value) - set(fields))
    ]
    for key in sorted(set(value) & set(fields)):
        field = fields[key]
        field = get_args(field)[0] if get_origin(field) is NotRequired else field
        found += problems(value[key], field, f"{where}.{key}")
    return found


def projection_problems(proj: Projection) -> list[str]:
    fields = get_type_hints(Projection)
    return [p for name, hint in fields.items() for p in problems(getattr(proj, name), hint, name)]


def drive_every_entity(session: Session) -> None:
    """Cells of every kind, a finished and an unresolved Execution, a Control, a Timer, a
    watermark, how Cells run, and an open Turn with a failed attempt."""
    drive.play_round(session, 1, None)
    cmd, note = drive.accept(
        session,
        [{"kind": "cmd", "argv": ["true"]}, {"kind": "note", "text": "waiting for the check"}],
    )
    session.record_result(cmd, ev.unknown(cmd, "worker_lost", worker_stopped=True))
    session.set_timer("check", 2e9, {"why": "look again"}, note)
    session.set_watermark("pull_request", 7)
    session.record_cell_user(
        {
            "mode": "shared",
            "user": "rio-cell",
            "uid": None,
            "gid": None,
            "reason": "no such user",
            "tree": None,
            "opened": [],
        }
    )
    session.receive("comment-2", "comment", {"body": "and another thing"})
    turn = session.prepare_turn()
    attempt = session.begin_attempt(turn["turn_id"], "scripted", {"turn": 2})
    session.record_failure(
        turn["turn_id"],
        attempt,
        "overloaded",
        transient=True,
        not_before=1.0,
        retry_since=0.5,
        usage=None,
    )


def test_a_session_driven_in_process_folds_into_its_types(tmp_path: Path) -> None:
    session = drive.new_session(tmp_path / "s.db")
    drive_every_entity(session)
    proj = session.refresh()
    assert proj.turn is not None and proj.turn["response"] is not None
    assert proj.timers and proj.watermarks and proj.cell_user and proj.unresolved()
    assert any(e["phase"] == "finished" and e["identity"] for e in proj.executions.values())
    assert projection_problems(proj) == []
    session.end_in_failure("the check never came")
    proj = session.refresh()
    assert proj.ended is not None and proj.ended["unresolved"]
    assert projection_problems(proj) == []


def test_dropped_executions_fold_into_their_types(tmp_path: Path) -> None:
    session = drive.new_session(tmp_path / "s.db")
    head = None
    for n in range(3):  # each round's code Cell replaces the last: its Execution departs
        head, _ = drive.play_round(session, n, head)
    proj = session.refresh()
    assert proj.departed
    assert projection_problems(proj) == []


@pytest.mark.parametrize("version", sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()))
def test_a_golden_session_folds_into_the_same_types(tmp_path: Path, version: str) -> None:
    copy = tmp_path / "session.sqlite3"
    shutil.copy(GOLDEN / version / "local" / "session.sqlite3", copy)
    proj = Session.open(copy).refresh()
    assert proj.executions and proj.cells
    assert projection_problems(proj) == []


def test_the_check_finds_a_missing_an_undeclared_and_a_mistyped_key(tmp_path: Path) -> None:
    session = drive.new_session(tmp_path / "s.db")
    drive.play_round(session, 1, None)
    proj = session.refresh()
    (ex,) = proj.executions.values()
    broken: Any = dict(ex)
    del broken["accepted_seq"]
    broken["stdout_elided"] = "12"
    broken["extra"] = True
    proj.executions = {str(ex["cell_id"]): broken}
    found = projection_problems(proj)
    assert len(found) == 3, found
    assert any("no 'accepted_seq'" in p for p in found)
    assert any("'extra' undeclared" in p for p in found)
    assert any("stdout_elided" in p and "is not int" in p for p in found)
