"""Step admission (docs/patches.md), one test per rule.

Most tests go through ``Session.step`` on a real file and check, for every rejection, that
the only thing committed is one ``patch_rejected`` event and that the State is unchanged.
The CLI tests check the exit codes and what ``rio-ci events`` shows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    PY,
    accept,
    end_execution,
    journal_rows,
    record_unknown,
    start_execution,
    succeed,
)

from rio_ci.core.admission import Rejection, decide, digest
from rio_ci.core.json_value import encoded_size
from rio_ci.session.session import Receipt, Session
from tests.kit import PEP723, Patch, cli_env, cmd_cell, code_cell, note_cell, until

Build = Callable[[Patch], Any]


def ops_of(built: Any, patch: Patch) -> list[Any]:
    if built is None or built is patch:
        return patch.build()
    return built.build() if isinstance(built, Patch) else built


def reject(session: Session, build: Build, match: str) -> str:
    """Submit a patch for the open Turn; require a rejection naming ``match`` that commits
    one ``patch_rejected`` event and nothing else, and leaves the State and Turn as they were."""
    turn = session.prepare_turn()
    patch = Patch(turn["state"])
    ops = ops_of(build(patch), patch)
    path = session.path
    before_rows, before_state = journal_rows(path), session.state()
    result = session.step(turn["turn_id"], ops)
    assert isinstance(result, Rejection), f"accepted: {result}"
    assert match in result.reason, result.reason
    after_rows = journal_rows(path)
    assert after_rows[:-1] == before_rows
    assert after_rows[-1]["kind"] == "patch_rejected"
    # A rejected patch is stored as its digest and size, never whole.
    assert after_rows[-1]["data"] == {
        "turn_id": turn["turn_id"],
        "reason": result.reason,
        "digest": digest(ops),
        "size": len(
            json.dumps(ops, ensure_ascii=False, separators=(",", ":")).encode(
                "utf-8", "surrogatepass"
            )
        ),
    }
    # The Rejection carries what was recorded of the patch.
    assert (result.digest, result.size) == (
        after_rows[-1]["data"]["digest"],
        after_rows[-1]["data"]["size"],
    )
    assert session.state() == before_state
    assert session.prepare_turn() == turn  # the Turn is not used up
    return result.reason


submit = accept


@pytest.fixture
def two_notes(session: Session) -> Session:
    """A Session whose cells are [1, 2] (two notes) at revision 1."""
    accept(session, lambda p: p.add(note_cell("first")).add(note_cell("second")))
    return session


@pytest.fixture
def three_notes(session: Session) -> Session:
    accept(session, lambda p: p.add(note_cell("a")).add(note_cell("b")).add(note_cell("c")))
    return session


def head_ids(session: Session) -> list[int]:
    return [c["id"] for c in session.state()["cells"]]


# --- 1. the revision test comes first ------------------------------------------------------


def test_a_patch_without_the_revision_test_is_rejected(session: Session) -> None:
    reject(
        session,
        lambda p: [
            {
                "op": "add",
                "path": "/cells/-",
                "value": {"id": 1, "previous_id": None, **note_cell()},
            }
        ],
        "first operation must be",
    )


@pytest.mark.parametrize("value", [1, -1, False, "0", None, 0.5])
def test_a_revision_test_with_the_wrong_value_is_rejected(session: Session, value: Any) -> None:
    # False == 0 in Python; JSON's false is not the revision 0.
    reject(
        session,
        lambda p: [{"op": "test", "path": "/revision", "value": value}],
        "revision test failed",
    )


def test_the_revision_test_must_be_the_first_operation(session: Session) -> None:
    reject(
        session,
        lambda p: [
            {"op": "test", "path": "/goal", "value": "test goal"},
            {"op": "test", "path": "/revision", "value": 0},
        ],
        "first operation must be",
    )
    reject(
        session,
        lambda p: [
            {
                "op": "add",
                "path": "/cells/-",
                "value": {"id": 1, "previous_id": None, **note_cell()},
            },
            {"op": "test", "path": "/revision", "value": 0},
        ],
        "first operation must be",
    )


def test_a_patch_that_only_tests_the_revision_is_accepted(session: Session) -> None:
    receipt = submit(session, lambda p: p)
    assert (receipt.revision, receipt.cell_ids) == (1, [])
    assert session.state()["revision"] == 1


def test_test_operations_are_evaluated_against_the_turns_state(session: Session) -> None:
    accept(session, lambda p: p.add(cmd_cell("true")))
    turn = session.prepare_turn()
    assert turn["state"]["runtime"]["cells"]["1"]["phase"] == "queued"
    start_execution(session, 1)  # the live State moves on; the snapshot does not
    session.receive("m1", "comment", {"body": "hi"})
    assert session.state()["runtime"]["cells"]["1"]["phase"] == "started"
    reject(session, lambda p: p.test("/runtime/cells/1/phase", "started"), "test failed")
    reject(session, lambda p: p.test("/runtime/nope", 1), "does not exist")
    ops = (
        Patch(turn["state"])
        .test("/runtime/cells/1/phase", "queued")
        .test("/runtime/inbox", [])
        .test("/goal", "test goal")
        .build()
    )
    assert isinstance(session.step(turn["turn_id"], ops), Receipt)


# --- 2. only test, add at /cells/-, whole replace and remove -------------------------------


# The valid add before each of these takes id 3, so a Cell here takes id 4: the path is
# the only thing wrong with it.
FORBIDDEN: dict[str, dict[str, Any]] = {
    "move": {"op": "move", "from": "/cells/0", "path": "/cells/1"},
    "copy": {"op": "copy", "from": "/cells/0", "path": "/cells/-"},
    "add at an index": {
        "op": "add",
        "path": "/cells/0",
        "value": {"id": 4, "previous_id": None, **note_cell()},
    },
    "add at the end index": {
        "op": "add",
        "path": "/cells/2",
        "value": {"id": 4, "previous_id": None, **note_cell()},
    },
    "edit inside a Cell": {"op": "replace", "path": "/cells/0/text", "value": "changed"},
    "add inside a Cell": {"op": "add", "path": "/cells/0/role", "value": "cancel"},
    "remove inside a Cell": {"op": "remove", "path": "/cells/0/text"},
    "replace the cells array": {"op": "replace", "path": "/cells", "value": []},
    "remove the cells array": {"op": "remove", "path": "/cells"},
    "replace /goal": {"op": "replace", "path": "/goal", "value": "another goal"},
    "add /goal": {"op": "add", "path": "/goal", "value": "another goal"},
    "remove /goal": {"op": "remove", "path": "/goal"},
    "replace /revision": {"op": "replace", "path": "/revision", "value": 7},
    "replace /runtime": {"op": "replace", "path": "/runtime", "value": {}},
    "replace /runtime/pause": {"op": "replace", "path": "/runtime/pause", "value": None},
    "add /runtime/next_cell_id": {"op": "add", "path": "/runtime/next_cell_id", "value": 9},
    "replace /schema": {"op": "replace", "path": "/schema", "value": "rio.state/2"},
    "replace /id": {"op": "replace", "path": "/id", "value": "x"},
    "replace the root": {"op": "replace", "path": "", "value": {}},
    "unknown op": {"op": "frobnicate", "path": "/cells/-"},
    "op with an extra key": {
        "op": "add",
        "path": "/cells/-",
        "from": "/cells/0",
        "value": {"id": 4, "previous_id": None, **note_cell()},
    },
}


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_forbidden_operations_reject_the_whole_patch(two_notes: Session, name: str) -> None:
    # A valid add comes first, so the whole patch is what is refused, not just the op.
    reject(two_notes, lambda p: p.add(note_cell("valid")).op(**FORBIDDEN[name]), "operation 2")
    assert head_ids(two_notes) == [1, 2]


# --- 3. ids: consecutive from runtime.next_cell_id, in operation order ---------------------


@pytest.mark.parametrize(
    "cell_id, match",
    [
        (4, "must take id 3"),
        (2, "must take id 3"),
        (1, "must take id 3"),
        (0, "integer >= 1"),
        ("3", "integer >= 1"),
        (3.0, "integer >= 1"),
        (True, "integer >= 1"),
    ],
)
def test_the_first_new_version_takes_next_cell_id(
    two_notes: Session, cell_id: Any, match: str
) -> None:
    reject(two_notes, lambda p: p.add(note_cell(id=cell_id)), match)


def test_later_versions_take_the_next_ids_in_operation_order(two_notes: Session) -> None:
    reject(two_notes, lambda p: p.add(note_cell()).add(note_cell(id=3)), "take id 4")
    reject(two_notes, lambda p: p.add(note_cell()).add(note_cell(id=5)), "take id 4")
    reject(two_notes, lambda p: p.add(note_cell(id=4)).add(note_cell(id=3)), "take id 3")
    # a replacement before an add takes the first id
    receipt = submit(two_notes, lambda p: p.replace(0, note_cell("one'")).add(note_cell("three")))
    assert receipt.cell_ids == [3, 4]
    assert head_ids(two_notes) == [3, 2, 4]
    assert two_notes.state()["runtime"]["next_cell_id"] == 5


def test_ids_are_never_reused_and_old_versions_never_return(two_notes: Session) -> None:
    submit(two_notes, lambda p: p.replace(0, note_cell("one'")).remove(1))  # heads [3]
    assert head_ids(two_notes) == [3]
    reject(two_notes, lambda p: p.add(note_cell(id=2)), "take id 4")
    reject(two_notes, lambda p: p.replace(0, note_cell(id=1, previous_id=3)), "take id 4")


# --- 4. predecessors, one operation per existing Cell --------------------------------------


def test_an_added_cell_starts_a_lineage(two_notes: Session) -> None:
    reject(two_notes, lambda p: p.add(note_cell(previous_id=1)), "previous_id must be null")


@pytest.mark.parametrize("previous", [None, 2, 3, 99])
def test_a_replacement_names_the_replaced_cell(two_notes: Session, previous: Any) -> None:
    reject(two_notes, lambda p: p.replace(0, note_cell(previous_id=previous)), "stale predecessor")


def test_replacing_cell_1_of_1_2_gives_3_2_and_keeps_cell_1_in_history(rio: Any) -> None:
    assert rio("new", "s.db", "--goal", "g").code == 0
    turn = rio("turn", "s.db").out
    first = Patch(turn["state"]).add(note_cell("one")).add(note_cell("two")).build()
    assert rio("step", "s.db", turn["turn_id"], "-", input=first).code == 0
    turn = rio("turn", "s.db").out
    code_, receipt, _ = rio(
        "step",
        "s.db",
        turn["turn_id"],
        "-",
        input={"patch": Patch(turn["state"]).replace(0, note_cell("1'")).build()},
    )
    assert code_ == 0
    events = rio("events", "s.db").lines
    accepted = [e for e in events if e["kind"] == "patch_accepted"]
    assert receipt == {
        "turn_id": turn["turn_id"],
        "revision": 2,
        "cell_ids": [3],
        "event": accepted[-1]["seq"],
    }
    cells = rio("state", "s.db").out["cells"]
    assert [c["id"] for c in cells] == [3, 2]
    assert cells[0] == {"id": 3, "previous_id": 1, "kind": "note", "text": "1'"}
    versions_of_1 = [c for e in accepted for c in e["cells"] if c["id"] == 1]
    assert versions_of_1 == [{"id": 1, "previous_id": None, "kind": "note", "text": "one"}]


def test_a_cell_gets_at_most_one_successor(two_notes: Session) -> None:
    # Two replacements of Cell 1 in one patch: the second would fork its lineage.
    reject(
        two_notes,
        lambda p: p.replace(0, note_cell("a")).op(
            op="replace", path="/cells/0", value={"id": 4, "previous_id": 1, **note_cell("b")}
        ),
        "operation 2",
    )
    reject(
        two_notes,
        lambda p: p.replace(0, note_cell("a")).op(op="remove", path="/cells/0"),
        "created in this patch",
    )


def test_a_cell_created_in_the_same_patch_cannot_be_touched(two_notes: Session) -> None:
    reject(
        two_notes,
        lambda p: p.add(note_cell()).op(op="remove", path="/cells/2"),
        "created in this patch",
    )
    reject(
        two_notes,
        lambda p: p.add(note_cell()).op(
            op="replace", path="/cells/2", value={"id": 4, "previous_id": 3, **note_cell("b")}
        ),
        "created in this patch",
    )


# --- 5. removals go in strictly descending order -------------------------------------------


def test_removals_go_in_strictly_descending_index_order(three_notes: Session) -> None:
    reject(three_notes, lambda p: p.remove(0).remove(1), "strictly descending")
    reject(three_notes, lambda p: p.remove(1).remove(1), "strictly descending")
    submit(three_notes, lambda p: p.remove(2).remove(0))
    assert head_ids(three_notes) == [2]


# --- 6. pending work: replace waits, remove keeps it visible -------------------------------


@pytest.mark.parametrize("phase", ["queued", "started"])
def test_replacing_a_pending_cell_is_rejected(session: Session, phase: str) -> None:
    accept(session, lambda p: p.add(cmd_cell("true")))
    if phase == "started":
        start_execution(session, 1)
    reject(session, lambda p: p.replace(0, cmd_cell("false")), "wait or cancel first")


@pytest.mark.parametrize("phase", ["queued", "started", "unknown"])
def test_removing_pending_or_uncertain_work_keeps_it_visible(session: Session, phase: str) -> None:
    accept(session, lambda p: p.add(cmd_cell("true")).add(note_cell("keep")))
    if phase == "started":
        start_execution(session, 1)
    if phase == "unknown":
        record_unknown(session, 1)
    submit(session, lambda p: p.remove(0))
    state = session.state()
    assert [c["id"] for c in state["cells"]] == [2]
    shown = state["runtime"]["cells"]["1"]
    if phase == "unknown":
        assert (shown["phase"], shown["result"]["type"]) == ("finished", "UnknownExecution")
    else:
        assert shown["phase"] == phase


def test_a_finished_cell_that_leaves_the_context_leaves_runtime_cells(session: Session) -> None:
    accept(session, lambda p: p.add(cmd_cell("true")).add(note_cell("keep")))
    succeed(session, 1)
    assert "1" in session.state()["runtime"]["cells"]  # a selected Cell with an Execution
    submit(session, lambda p: p.remove(0))
    assert session.state()["runtime"]["cells"] == {}


def test_replacing_with_identical_source_is_a_new_version_and_a_new_run(session: Session) -> None:
    script = code_cell("print('same')\n")
    accept(session, lambda p: p.add(script))
    succeed(session, 1)
    receipt = submit(session, lambda p: p.replace(0, script))
    assert receipt.cell_ids == [2]
    runtime = session.state()["runtime"]["cells"]
    assert runtime == {
        "2": {
            "phase": "queued",
            "result": None,
            "stdout": "",
            "stderr": "",
            "truncated": False,
            "resolved_by": None,
        }
    }
    runs = [
        e["data"]["executions"] for e in journal_rows(session.path) if e["kind"] == "patch_accepted"
    ]
    assert runs == [[1], [2]]


# --- Cell validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, match",
    [
        ("print('no block')\n", "found 0"),
        (PEP723 + "print(1)\n" + PEP723, "found 2"),
        (PEP723 + PEP723, "PEP 723"),
        ("# /// script\n# requires-python = '>=3.11'\n# ///\nprint(1)\n", "dependencies list"),
        ("# /// script\n# dependencies = 'x'\n# ///\n", "dependencies list"),
        ("# /// script\n# dependencies = [\n# ///\n", "not valid TOML"),
        ("# /// pyproject\n# dependencies = []\n# ///\n", "found 0"),
    ],
)
def test_code_cells_need_exactly_one_pep723_block(
    session: Session, source: str, match: str
) -> None:
    reject(session, lambda p: p.add({"kind": "code", "runtime": "python", "source": source}), match)


def test_a_code_cell_with_one_block_and_dependencies_is_accepted(session: Session) -> None:
    header = "# /// script\n# requires-python = '>=3.11'\n# dependencies = [\"six\"]\n# ///\n"
    assert submit(session, lambda p: p.add(code_cell("import six\n", header))).cell_ids == [1]
    reject(
        session,
        lambda p: p.add({"kind": "code", "runtime": "ruby", "source": PEP723}),
        "runtime: 'python'",
    )


@pytest.mark.parametrize("argv", [[], [1], ["ls", 2], [""], "ls -l", None, ["a\x00b"]])
def test_cmd_argv_must_be_a_non_empty_list_of_strings(session: Session, argv: Any) -> None:
    reject(session, lambda p: p.add({"kind": "cmd", "argv": argv}), "argv")


@pytest.mark.parametrize(
    "cell, match",
    [
        (note_cell(color="red"), "unknown field(s) in note Cell: color"),
        ({**cmd_cell("ls"), "cwd": "/"}, "unknown field(s) in cmd Cell: cwd"),
        ({**code_cell(), "env": {}}, "unknown field(s) in code Cell: env"),
        (note_cell(role="cancel"), "needs target_cell_id"),
        (note_cell(role="conclusion"), "needs result"),
        (note_cell(role="conclusion", result="done"), "result must be"),
        (note_cell(role="approve"), "role must be one of"),
        (note_cell("   "), "non-blank text"),
        ({"kind": "script", "text": "x"}, "kind must be note, code or cmd"),
        ({"kind": "cmd"}, "missing field(s) in cmd Cell: argv"),
        ({"kind": ["note"], "text": "x"}, "kind must be note, code or cmd"),
        (note_cell(role="resolution", target_cell_id=1, evidence_refs=5), "evidence_refs must be"),
        (note_cell(role="cancel", target_cell_id="1"), "target_cell_id must be an integer"),
    ],
)
def test_invalid_cells_are_rejected(session: Session, cell: dict[str, Any], match: str) -> None:
    reject(session, lambda p: p.add(cell), match)


def test_plain_text_controls_nothing(session: Session) -> None:
    accept(session, lambda p: p.add(note_cell("done")))
    accepted = [e for e in journal_rows(session.path) if e["kind"] == "patch_accepted"]
    assert accepted[-1]["data"]["controls"] == []
    assert session.proj.controls == []


# --- 7. budgets ----------------------------------------------------------------------------


def test_cells_may_use_at_most_half_the_context_budget(
    make_session: Callable[..., Session],
) -> None:
    session = make_session(context_bytes=4000)
    reject(session, lambda p: p.add(note_cell("x" * 2100)), "context budget")
    submit(session, lambda p: p.add(note_cell("x" * 1500)))
    reject(session, lambda p: p.add(note_cell("y" * 600)), "context budget")


def test_old_outputs_are_masked_so_the_state_fits_the_context_budget(
    make_session: Callable[..., Session],
) -> None:
    session = make_session(context_bytes=4000)
    accept(session, lambda p: p.add(cmd_cell("true")))
    succeed(session, 1, output="o" * 2000)
    accept(session, lambda p: p.add(cmd_cell("true")))
    succeed(session, 2, output="p" * 1200)
    # Cells may still take half of the budget: outputs never crowd them out; the oldest
    # output is masked with a pointer to where it can be read in full.
    submit(session, lambda p: p.add(note_cell("z" * 1200)))
    state = session.prepare_turn()["state"]
    assert encoded_size(state) <= 4000
    first = state["runtime"]["cells"]["1"]["stdout"]
    assert "o" * 50 not in first and "rio_ci.api.output(1" in first
    assert "2000 bytes" in first
    assert state["runtime"]["cells"]["2"]["stdout"] == "p" * 1200  # the newest stays


def test_budgets_set_with_limit_flags_hold_at_the_cli(rio: Any) -> None:
    assert (
        rio(
            "new",
            "s.db",
            "--goal",
            "g",
            "--limit",
            "context_bytes=3000",
            "--limit",
            "pending_cells=1",
        ).code
        == 0
    )
    turn = rio("turn", "s.db").out
    before = rio("events", "s.db").lines
    for patch, match in (
        (Patch(turn["state"]).add(note_cell("x" * 1600)), "context budget"),
        (Patch(turn["state"]).add(cmd_cell("a")).add(cmd_cell("b")), "pending_cells=1"),
    ):
        code_, out, _ = rio("step", "s.db", turn["turn_id"], "-", input=patch.build())
        assert code_ == 3 and match in out["rejected"]
    after = rio("events", "s.db").lines
    assert after[: len(before)] == before
    assert [e["kind"] for e in after[len(before) :]] == ["patch_rejected"] * 2
    patch = Patch(turn["state"]).add(note_cell("x" * 1000)).add(cmd_cell("a"))
    assert rio("step", "s.db", turn["turn_id"], "-", input=patch.build()).code == 0


def test_outstanding_work_must_fit_pending_cells(make_session: Callable[..., Session]) -> None:
    session = make_session(pending_cells=2)
    reject(
        session,
        lambda p: p.add(cmd_cell("a")).add(cmd_cell("b")).add(code_cell()),
        "pending_cells=2",
    )
    submit(
        session, lambda p: p.add(cmd_cell("a")).add(cmd_cell("b")).add(note_cell("notes are free"))
    )
    reject(session, lambda p: p.add(cmd_cell("c")), "pending_cells=2")
    submit(session, lambda p: p.remove(1))  # removed, still pending: still counted
    reject(session, lambda p: p.add(cmd_cell("c")), "pending_cells=2")
    succeed(session, 2)
    assert submit(session, lambda p: p.add(cmd_cell("c"))).cell_ids == [4]
    record_unknown(session, 1)  # finished, but unresolved uncertainty still counts
    reject(session, lambda p: p.add(cmd_cell("d")), "pending_cells=2")
    assert submit(session, lambda p: p.add(note_cell("n"))).cell_ids == [5]  # notes are free


# --- 8. controls ---------------------------------------------------------------------------


def test_a_cancel_must_target_a_recorded_execution(session: Session) -> None:
    accept(
        session, lambda p: p.add(note_cell("plain")).add(cmd_cell("true")).add(cmd_cell("false"))
    )
    succeed(session, 3)
    accept(session, lambda p: p.remove(2))  # cell 3 finished and left the context
    reject(
        session,
        lambda p: p.add(note_cell("stop", role="cancel", target_cell_id=99)),
        "cancel target 99 has no recorded Execution",
    )
    reject(
        session,
        lambda p: p.add(note_cell("stop", role="cancel", target_cell_id=1)),
        "cancel target 1 has no recorded Execution",
    )
    receipt = submit(
        session,
        lambda p: (
            p.add(note_cell("stop 2", role="cancel", target_cell_id=2))
            .add(note_cell("stop 3", role="cancel", target_cell_id=3))
            .add(cmd_cell("sleep", "1"))
            .add(note_cell("stop 6", role="cancel", target_cell_id=6))
        ),
    )
    assert receipt.cell_ids == [4, 5, 6, 7]
    controls = [(c["note_id"], c["role"], c["target_cell_id"]) for c in session.proj.controls]
    assert controls == [(4, "cancel", 2), (5, "cancel", 3), (7, "cancel", 6)]


@pytest.fixture
def uncertain(session: Session) -> tuple[Session, int, int]:
    """Cell 1 ended in an UnknownExecution (record at seq U); a comment arrived (seq C)."""
    accept(session, lambda p: p.add(cmd_cell("deploy")).add(cmd_cell("true")))
    own = record_unknown(session, 1)
    succeed(session, 2)
    comment = session.receive("c1", "comment", {"body": "the deploy did not happen"})["seq"]
    return session, own, comment


def resolution(target: int, *refs: str, **extra: Any) -> dict[str, Any]:
    return note_cell(
        "resolved",
        role="resolution",
        target_cell_id=target,
        **({"evidence_refs": list(refs)} if refs else {}),
        **extra,
    )


def test_a_resolution_needs_evidence(uncertain: tuple[Session, int, int]) -> None:
    session, _, _ = uncertain
    reject(session, lambda p: p.add(resolution(1)), "non-empty evidence_refs")
    reject(session, lambda p: p.add(resolution(1, evidence_refs=[])), "non-empty evidence_refs")
    reject(session, lambda p: p.add(resolution(1, "event:3")), "session:event:N")


def test_a_resolution_citing_only_its_own_record_is_rejected(
    uncertain: tuple[Session, int, int],
) -> None:
    session, own, comment = uncertain
    reject(session, lambda p: p.add(resolution(1, f"session:event:{own}")), "own record")
    reject(
        session,
        lambda p: p.add(resolution(1, f"session:event:{comment}", f"session:event:{own}")),
        "own record",
    )


@pytest.mark.parametrize("which", ["missing", "absurd", "session_created", "turn_prepared"])
def test_a_resolution_must_cite_committed_observations(
    uncertain: tuple[Session, int, int], which: str
) -> None:
    session, _, _ = uncertain
    turn_seq = max(e["seq"] for e in journal_rows(session.path) if e["kind"] == "turn_prepared")
    seq = {
        "missing": session.proj.last_seq + 50,
        "absurd": 10**30,
        "session_created": 1,
        "turn_prepared": turn_seq,
    }[which]
    reject(
        session,
        lambda p: p.add(resolution(1, f"session:event:{seq}")),
        "not a committed observation",
    )


@pytest.mark.parametrize("target", [2, 99])  # a success; no such Cell
def test_a_resolution_must_target_an_unresolved_unknown_execution(
    uncertain: tuple[Session, int, int], target: int
) -> None:
    session, _, comment = uncertain
    ref = f"session:event:{comment}"
    reject(session, lambda p: p.add(resolution(target, ref)), "not an unresolved UnknownExecution")
    reject(
        session,
        lambda p: p.add(resolution(1, ref)).add(resolution(1, ref)),
        "not an unresolved UnknownExecution",
    )


def test_a_resolution_with_evidence_keeps_the_original_record(
    uncertain: tuple[Session, int, int],
) -> None:
    session, own, comment = uncertain
    record = [e for e in journal_rows(session.path) if e["seq"] == own]
    receipt = submit(session, lambda p: p.add(resolution(1, f"session:event:{comment}")))
    note_id = receipt.cell_ids[0]
    shown = session.state()["runtime"]["cells"]["1"]
    assert shown["resolved_by"] == note_id
    assert shown["result"]["type"] == "UnknownExecution"
    assert [e for e in journal_rows(session.path) if e["seq"] == own] == record
    reject(
        session,
        lambda p: p.add(resolution(1, f"session:event:{comment}")),
        "not an unresolved UnknownExecution",
    )


class Asked:
    """``admission.Facts`` answered from a Session's events, noting every question."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.questions: list[tuple[str, Any]] = []

    def kinds_of(self, seqs: set[int]) -> dict[int, str]:
        self.questions.append(("kinds_of", sorted(seqs)))
        return {e["seq"]: e["kind"] for e in self.session.events() if e["seq"] in seqs}

    def execution_recorded(self, cell_id: int) -> bool:
        self.questions.append(("execution_recorded", cell_id))
        return self.session.find(str(cell_id), "execution_finished") is not None


def test_admission_asks_history_only_what_a_rule_needs(
    uncertain: tuple[Session, int, int],
) -> None:
    """Nothing for a patch no rule about history concerns; the kinds of the seqs a
    resolution cites (none past the last event); whether an Execution was recorded only for a
    cancel target the projection does not hold."""
    session, _, comment = uncertain
    turn = session.prepare_turn()
    proj = session.refresh()
    assert proj.turn is not None

    def asked(build: Build) -> list[tuple[str, Any]]:
        facts, patch = Asked(session), Patch(turn["state"])
        build(patch)
        decide(proj, proj.turn, patch.build(), facts)
        return facts.questions

    assert asked(lambda p: p.add(note_cell("plain")).add(cmd_cell("true"))) == []
    cited = (f"session:event:{comment}", f"session:event:{proj.last_seq + 50}")
    assert asked(lambda p: p.add(resolution(1, *cited))) == [("kinds_of", [comment])]
    assert asked(lambda p: p.add(note_cell("stop", role="cancel", target_cell_id=1))) == []
    assert asked(lambda p: p.add(note_cell("stop", role="cancel", target_cell_id=99))) == [
        ("execution_recorded", 99)
    ]


def test_resolving_a_real_unknown_execution_after_a_killed_owner(rio: Any, tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    assert rio("new", db, "--goal", "g").code == 0
    turn = rio("turn", db).out
    assert (
        rio(
            "step",
            db,
            turn["turn_id"],
            "-",
            input=Patch(turn["state"]).add(cmd_cell("sleep", "30")).build(),
        ).code
        == 0
    )
    owner = subprocess.Popen(
        [PY, "-m", "rio_ci", "work", str(db)],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        until(
            lambda: any(e["kind"] == "worker_registered" for e in journal_rows(db)),
            20,
            "a worker_registered event",
        )
    finally:
        os.kill(owner.pid, signal.SIGKILL)
        owner.wait()
    code_, status, _ = rio("work", db, "--timeout", "20")
    assert code_ == 0, status
    assert status["paused_by"] == "execution:1" and status["ran"] == []
    code_, comment, _ = rio("receive", db, "ops-1", "comment", '{"body": "nothing was deployed"}')
    assert code_ == 0, comment
    turn = rio("turn", db).out
    result = turn["state"]["runtime"]["cells"]["1"]["result"]
    assert result["type"] == "UnknownExecution"
    own = result["evidence_refs"]
    assert turn["state"]["runtime"]["inbox"][-1]["seq"] == comment["seq"]
    bare = Patch(turn["state"]).add(resolution(1, *own)).build()
    before = journal_rows(db)
    code_, out, _ = rio("step", db, turn["turn_id"], "-", input=bare)
    assert code_ == 3 and "own record" in out["rejected"]
    after = journal_rows(db)
    assert after[:-1] == before and after[-1]["kind"] == "patch_rejected"
    good = Patch(turn["state"]).add(resolution(1, f"session:event:{comment['seq']}")).build()
    code_, receipt, _ = rio("step", db, turn["turn_id"], "-", input=good)
    assert code_ == 0, receipt
    assert rio("state", db).out["runtime"]["cells"]["1"]["resolved_by"] == receipt["cell_ids"][0]


# --- 9. the transaction: consumption and the pause -----------------------------------------


def test_an_unrelated_turn_in_flight_cannot_clear_a_newer_pause(session: Session) -> None:
    accept(session, lambda p: p.add(cmd_cell("false")).add(cmd_cell("true")))
    in_flight = session.prepare_turn()  # prepared before the error exists
    start_execution(session, 1)
    end_execution(session, 1, {"type": "error", "exit_code": 1})
    assert session.state()["runtime"]["pause"] == "execution:1"
    ops = Patch(in_flight["state"]).add(note_cell("unrelated")).build()
    assert isinstance(session.step(in_flight["turn_id"], ops), Receipt)
    assert session.state()["runtime"]["pause"] == "execution:1"
    turn = session.prepare_turn()
    assert turn["delivered"] == ["execution:1"]
    submit_ops = Patch(turn["state"]).add(note_cell("seen the error")).build()
    assert isinstance(session.step(turn["turn_id"], submit_ops), Receipt)
    assert session.state()["runtime"]["pause"] is None
    assert session.state()["runtime"]["inbox"] == []


# --- 10. one patch per Turn ----------------------------------------------------------------


def test_a_rejected_patch_does_not_use_up_the_turn(two_notes: Session) -> None:
    turn = two_notes.prepare_turn()
    reason = reject(two_notes, lambda p: p.add(note_cell(id=9)), "take id 3")
    assert two_notes.proj.turn is not None
    assert reason in two_notes.proj.turn["feedback"]
    ops = Patch(turn["state"]).add(note_cell("third")).build()
    receipt = two_notes.step(turn["turn_id"], ops)
    assert isinstance(receipt, Receipt) and receipt.turn_id == turn["turn_id"]


def test_an_identical_resubmission_returns_the_original_receipt(rio: Any) -> None:
    assert rio("new", "s.db", "--goal", "g").code == 0
    turn = rio("turn", "s.db").out
    ops = Patch(turn["state"]).add(cmd_cell("true")).add(note_cell("n")).build()
    code_, receipt, _ = rio("step", "s.db", turn["turn_id"], "-", input=ops)
    assert code_ == 0
    events = rio("events", "s.db").stdout
    for again in (ops, {"patch": ops}):
        assert rio("step", "s.db", turn["turn_id"], "-", input=again).out == receipt
    assert rio("turn", "s.db").code == 0  # the Session moves on; the Receipt stays
    events_now = rio("events", "s.db").stdout
    assert events_now.startswith(events)
    assert [json.loads(line)["kind"] for line in events_now[len(events) :].splitlines()] == [
        "turn_prepared"
    ]
    code_, again, _ = rio("step", "s.db", turn["turn_id"], "-", input=ops)
    assert (code_, again) == (0, receipt)
    executions = [
        e["executions"] for e in rio("events", "s.db").lines if e["kind"] == "patch_accepted"
    ]
    assert executions == [[1]]  # at most one Execution per executable Cell id


def test_a_different_patch_for_an_accepted_turn_is_a_conflict(rio: Any) -> None:
    assert rio("new", "s.db", "--goal", "g").code == 0
    turn = rio("turn", "s.db").out
    assert (
        rio(
            "step",
            "s.db",
            turn["turn_id"],
            "-",
            input=Patch(turn["state"]).add(note_cell("a")).build(),
        ).code
        == 0
    )
    events = rio("events", "s.db").stdout
    code_, out, _ = rio(
        "step", "s.db", turn["turn_id"], "-", input=Patch(turn["state"]).add(note_cell("b")).build()
    )
    assert code_ == 3 and list(out) == ["rejected"]  # docs/cli.md: only {"rejected": reason}
    assert "conflict" in out["rejected"]
    # docs/patches.md: the rejection reason is recorded, as digest + size + reason.
    (added,) = rio("events", "s.db", "--after", str(len(events.splitlines()))).lines
    assert added["kind"] == "patch_rejected" and added["reason"] == out["rejected"]
    assert added["turn_id"] == turn["turn_id"] and added["size"] > 0
    assert len(added["digest"]) == 64 and "patch" not in added


def test_a_resubmission_matches_by_value_and_a_conflict_is_recorded_by_its_own_digest(
    session: Session,
) -> None:
    """The accepted patch again with its keys in another order (another digest) is the same
    patch: its Receipt, nothing recorded. A different one is recorded by its own digest and
    size, which the returned Rejection carries too."""
    turn = session.prepare_turn()
    ops = Patch(turn["state"]).add(note_cell("a")).build()
    receipt = session.step(turn["turn_id"], ops)
    assert isinstance(receipt, Receipt)
    reordered = [dict(reversed(op.items())) for op in ops]
    assert digest(reordered) != digest(ops)
    last = session.proj.last_seq
    assert session.step(turn["turn_id"], {"patch": reordered}) == receipt
    assert session.proj.last_seq == last
    other = Patch(turn["state"]).add(note_cell("b")).build()
    conflict = session.step(turn["turn_id"], other)
    assert isinstance(conflict, Rejection)
    size = len(json.dumps(other, separators=(",", ":")).encode())
    assert (conflict.digest, conflict.size) == (digest(other), size)
    (recorded,) = session.events(after=last)
    assert recorded["kind"] == "patch_rejected"
    assert {k: recorded[k] for k in ("turn_id", "reason", "digest", "size")} == {
        "turn_id": turn["turn_id"],
        "reason": f"conflict: Turn {turn['turn_id']} already accepted a different patch",
        "digest": digest(other),
        "size": size,
    }


def test_a_revision_test_compares_numbers_by_value(rio: Any) -> None:
    """RFC 6902 ``test``: 0.0 equals 0 (a JSON encoder may write either); a boolean does not
    equal 1."""
    assert rio("new", "s.db", "--goal", "g").code == 0
    turn = rio("turn", "s.db").out
    as_float = [
        {"op": "test", "path": "/revision", "value": 0.0},
        *Patch(turn["state"]).add(note_cell("a")).build()[1:],
    ]
    done = rio("step", "s.db", turn["turn_id"], "-", input={"patch": as_float})
    assert done.code == 0 and done.out["revision"] == 1, done.stdout
    turn = rio("turn", "s.db").out  # at revision 1, where true == 1 in Python
    as_true = [
        {"op": "test", "path": "/revision", "value": True},
        *Patch(turn["state"]).add(note_cell("b")).build()[1:],
    ]
    refused = rio("step", "s.db", turn["turn_id"], "-", input={"patch": as_true})
    assert refused.code == 3 and "revision test failed" in refused.out["rejected"]


def test_an_unknown_turn_is_rejected(rio: Any) -> None:
    assert rio("new", "s.db", "--goal", "g").code == 0
    turn = rio("turn", "s.db").out
    events = rio("events", "s.db").stdout
    code_, out, _ = rio(
        "step", "s.db", "turn-1-nosuchturn", "-", input=Patch(turn["state"]).build()
    )
    assert code_ == 3 and list(out) == ["rejected"]  # docs/cli.md: only {"rejected": reason}
    assert "unknown Turn" in out["rejected"]
    assert rio("events", "s.db").stdout == events


def test_a_rejected_patch_via_the_cli_exits_3_and_records_only_the_reason(rio: Any) -> None:
    assert rio("new", "s.db", "--goal", "g").code == 0
    turn = rio("turn", "s.db").out
    before = rio("events", "s.db").lines
    state = rio("state", "s.db").out
    code_, out, _ = rio(
        "step",
        "s.db",
        turn["turn_id"],
        "-",
        input=[
            {"op": "test", "path": "/revision", "value": 0},
            {"op": "replace", "path": "/goal", "value": "mine"},
        ],
    )
    assert code_ == 3 and "belongs to the harness" in out["rejected"]
    after = rio("events", "s.db").lines
    assert after[:-1] == before
    assert (after[-1]["kind"], after[-1]["reason"]) == ("patch_rejected", out["rejected"])
    assert rio("state", "s.db").out == state
    assert rio("turn", "s.db").out == turn


@pytest.mark.parametrize("suffix", ["\n", "\r\n"])
def test_a_cell_path_with_a_trailing_newline_is_rejected_at_the_cli(rio: Any, suffix: str) -> None:
    """``$`` matches before a final newline; ``/cells/0\\n`` must not pass for ``/cells/0``
    (its replacement could never be replayed)."""
    assert rio("new", "s.db", "--goal", "g").code == 0
    turn = rio("turn", "s.db").out
    first = Patch(turn["state"]).add(note_cell("one")).build()
    assert rio("step", "s.db", turn["turn_id"], "-", input=first).code == 0
    turn = rio("turn", "s.db").out
    patch = Patch(turn["state"]).replace(0, note_cell("two")).build()
    patch[-1]["path"] += suffix
    before = rio("events", "s.db").lines

    code_, out, _ = rio("step", "s.db", turn["turn_id"], "-", input=patch)

    assert code_ == 3 and "/cells/N" in out["rejected"]
    after = rio("events", "s.db").lines
    assert after[: len(before)] == before
    assert [e["kind"] for e in after[len(before) :]] == ["patch_rejected"]
    assert [c["text"] for c in rio("state", "s.db").out["cells"]] == ["one"]


@pytest.mark.parametrize("kind", ["execution\n", "comment\n", "timer\n"])
def test_a_message_kind_with_a_trailing_newline_is_rejected(rio: Any, kind: str) -> None:
    assert rio("new", "s.db", "--goal", "g").code == 0
    before = rio("events", "s.db").lines

    done = rio("receive", "s.db", "m-1", kind, "{}")

    assert done.code != 0 and "lowercase word" in done.out["error"]
    assert rio("events", "s.db").lines == before
