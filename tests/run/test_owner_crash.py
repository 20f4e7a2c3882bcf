"""Crashes of real `rio-ci` processes (docs/sessions.md): SIGKILL at named crash points
(RIO_CRASH_AT) and kill -9 from outside, then recovery by the next `rio-ci work`.

An external side-effect log (outside the Session) shows how often a script really ran: a
script whose launch was authorised is never run again automatically.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import psutil
import pytest

from tests import session_cli
from tests.kit import Patch, cli_env, cmd_cell, note_cell, until
from tests.session_cli import CliSession, New, gone, logged

new = session_cli.new  # the shared fixture

KILLED = -signal.SIGKILL


def crash(point: str) -> dict[str, str]:
    return cli_env(RIO_CRASH_AT=point)


def consume_and_work(sess: CliSession) -> dict[str, Any]:
    """What the model does after an error: a Turn that was delivered it, a plain note."""
    sess.propose(note_cell("seen the result"))
    return sess.work()


def starts_of(sess: CliSession, cell_id: int) -> int:
    return sum(1 for e in sess.events("execution_started") if e["cell_id"] == cell_id)


# --- accepting a patch ------------------------------------------------------------------


def kill_owner_once_logged(sess: CliSession) -> list[list[str]]:
    """Start an Owner, SIGKILL it once a Cell has written to the side-effect log (its Worker
    lives on), and return that log."""
    owner = sess.start_work()
    until(sess.lines, 30, "a Cell to write to the side-effect log")
    owner.kill()
    owner.wait(timeout=10)
    return sess.lines()


def test_crash_after_the_patch_commit_leaves_the_work_queued(new: New) -> None:
    sess = new()
    turn = sess.turn()
    ops = Patch(turn["state"]).add(logged(sess.log, "log('ran')")).build()
    assert sess.step(turn["turn_id"], ops, code=KILLED, env=crash("accept_after_commit")) == {}

    assert sess.runtime(1)["phase"] == "queued"
    count = len(sess.events())
    # The client never saw its Receipt: re-submitting returns it and commits nothing.
    receipt = sess.step(turn["turn_id"], ops)
    assert receipt["cell_ids"] == [1] and len(sess.events()) == count

    out = sess.work()
    assert out["ran"] == [1] and sess.result(1)["type"] == "success"
    assert len(sess.lines()) == 1


def test_crash_inside_the_accept_transaction_commits_nothing(new: New) -> None:
    sess = new()
    turn = sess.turn()
    ops = Patch(turn["state"]).add(logged(sess.log, "log('ran')")).build()
    count = len(sess.events())
    sess.step(turn["turn_id"], ops, code=KILLED, env=crash("accept_before_commit"))
    assert len(sess.events()) == count
    assert sess.state()["cells"] == []
    assert sess.step(turn["turn_id"], ops)["cell_ids"] == [1]  # the Turn was not used up


# --- between launch authorisation and the result commit ---------------------------------


@pytest.mark.parametrize(
    ("point", "reason"),
    [
        ("launch_before_spawn", "owner_lost_after_launch_authorisation"),
        ("worker_before_release", "worker_lost_before_result_commit"),
    ],
)
def test_crash_before_the_script_launched_is_unknown_and_never_runs(
    new: New, point: str, reason: str
) -> None:
    sess = new()
    sess.propose(logged(sess.log, "log('ran')"), cmd_cell("echo", "second"))
    sess.run("work", str(sess.db), code=KILLED, env=crash(point))
    assert [e["cell_id"] for e in sess.events("execution_started")] == [1]
    assert sess.runtime(1)["phase"] == "started"

    out = sess.work()

    assert out == {"ended": None, "ran": [], "pending": [2], "paused_by": "execution:1"}
    result = sess.result(1)
    seq = next(e["seq"] for e in sess.events("execution_finished"))
    assert result == {
        "type": "UnknownExecution",
        "cell_id": 1,
        "reason": reason,
        "worker_stopped": True,
        "evidence_refs": [f"session:event:{seq}"],
    }
    notice = [m for m in sess.state()["runtime"]["inbox"] if m["id"] == "execution:1"]
    assert notice == [{"id": "execution:1", "kind": "execution", "payload": result, "seq": seq}]
    time.sleep(0.3)  # a gate that had been left waiting would have launched by now
    assert sess.lines() == []
    assert sess.token_holders() == []
    assert consume_and_work(sess)["ran"] == [2]
    assert sess.lines() == [] and starts_of(sess, 1) == 1


@pytest.mark.parametrize("point", ["script_running", "result_before_commit"])
def test_crash_after_release_is_unknown_and_never_reruns(new: New, point: str) -> None:
    sess = new()
    sess.propose(logged(sess.log, "log('ran')"), cmd_cell("echo", "second"))
    sess.run("work", str(sess.db), code=KILLED, env=crash(point))
    assert sess.events("execution_finished") == []

    out = sess.work()

    assert out["ran"] == [] and out["paused_by"] == "execution:1"
    result = sess.result(1)
    assert result["type"] == "UnknownExecution"
    assert result["reason"] == "worker_lost_before_result_commit"
    assert len(sess.lines()) <= 1
    if point == "result_before_commit":
        assert len(sess.lines()) == 1  # it did run, exactly once
    assert consume_and_work(sess)["ran"] == [2]
    assert len(sess.lines()) <= 1 and starts_of(sess, 1) == 1


def test_kill_9_while_the_script_runs(new: New) -> None:
    sess = new()
    sess.propose(
        logged(sess.log, "import time; log('ran'); time.sleep(60)"), cmd_cell("echo", "second")
    )
    ((_, pid, _),) = kill_owner_once_logged(sess)
    assert not gone(int(pid)), "the script should outlive its Owner"

    out = sess.work()

    assert out["ran"] == [] and out["paused_by"] == "execution:1" and out["pending"] == [2]
    result = sess.result(1)
    assert result["type"] == "UnknownExecution" and result["worker_stopped"] is True
    assert result["reason"] == "worker_lost_before_result_commit"
    assert gone(int(pid)) and sess.token_holders() == []
    assert len(sess.lines()) == 1

    # A second recovery in a row commits nothing.
    count = len(sess.events())
    assert sess.work()["ran"] == []
    assert len(sess.events()) == count

    assert consume_and_work(sess)["ran"] == [2]
    assert len(sess.lines()) == 1 and starts_of(sess, 1) == 1
    assert [e["cell_id"] for e in sess.events("execution_finished")] == [1, 2]


def test_a_crash_in_the_middle_of_recovery_is_recovered_once(new: New) -> None:
    sess = new()
    sess.propose(logged(sess.log, "import time; log('ran'); time.sleep(60)"))
    ((_, pid, _),) = kill_owner_once_logged(sess)

    # Workers stopped, the UnknownExecution not yet committed: then the Owner dies.
    sess.run("work", str(sess.db), code=KILLED, env=crash("recovery_midway"))
    assert gone(int(pid)) and sess.events("execution_finished") == []

    for _ in range(2):
        assert sess.work()["paused_by"] == "execution:1"
        assert [e["cell_id"] for e in sess.events("execution_finished")] == [1]
    assert sess.result(1)["reason"] == "worker_lost_before_result_commit"
    assert len(sess.lines()) == 1


def test_work_on_a_fresh_session_commits_nothing(new: New) -> None:
    sess = new()
    count = len(sess.events())
    for _ in range(2):
        assert sess.work() == {"ended": None, "ran": [], "pending": [], "paused_by": None}
    assert len(sess.events()) == count


# --- survivors of a crash ----------------------------------------------------------------

CHILD_AND_SLEEP = """
    import subprocess, time
    child = subprocess.Popen(["sleep", "300"])
    log("pids", child.pid)
    time.sleep(300)
    """
# The next queued Cell checks, from inside, that the old Worker and its child are gone.
CHECK_OLD = """
    def alive(pid):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except FileNotFoundError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    first = open(LOG).read().splitlines()[0].split()
    log("second", alive(int(first[1])), alive(int(first[3])))
    """


def test_a_surviving_worker_and_its_child_are_stopped_before_new_work(new: New) -> None:
    sess = new()
    check = CHECK_OLD.replace("LOG", repr(str(sess.log)))
    sess.propose(logged(sess.log, CHILD_AND_SLEEP), logged(sess.log, check))
    ((_, script, _, child),) = kill_owner_once_logged(sess)
    leader = sess.events("worker_registered")[0]["identity"]["pid"]
    survivors = [leader, int(script), int(child)]
    assert not any(gone(pid) for pid in survivors), "the Worker should outlive its Owner"

    out = sess.work()

    assert out["ran"] == [] and out["paused_by"] == "execution:1"
    assert all(gone(pid) for pid in survivors), [psutil.pid_exists(p) for p in survivors]
    assert sess.result(1)["reason"] == "worker_lost_before_result_commit"
    assert consume_and_work(sess)["ran"] == [2]
    assert sess.lines()[1][2:] == ["second", "False", "False"]
    assert starts_of(sess, 1) == 1


def test_a_lost_leader_with_a_surviving_group_fails_recovery_closed(new: New) -> None:
    sess = new()
    sess.propose(logged(sess.log, CHILD_AND_SLEEP), cmd_cell("echo", "second"))
    ((_, script, _, child),) = kill_owner_once_logged(sess)
    leader = sess.events("worker_registered")[0]["identity"]["pid"]
    psutil.Process(leader).kill()  # uv, the group leader; its script and child live on
    until(lambda: gone(leader), 10)
    assert not gone(int(script)) and not gone(int(child))
    count = len(sess.events())

    failed = sess.run("work", str(sess.db), code=4)

    assert "lost leader" in failed.stdout
    assert len(sess.events()) == count  # nothing committed, nothing launched
    assert not gone(int(script)) and not gone(int(child))  # not signalled: no proof

    for pid in (int(script), int(child)):
        psutil.Process(pid).kill()
    until(lambda: gone(int(script)) and gone(int(child)), 10)
    out = sess.work()
    assert out["paused_by"] == "execution:1" and out["ran"] == []
    assert sess.result(1)["type"] == "UnknownExecution"
