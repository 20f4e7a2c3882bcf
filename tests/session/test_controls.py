"""Pauses and Controls through the CLI (docs/sessions.md): errors pause the queue, cancel,
resolution, conclusion success and failure, and the end of a run.

Controls are notes submitted with `rio-ci turn` + `rio-ci step`, often from this process
while a real `rio-ci work` Owner runs in another.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from rio_ci.run.owner import Owner
from tests import session_cli
from tests.kit import Patch, cli_env, cmd_cell, code_cell, note_cell, until
from tests.session_cli import CliSession, New, gone, logged

new = session_cli.new  # the shared fixture


def cancel(target: int) -> dict[str, Any]:
    return note_cell(f"cancel {target}", role="cancel", target_cell_id=target)


def conclude(result: str) -> dict[str, Any]:
    return note_cell(f"conclude {result}", role="conclusion", result=result)


def resolve(target: int, *seqs: int) -> dict[str, Any]:
    return note_cell(
        f"resolve {target}",
        role="resolution",
        target_cell_id=target,
        evidence_refs=[f"session:event:{s}" for s in seqs],
    )


def make_unknown(sess: CliSession, *more: dict[str, Any]) -> dict[str, Any]:
    """Cell 1 becomes an UnknownExecution (the Owner died right after authorising its
    launch); ``more`` Cells wait behind it. Returns the recovering `work`'s output."""
    sess.propose(logged(sess.log, "log('ran')"), *more)
    sess.run(
        "work", str(sess.db), code=-signal.SIGKILL, env=cli_env(RIO_CRASH_AT="launch_before_spawn")
    )
    out = sess.work()
    assert sess.result(1)["type"] == "UnknownExecution"
    return out


def rejections(sess: CliSession) -> list[dict[str, Any]]:
    return [m for m in sess.state()["runtime"]["inbox"] if m["kind"] == "control_rejected"]


# --- pause ------------------------------------------------------------------------------


def test_an_error_pauses_the_queue_until_a_turn_that_saw_it_accepts(new: New) -> None:
    sess = new()
    sess.propose(cmd_cell("false"), cmd_cell("echo", "x"))
    out = sess.work()
    assert out == {"ended": None, "ran": [1], "pending": [2], "paused_by": "execution:1"}
    assert sess.result(1) == {"type": "error", "cell_id": 1, "exit_code": 1}
    assert sess.state()["runtime"]["pause"] == "execution:1"
    assert sess.work()["ran"] == []  # still paused

    turn = sess.turn()
    assert "execution:1" in turn["delivered"]
    sess.propose(note_cell("false failed, go on"), turn=turn)
    assert sess.state()["runtime"]["pause"] is None
    out = sess.work()
    assert out == {"ended": None, "ran": [2], "pending": [], "paused_by": None}
    assert sess.runtime(2)["stdout"] == "x\n"


def test_a_turn_already_in_flight_cannot_clear_a_newer_pause(new: New) -> None:
    sess = new()
    sess.propose(cmd_cell("false"), cmd_cell("echo", "x"))
    old = sess.turn()  # prepared before the error exists
    assert sess.work()["paused_by"] == "execution:1"

    sess.propose(note_cell("unrelated"), turn=old)  # accepted, but it never saw the error
    assert sess.state()["runtime"]["pause"] == "execution:1"
    out = sess.work()
    assert out["ran"] == [] and out["paused_by"] == "execution:1"

    turn = sess.turn()
    assert turn["delivered"] == ["execution:1"]
    sess.propose(note_cell("seen"), turn=turn)
    assert sess.work()["ran"] == [2]


# --- cancel -----------------------------------------------------------------------------


def test_cancel_of_queued_cells_never_launches_them(new: New) -> None:
    sess = new()
    sess.propose(logged(sess.log, "log('A ran')"))  # 1
    # 2 is new work cancelled in the very patch that creates it (3 and 4 are the notes)
    sess.propose(logged(sess.log, "log('B ran')"), cancel(1), cancel(2))
    out = sess.work()
    assert out == {"ended": None, "ran": [], "pending": [], "paused_by": None}
    for cell in (1, 2):
        assert sess.result(cell) == {
            "type": "cancelled",
            "cell_id": cell,
            "reason": "cancelled_before_launch",
        }
        assert sess.runtime(cell)["phase"] == "finished"
    assert sess.events("execution_started") == []
    assert sorted(e["note_id"] for e in sess.events("control_applied")) == [3, 4]
    assert sess.lines() == []


def test_cancel_of_a_running_cell_from_another_process_stops_its_group(new: New) -> None:
    sess = new()
    sess.propose(
        logged(
            sess.log,
            """
        import subprocess, time
        child = subprocess.Popen(["sleep", "60"])
        log("pids", child.pid)
        time.sleep(60)
        """,
        ),
        cmd_cell("echo", "next"),
    )
    owner = sess.start_work()
    until(sess.lines, timeout=30)
    ((_, script, _, child),) = sess.lines()
    leader = sess.events("worker_registered")[0]["identity"]["pid"]

    sess.propose(cancel(1))
    sent = time.monotonic()
    until(lambda: all(gone(p) for p in (leader, int(script), int(child))), timeout=5)
    assert time.monotonic() - sent < 2.5
    stdout, _ = owner.communicate(timeout=10)
    assert owner.returncode == 0, stdout

    result = sess.result(1)
    assert result["type"] == "UnknownExecution"
    assert result["reason"] == "cancelled_after_launch" and result["worker_stopped"] is True
    assert [e["note_id"] for e in sess.events("control_applied")] == [3]
    assert sess.token_holders() == []
    assert [e["cell_id"] for e in sess.events("execution_started")] == [1]  # 2 waits (paused)


def test_cancel_while_another_cell_occupies_the_slot_is_handled_at_once(new: New) -> None:
    """A holds the Worker slot until the test has seen B cancelled, so the cancel can only
    have been applied while A ran: no sleep decides the outcome."""
    sess = new()
    gate = sess.cwd / "gate"
    sess.propose(
        logged(
            sess.log,
            f"""
            import os, time
            log('A', 'start')
            while not os.path.exists({str(gate)!r}):
                time.sleep(0.01)
            log('A')
            """,
        ),
        logged(sess.log, "log('B', 'ran')"),
    )
    owner = sess.start_work()
    until(sess.lines, timeout=60)
    sess.propose(cancel(2))
    cancelled = until(lambda: sess.runtime(2).get("result"), timeout=60, what="B cancelled")
    assert cancelled["type"] == "cancelled"
    assert sess.runtime(1)["phase"] == "started"
    gate.touch()
    owner.communicate(timeout=60)
    assert owner.returncode == 0

    finished = {e["cell_id"]: e["seq"] for e in sess.events("execution_finished")}
    assert finished[2] < finished[1]
    assert sess.result(1)["type"] == "success"
    assert [e["cell_id"] for e in sess.events("execution_started")] == [1]
    assert [line[2] for line in sess.lines()] == ["A", "A"]


def test_a_control_committed_just_before_dispatch_goes_first(new: New) -> None:
    """The Owner looked (no Control), another process commits a cancel, then the Owner
    dispatches: the cancel must still win and nothing may launch."""
    sess = new()
    sess.propose(logged(sess.log, "log('ran')"))
    owner = Owner(str(sess.db))
    try:
        owner.recover()  # the Owner's view: cell 1 queued, no Control
        sess.propose(cancel(1))  # committed by another process meanwhile
        owner.dispatch()
        while not owner.idle():
            owner.tick()
    finally:
        owner.close()
    assert sess.events("execution_started") == []
    assert sess.result(1)["type"] == "cancelled"
    assert sess.lines() == []


# --- resolution -------------------------------------------------------------------------


def test_resolution_needs_evidence_of_another_observation(new: New) -> None:
    sess = new()
    make_unknown(sess)
    record = sess.events("execution_finished")[0]
    own = record["seq"]
    assert record["result"]["evidence_refs"] == [f"session:event:{own}"]
    started = sess.events("execution_started")[0]["seq"]

    turn = sess.turn()
    assert turn["delivered"] == ["execution:1"]
    for bad, why in [
        (resolve(1), "evidence_refs"),  # no evidence at all
        (resolve(1, own), "own record"),  # the target's record / its notice
        (resolve(1, started), "not a committed observation"),
        (resolve(1, 10_000), "not a committed observation"),
    ]:
        count = len(sess.events())
        rejected = sess.propose(bad, turn=turn, code=3)
        assert why in rejected["rejected"]
        assert sess.state()["runtime"]["cells"]["1"]["resolved_by"] is None
        assert len(sess.events()) == count + 1  # only the patch_rejected record

    # Look again: a new Cell whose result is the evidence.
    sess.propose(cmd_cell("echo", "no side effect happened"), turn=turn)
    assert sess.work()["ran"] == [2]
    evidence = sess.events("execution_finished")[1]["seq"]

    receipt = sess.propose(resolve(1, evidence))
    note_id = receipt["cell_ids"][0]
    assert sess.runtime(1)["resolved_by"] == note_id
    assert sess.events("execution_finished")[0] == record  # history unchanged
    assert sess.result(1) == record["result"]
    again = sess.propose(resolve(1, evidence), code=3)  # nothing left to resolve
    assert "not an unresolved UnknownExecution" in again["rejected"]


# --- conclusion -------------------------------------------------------------------------


def assert_success_rejected(sess: CliSession, why: str) -> None:
    assert sess.events("run_ended") == []
    found = rejections(sess)
    assert len(found) == 1 and why in found[0]["payload"]["reason"], found
    assert found[0]["id"] == f"control:{found[0]['payload']['note_id']}"
    count = len(sess.events())
    assert sess.work()["ended"] is None
    assert len(sess.events()) == count  # a new request needs a new note


def test_success_is_rejected_while_work_is_pending(new: New) -> None:
    sess = new()
    sess.propose(cmd_cell("echo", "x"), conclude("success"))
    out = sess.work()
    assert out["ended"] is None and out["ran"] == [1]
    rejected = sess.events("control_rejected")[0]["seq"]
    assert rejected < sess.events("execution_started")[0]["seq"]  # Controls come first
    assert_success_rejected(sess, "work is pending")


def test_success_is_rejected_while_uncertainty_is_unresolved(new: New) -> None:
    sess = new()
    make_unknown(sess)
    sess.propose(conclude("success"))
    sess.work()
    assert_success_rejected(sess, "uncertainty is unresolved")


def test_success_is_rejected_while_a_timer_waits(new: New) -> None:
    sess = new()
    sess.propose(
        code_cell("""
        import time
        from rio_ci.api import timer
        timer("later", time.time() + 3600, {"why": "check back"})
        """)
    )
    sess.work()
    assert sess.result(1)["type"] == "success"
    sess.propose(conclude("success"))
    sess.work()
    assert_success_rejected(sess, "Timers are waiting")


def test_a_cancelled_timer_no_longer_blocks_success(new: New) -> None:
    sess = new()
    sess.propose(
        code_cell("""
        import json, time
        from rio_ci.api import cancel_timer, timer
        timer("later", time.time() + 3600, {"why": "check back"})
        print(json.dumps([cancel_timer("later"), cancel_timer("later")]))
        """)
    )
    sess.work()
    assert sess.result(1)["type"] == "success", sess.runtime(1)
    first, again = json.loads(sess.runtime(1)["stdout"])
    assert first == {"id": "later", "cancelled": True}
    assert again == {"id": "later", "cancelled": False}
    assert sess.state()["runtime"]["pause"] is None
    assert [e["id"] for e in sess.events("timer_cancelled")] == ["later"]
    sess.propose(conclude("success"))
    sess.work()
    assert [e["result"] for e in sess.events("run_ended")] == ["success"]
    assert sess.events("timer_fired") == []


def test_success_is_rejected_while_input_is_unconsumed(new: New) -> None:
    sess = new()
    turn = sess.turn()
    sess.receive("comment-1", "comment", {"body": "wait, one more thing"})
    sess.propose(conclude("success"), turn=turn)
    sess.work()
    assert_success_rejected(sess, "unconsumed")


def test_success_is_rejected_when_a_validator_fails(new: New) -> None:
    sess = new(validators=["python3 -c 'import sys; print(\"nope\"); sys.exit(1)'"])
    sess.propose(conclude("success"))
    sess.work()
    assert_success_rejected(sess, "validator 0")
    (result,) = sess.events("validator_result")
    assert result["result"] == {"type": "error", "exit_code": 1}
    assert result["stdout"] == "nope\n"


def test_input_arriving_while_validators_run_rejects_success(tmp_path: Path, new: New) -> None:
    marker = tmp_path / "validating"
    slow = (
        f'{sys.executable} -c \'import pathlib, time; pathlib.Path("{marker}").touch(); '
        "time.sleep(1.5)'"
    )
    sess = new(validators=[slow])
    sess.propose(conclude("success"))
    owner = sess.start_work()
    until(marker.exists, timeout=30)
    sess.receive("comment-1", "comment", {"body": "one more thing"})
    owner.communicate(timeout=30)
    assert owner.returncode == 0
    assert sess.events("validator_result")[0]["result"]["type"] == "success"
    assert_success_rejected(sess, "unconsumed (['comment-1'])")


def test_a_validator_that_leaves_a_process_behind_does_not_stall(new: New) -> None:
    sess = new(validators=["sh -c 'sleep 300 & echo checked'"], limits=["execution_seconds=20"])
    sess.propose(conclude("success"))
    started = time.monotonic()
    assert sess.work()["ended"] == {"result": "success", "reason": "conclusion accepted"}
    assert time.monotonic() - started < 8  # not the whole execution_seconds
    (validated,) = sess.events("validator_result")
    assert validated["result"] == {"type": "success", "exit_code": 0}
    assert validated["stdout"] == "checked\n"
    assert sess.token_holders() == []  # the leftover sleep was stopped


def test_success_is_accepted_when_clean_and_the_run_stays_ended(new: New) -> None:
    where = f"{sys.executable} -c 'import os; print(os.getcwd())'"
    sess = new(validators=[where, "true"])
    sess.propose(cmd_cell("echo", "x"))
    sess.work()
    sess.propose(conclude("success"))  # this Turn consumes execution:1
    assert sess.work() == {
        "ended": {"result": "success", "reason": "conclusion accepted"},
        "ran": [],
        "pending": [],
        "paused_by": None,
    }
    validated = sess.events("validator_result")
    assert [v["result"]["type"] for v in validated] == ["success", "success"]
    assert validated[0]["stdout"] == f"{sess.cwd}\n"
    kinds = [e["kind"] for e in sess.events()][-4:]
    assert kinds == ["validator_result", "validator_result", "control_applied", "run_ended"]
    assert_terminal(sess, code=0)


def assert_terminal(sess: CliSession, code: int) -> None:
    """A terminal run is never revived: work commits nothing; turn and receive fail."""
    count = len(sess.events())
    sess.run("work", str(sess.db), code=code)
    assert len(sess.events()) == count
    assert "ended" in sess.json("turn", str(sess.db), code=1)["error"]
    sess.receive("late", "comment", {}, code=1)
    assert len(sess.events()) == count


def test_failure_cancels_queued_work_and_keeps_the_uncertainty(new: New) -> None:
    sess = new()
    make_unknown(sess, logged(sess.log, "log('second ran')"))
    turn = sess.turn()
    assert turn["delivered"] == ["execution:1"]  # so the pause clears with this patch
    sess.propose(conclude("failure"), turn=turn)
    out = sess.work(code=1)
    assert out["ended"] == {"result": "failure", "reason": "conclusion: failure"}
    assert out["ran"] == [] and out["pending"] == []
    assert sess.result(2) == {"type": "cancelled", "cell_id": 2, "reason": "cancelled_by_failure"}
    assert [e["cell_id"] for e in sess.events("execution_started")] == [1]
    (ended,) = sess.events("run_ended")
    unknown = sess.result(1)
    assert ended["result"] == "failure"
    assert ended["unresolved"] == [
        {"cell_id": 1, "reason": unknown["reason"], "evidence_refs": unknown["evidence_refs"]}
    ]
    shown = sess.run("show", str(sess.db))  # the readable summary keeps the list too
    assert f"unresolved: cell 1 ({unknown['reason']})" in shown.stdout, shown.stdout
    assert sess.lines() == []
    assert_terminal(sess, code=1)


def test_failure_while_a_cell_runs_stops_it(new: New) -> None:
    sess = new()
    sess.propose(logged(sess.log, "import time; log('up'); time.sleep(60)"))
    owner = sess.start_work()
    until(sess.lines, timeout=30)
    ((_, script, _),) = sess.lines()
    sess.propose(conclude("failure"))
    stdout, _ = owner.communicate(timeout=10)
    assert owner.returncode == 1, stdout
    assert gone(int(script)) and sess.token_holders() == []
    result = sess.result(1)
    assert result["type"] == "UnknownExecution" and result["worker_stopped"] is True
    (ended,) = sess.events("run_ended")
    assert [u["cell_id"] for u in ended["unresolved"]] == [1]
    assert ended["cleanup_error"] is None


def test_a_bad_patch_from_another_process_changes_nothing(new: New) -> None:
    sess = new()
    turn = sess.turn()
    ops = Patch(turn["state"]).add(cmd_cell("echo")).build()
    ops.append({"op": "replace", "path": "/goal", "value": "something else"})
    count = len(sess.events())
    assert "belongs to the harness" in sess.step(turn["turn_id"], ops, code=3)["rejected"]
    assert len(sess.events()) == count + 1
    assert sess.work()["ran"] == []
