"""The scripted model (docs/cli.md): what it fills in, how it loads, and how its rounds line up
with the Session's Turns across crashes and restarts (real ``rio-ci run`` subprocesses)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rio_ci.core.errors import ModelError, UsageError
from rio_ci.model.base import ModelRequest
from rio_ci.model.scripted import ScriptedModel, complete, load_script
from tests.kit import cli_env, events, note_cell, run_cli
from tests.run_cli import new_session, status, write_script

# --- pure: what the scripted model fills in ---------------------------------------------


def state(
    cells: list[dict[str, Any]],
    *,
    revision: int,
    next_cell_id: int,
    runtime_cells: dict[str, Any] | None = None,
    inbox: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "schema": "rio.state/1",
        "id": "s",
        "revision": revision,
        "goal": "g",
        "cells": cells,
        "runtime": {
            "next_cell_id": next_cell_id,
            "cells": runtime_cells or {},
            "inbox": inbox or [],
            "usage": {},
            "pause": None,
        },
    }


def note(cell_id: int, previous: int | None = None) -> dict[str, Any]:
    """A note Cell with its ids written out (a complete patch's)."""
    return {"id": cell_id, "previous_id": previous, **note_cell(f"n{cell_id}")}


def ask(ops: list[dict[str, Any]], st: dict[str, Any]) -> list[dict[str, Any]]:
    return complete(ops, ModelRequest(turn_id="t", state=st, round_index=1))


def test_fills_revision_test_ids_and_null_predecessor_on_add() -> None:
    st = state([note(1), note(2)], revision=7, next_cell_id=5)
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/cells/-", "value": {"kind": "note", "text": "a"}},
        {"op": "add", "path": "/cells/-", "value": {"kind": "cmd", "argv": ["true"]}},
    ]
    patch = ask(ops, st)
    assert patch[0] == {"op": "test", "path": "/revision", "value": 7}
    assert [(op["value"]["id"], op["value"]["previous_id"]) for op in patch[1:]] == [
        (5, None),
        (6, None),
    ]
    assert patch[2]["value"]["argv"] == ["true"]  # the rest is submitted as written
    assert "id" not in ops[0]["value"]  # the script itself is not modified


def test_an_explicit_revision_test_is_kept_not_doubled() -> None:
    st = state([], revision=3, next_cell_id=1)
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/revision", "value": 3},
        {"op": "add", "path": "/cells/-", "value": {"kind": "note", "text": "a"}},
    ]
    patch = ask(ops, st)
    assert [op["op"] for op in patch] == ["test", "add"]


def test_replace_takes_the_replaced_id_as_predecessor() -> None:
    st = state([note(1), note(2), note(3)], revision=2, next_cell_id=4)
    ops = [
        {"op": "replace", "path": "/cells/1", "value": {"kind": "note", "text": "b2"}},
        {"op": "add", "path": "/cells/-", "value": {"kind": "note", "text": "new"}},
    ]
    patch = ask(ops, st)
    assert patch[1]["value"]["id"] == 4 and patch[1]["value"]["previous_id"] == 2
    assert patch[2]["value"]["id"] == 5 and patch[2]["value"]["previous_id"] is None


def test_replace_after_a_remove_in_the_same_patch_uses_the_shifted_array() -> None:
    # After removing index 0, index 1 is Cell 3 (not Cell 2): JSON Patch applies in order.
    st = state([note(1), note(2), note(3)], revision=2, next_cell_id=4)
    ops: list[dict[str, Any]] = [
        {"op": "remove", "path": "/cells/0"},
        {"op": "replace", "path": "/cells/1", "value": {"kind": "note", "text": "c2"}},
    ]
    patch = ask(ops, st)
    assert patch[2]["value"]["previous_id"] == 3
    assert patch[2]["value"]["id"] == 4


def test_unresolved_placeholder_takes_the_oldest_unresolved_unknown_execution() -> None:
    unknown = {"type": "UnknownExecution", "reason": "x"}
    runtime_cells = {
        "2": {"phase": "finished", "result": unknown, "resolved_by": 9},  # already resolved
        "4": {"phase": "finished", "result": unknown, "resolved_by": None},
        "6": {"phase": "finished", "result": {"type": "error"}, "resolved_by": None},
        "10": {"phase": "finished", "result": unknown, "resolved_by": None},
    }
    inbox = [
        {"id": "execution:4", "kind": "execution", "payload": unknown, "seq": 30},
        {"id": "c1", "kind": "comment", "payload": {}, "seq": 31},
        {"id": "execution:6", "kind": "execution", "payload": {}, "seq": 33},
    ]
    st = state([], revision=5, next_cell_id=11, runtime_cells=runtime_cells, inbox=inbox)
    ops = [
        {
            "op": "add",
            "path": "/cells/-",
            "value": {
                "kind": "note",
                "role": "resolution",
                "text": "r",
                "target_cell_id": "$unresolved",
                "evidence_refs": ["session:event:2", "$delivered"],
            },
        }
    ]
    value = ask(ops, st)[1]["value"]
    assert value["target_cell_id"] == 4  # numerically oldest, not "10" < "4" as strings
    # Every delivered message except the target's own record, after the literal refs.
    assert value["evidence_refs"] == ["session:event:2", "session:event:31", "session:event:33"]


def test_scripted_model_answers_round_k_and_an_exhausted_script_fails(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        "- - {op: add, path: /cells/-, value: {kind: note, text: one}}\n"
        "- patch:\n"
        "  - {op: add, path: /cells/-, value: {kind: note, text: two}}\n"
    )
    model = ScriptedModel(script)
    st = state([], revision=0, next_cell_id=1)
    second = model.ask(ModelRequest(turn_id="t", state=st, round_index=2))
    assert second.patch[1]["value"]["text"] == "two"
    assert second.usage.cost_usd == 0.0  # known and free: an offline script costs nothing
    with pytest.raises(ModelError) as info:
        model.ask(ModelRequest(turn_id="t", state=st, round_index=3))
    assert info.value.transient is False


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("- [unclosed\n", "not valid YAML"),
        ("patch: []\n", "must be a YAML list"),
        ("- 5\n", "round 1"),
        ("- - {op: test}\n- [1, 2]\n", "round 2"),
    ],
)
def test_bad_scripts_are_usage_errors(tmp_path: Path, text: str, problem: str) -> None:
    script = tmp_path / "bad.yaml"
    script.write_text(text)
    with pytest.raises(UsageError, match=problem):
        load_script(script)


# --- rio-ci run with a script -------------------------------------------------------------


def echo(word: str) -> dict[str, Any]:
    return {"op": "add", "path": "/cells/-", "value": {"kind": "cmd", "argv": ["echo", word]}}


CONCLUDE = {
    "op": "add",
    "path": "/cells/-",
    "value": {"kind": "note", "role": "conclusion", "result": "success", "text": "done"},
}


@pytest.mark.parametrize("text", ["- [unclosed\n", "just: a mapping\n"])
def test_run_with_a_bad_script_is_a_usage_error_and_touches_nothing(
    tmp_path: Path, text: str
) -> None:
    db = new_session(tmp_path)
    script = tmp_path / "bad.yaml"
    script.write_text(text)
    done = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert done.returncode == 2
    assert "error" in json.loads(done.stdout.strip().splitlines()[-1])
    assert [e["kind"] for e in events(db)] == ["session_created"]


def test_run_with_a_missing_script_is_a_usage_error(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    done = run_cli("run", str(db), "--model", f"scripted:{tmp_path / 'nope.yaml'}")
    assert done.returncode == 2


def test_exhausted_script_is_a_failed_attempt_and_the_run_fails(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    script = write_script(tmp_path, [[echo("only")]])
    done = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert done.returncode == 1
    assert status(done.stdout)["status"] == "failed"
    evs = events(db)
    failed = [e for e in evs if e["kind"] == "model_response" and not e["ok"]]
    assert len(failed) == 1 and "past its end" in failed[0]["error"]
    ended = [e for e in evs if e["kind"] == "run_ended"]
    assert ended[0]["result"] == "failure"
    assert len([e for e in evs if e["kind"] == "patch_accepted"]) == 1


def accepted_words(evs: list[dict[str, Any]]) -> list[str]:
    """The echo word (or note text) of every accepted Cell, in Journal order."""
    words = []
    for e in evs:
        if e["kind"] == "patch_accepted":
            for cell in e["cells"]:
                words.append(cell["argv"][1] if cell["kind"] == "cmd" else cell["text"])
    return words


FIVE_ROUNDS = [[echo("r1")], [echo("r2")], [echo("r3")], [echo("r4")], [CONCLUDE]]


@pytest.mark.parametrize(
    ("crash_at", "accepted_before", "attempts"),
    [
        # The reply for round 2 is lost before its commit: round 2 is asked again.
        ("model_reply_before_commit:2", ["r1"], 6),
        # Round 2's reply is committed but not admitted: it is admitted after the restart.
        ("reply_before_admit:2", ["r1"], 5),
        # The accept transaction of round 2 never committed: the saved reply is admitted again.
        ("accept_before_commit:2", ["r1"], 5),
        # Round 2 accepted, nothing dispatched: the restart runs cell 2 and goes on with round 3.
        ("accept_after_commit:2", ["r1", "r2"], 5),
    ],
)
def test_rounds_line_up_with_turns_across_a_sigkill(
    tmp_path: Path, crash_at: str, accepted_before: list[str], attempts: int
) -> None:
    db = new_session(tmp_path)
    script = write_script(tmp_path, FIVE_ROUNDS)
    first = run_cli(
        "run", str(db), "--model", f"scripted:{script}", env=cli_env(RIO_CRASH_AT=crash_at)
    )
    assert first.returncode == -signal.SIGKILL, first.stderr
    assert accepted_words(events(db)) == accepted_before
    second = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert second.returncode == 0, second.stdout + second.stderr
    assert status(second.stdout)["status"] == "succeeded"
    evs = events(db)
    assert accepted_words(evs) == ["r1", "r2", "r3", "r4", "done"]
    rounds = [e["raw"]["round"] for e in evs if e["kind"] == "model_response" and e["ok"]]
    assert rounds == [1, 2, 3, 4, 5]
    assert len([e for e in evs if e["kind"] == "model_attempt"]) == attempts
    assert [e["cell_id"] for e in evs if e["kind"] == "execution_started"] == [1, 2, 3, 4]


def test_sigkill_during_a_cell_then_placeholders_resolve_it(tmp_path: Path) -> None:
    """The demo's shape, small: an external SIGKILL while cell 2 runs; the restarted run
    reports an UnknownExecution; the script inspects, resolves it with ``$unresolved`` and
    ``$delivered``, and concludes. No round is skipped or replayed."""
    db = new_session(tmp_path)
    marker = tmp_path / "started"
    slow = {
        "op": "add",
        "path": "/cells/-",
        "value": {
            "kind": "cmd",
            "argv": [
                sys.executable,
                "-c",
                f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(30)",
            ],
        },
    }
    resolve = {
        "op": "add",
        "path": "/cells/-",
        "value": {
            "kind": "note",
            "role": "resolution",
            "target_cell_id": "$unresolved",
            "evidence_refs": ["$delivered"],
            "text": "the inspection shows it never finished",
        },
    }
    script = write_script(
        tmp_path, [[echo("r1")], [slow], [echo("inspect")], [resolve], [CONCLUDE]]
    )
    command = [sys.executable, "-m", "rio_ci", "run", str(db), "--model", f"scripted:{script}"]
    first = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env()
    )
    try:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.02)
        assert marker.exists()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert status(second.stdout)["status"] == "succeeded", second.stdout + second.stderr
    evs = events(db)
    assert [e["raw"]["round"] for e in evs if e["kind"] == "model_response"] == [1, 2, 3, 4, 5]
    unknown = [
        e
        for e in evs
        if e["kind"] == "execution_finished" and e["result"]["type"] == "UnknownExecution"
    ]
    assert [e["cell_id"] for e in unknown] == [2]
    assert [e["cell_id"] for e in evs if e["kind"] == "execution_started"] == [1, 2, 3]
    (resolution,) = [
        c
        for e in evs
        if e["kind"] == "patch_accepted"
        for c in e["cells"]
        if c.get("role") == "resolution"
    ]
    assert resolution["target_cell_id"] == 2
    inspect_result = next(
        e["seq"] for e in evs if e["kind"] == "execution_finished" and e["cell_id"] == 3
    )
    assert resolution["evidence_refs"] == [f"session:event:{inspect_result}"]
    assert unknown[0]["result"]["evidence_refs"][0] not in resolution["evidence_refs"]


def test_filled_in_replace_after_remove_is_accepted_by_admission(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    notes = [
        {"op": "add", "path": "/cells/-", "value": {"kind": "note", "text": t}}
        for t in ("a", "b", "c")
    ]
    script = write_script(
        tmp_path,
        [
            [*notes, echo("look")],  # cells 1, 2, 3, 4
            [
                {"op": "remove", "path": "/cells/0"},  # [2, 3, 4]
                {
                    "op": "replace",
                    "path": "/cells/1",
                    "value": {"kind": "note", "text": "c, again"},
                },
                CONCLUDE,
            ],
        ],
    )
    done = run_cli("run", str(db), "--model", f"scripted:{script}")
    assert status(done.stdout)["status"] == "succeeded", done.stdout + done.stderr
    evs = events(db)
    assert not [e for e in evs if e["kind"] == "patch_rejected"]
    last = [e for e in evs if e["kind"] == "patch_accepted"][-1]
    assert [(c["id"], c["previous_id"]) for c in last["cells"]] == [(5, 3), (6, None)]
    assert last["heads"] == [2, 5, 4, 6]
