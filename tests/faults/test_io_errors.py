"""I/O errors under the Journal (docs/sessions.md): a failed fsync, a failed write, a full disk.

Through the recording VFS (in process, the real Journal/Session code over APSW) and through
libfiu (``fiu-utils``; real ``rio-ci`` processes, stdlib sqlite3): the process stops admitting,
publishes nothing uncommitted, and a reopen is consistent — the operation that failed is
either wholly there or wholly absent, and retrying it lands it exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
import pytest

from rio_ci.core.errors import UncertainCommit
from rio_ci.session.session import Receipt, Session
from rio_ci.session.settings import Settings
from tests.faults import checks, runner
from tests.faults.vfs import RecordingVFS, recorded_session
from tests.faults.workload import Plan
from tests.kit import cli_env, until

ERRORS = {
    "fsync": ("sync", apsw.SQLITE_IOERR_FSYNC),
    "write": ("write", apsw.SQLITE_IOERR_WRITE),
    "full disk": ("write", apsw.SQLITE_FULL),
}


def arm(vfs: RecordingVFS, kind: str, code: int) -> None:
    """The next ``kind`` operation on the WAL fails with SQLite error ``code``."""

    def fail(op: str, file: str) -> BaseException | None:
        if op == kind and file == "wal":
            vfs.fail = None
            return apsw.exception_for(code)
        return None

    vfs.fail = fail


def assert_stopped(session: Session) -> None:
    """A poisoned Journal admits nothing and shows nothing until it is reopened."""
    assert session.journal.poisoned
    attempts: list[Callable[[], Any]] = [
        lambda: session.receive("later", "comment", {}),
        session.prepare_turn,
        session.state,
        lambda: session.set_timer("later", time.time(), None),
        lambda: session.step("turn-x", [{"op": "test", "path": "/revision", "value": 0}]),
    ]
    for attempt in attempts:
        with pytest.raises(UncertainCommit):
            attempt()


def assert_consistent(db: Path) -> list[dict[str, Any]]:
    fresh = Session.open(db, verify=True)
    try:
        assert fresh.journal.replay().to_dict() == fresh.proj.to_dict()
        return list(fresh.events())
    finally:
        fresh.close()


@pytest.fixture
def recorded(disk_path: Path) -> Any:
    db = disk_path / "session.db"
    Session.create(db, "I/O errors", Settings(cwd=str(disk_path))).close()
    vfs = RecordingVFS(db)
    session = recorded_session(db, vfs, "FULL")
    yield db, vfs, session
    session.close()
    vfs.unregister()


@pytest.mark.parametrize("error", sorted(ERRORS))
def test_a_failed_commit_of_a_message_stops_and_reopens_consistently(
    recorded: Any, error: str, fault_report: dict[str, Any]
) -> None:
    db, vfs, session = recorded
    session.receive("before", "comment", {"n": 0})
    arm(vfs, *ERRORS[error])
    with pytest.raises(UncertainCommit):
        session.receive("m1", "comment", {"n": 1})
    assert_stopped(session)
    session.journal.reopen()  # the real recovery path: drop the projection, read the file
    events = assert_consistent(db)
    landed = [e for e in events if e["kind"] == "message_received" and e["message"]["id"] == "m1"]
    assert len(landed) <= 1
    again = session.receive("m1", "comment", {"n": 1})  # the sender retries: exactly once
    assert again["duplicate"] == bool(landed)
    assert (
        sum(
            e["kind"] == "message_received" and e["message"]["id"] == "m1"
            for e in assert_consistent(db)
        )
        == 1
    )
    fault_report.setdefault("I/O errors", {})[f"receive/{error}"] = (
        "committed anyway" if landed else "not committed"
    )


@pytest.mark.parametrize("error", sorted(ERRORS))
def test_a_failed_commit_of_a_patch_is_never_applied_twice(
    recorded: Any, error: str, fault_report: dict[str, Any]
) -> None:
    db, vfs, session = recorded
    turn = session.prepare_turn()
    plan = Plan(turn["state"])
    plan.add({"kind": "cmd", "argv": ["true"]})
    arm(vfs, *ERRORS[error])
    with pytest.raises(UncertainCommit):
        session.step(turn["turn_id"], plan.ops)
    assert_stopped(session)
    session.journal.reopen()
    landed = [e for e in assert_consistent(db) if e["kind"] == "patch_accepted"]
    retry = session.step(turn["turn_id"], plan.ops)  # the model's saved reply, re-admitted
    assert isinstance(retry, Receipt)
    events = assert_consistent(db)
    assert sum(e["kind"] == "patch_accepted" for e in events) == 1
    assert list(session.refresh().executions) == ["1"]  # one Execution, not two
    fault_report.setdefault("I/O errors", {})[f"step/{error}"] = (
        "committed anyway" if landed else "not committed"
    )


# --- libfiu: real processes, the stdlib sqlite3 path ----------------------------------------


def fiu() -> str:
    path = shutil.which("fiu-run")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("fiu-run is missing: .ci/run must install fiu-utils")
        pytest.skip("fiu-run not installed (apt-get install -y fiu-utils)")
    return path


def cli(*args: str, prefix: tuple[str, ...] = (), cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "rio_ci", *args],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_rio_ci_receive_with_failing_fsync_acknowledges_nothing(disk_path: Path) -> None:
    fiu_run = fiu()
    assert cli("new", "s.db", "--goal", "fiu", cwd=disk_path).returncode == 0
    failing = (fiu_run, "-x", "-c", "enable name=posix/io/sync/*")
    done = cli("receive", "s.db", "m1", "comment", "{}", prefix=failing, cwd=disk_path)
    assert done.returncode == 4, done.stderr
    assert "outcome is unknown" in json.loads(done.stdout)["error"]  # and no {"id", "seq"}
    assert_consistent(disk_path / "s.db")
    retry = cli("receive", "s.db", "m1", "comment", "{}", cwd=disk_path)
    assert retry.returncode == 0
    assert sum(e["kind"] == "message_received" for e in assert_consistent(disk_path / "s.db")) == 1


# Prints one line, then one more once ``poke`` exists (the output commit that fails), then
# sleeps without touching its pipes: no broken pipe can end it, so once its Owner is gone only
# the Owner's own stop of the Worker leaves no Worker behind.
QUIET = '''"""Record the run, print twice, then stay alive and silent."""
import os
import time

fd = os.open("effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, f"{os.environ.get('RIO_CELL_ID')} quiet {os.getpid()}\\n".encode())
os.fsync(fd)
os.close(fd)
print("started", flush=True)
while not os.path.exists("poke"):
    time.sleep(0.02)
print("poked", flush=True)
time.sleep(60)
print("done", flush=True)
'''


@pytest.mark.parametrize("failure", ["posix/io/sync/*", "posix/io/rw/pwrite*"])
def test_owner_whose_commits_start_failing_stops_its_worker_and_recovers(
    disk_path: Path, failure: str, fault_report: dict[str, Any]
) -> None:
    """docs/sessions.md: a commit whose outcome is uncertain stops the Owner's local Workers. The
    script outlives its Owner unless stopped, so "no Worker left" is the Owner's doing."""
    fiu_run, fiu_ctrl = fiu(), shutil.which("fiu-ctrl")
    assert fiu_ctrl
    (disk_path / "effect.py").write_text(QUIET)
    db = disk_path / "s.db"
    session = Session.create(db, "fiu owner", Settings(cwd=str(disk_path)))
    turn = session.prepare_turn()
    plan = Plan(turn["state"])
    plan.effect("quiet")
    assert isinstance(session.step(turn["turn_id"], plan.ops), Receipt)
    session_id = session.proj.session["id"]
    session.close()
    ctrl = str(disk_path / "fiu-ctrl")
    owner = subprocess.Popen(
        [fiu_run, "-x", "-f", ctrl, sys.executable, "-m", "rio_ci", "work", str(db)],
        cwd=disk_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        until(lambda: (disk_path / "effects.log").exists(), 20)
        time.sleep(0.3)  # "started" committed
        assert checks.leftover_workers(session_id), "the Worker runs before the failure"
        subprocess.run(
            [fiu_ctrl, "-f", ctrl, "-c", f"enable name={failure}", str(owner.pid)],
            check=True,
            timeout=10,
        )
        (disk_path / "poke").touch()  # "poked": an output commit that fails
        out, err = owner.communicate(timeout=30)
        assert owner.returncode == 4, err
        assert "outcome is unknown" in json.loads(out.splitlines()[-1])["error"]
        until(
            lambda: not checks.leftover_workers(session_id),
            5,
            "the Worker to stop with its Owner's failed commit",
        )
    finally:
        runner.kill_tree(owner.pid)
        for pid in checks.leftover_workers(session_id):  # the Worker, if the Owner left it
            runner.kill_tree(pid)
    before = {
        e["cell_id"]: e["result"]["type"]
        for e in assert_consistent(db)
        if e["kind"] == "execution_finished"
    }
    again = cli("work", str(db), cwd=disk_path)  # a new Owner, storage healthy again
    assert again.returncode == 0, again.stderr
    events = assert_consistent(db)
    results = [e["result"]["type"] for e in events if e["kind"] == "execution_finished"]
    assert results == ["UnknownExecution"]  # the script's end was never committed
    assert checks.effects(disk_path)[1] == 1  # and it was not run again
    fault_report.setdefault("I/O errors", {})[f"owner/{failure}"] = (
        f"result before recovery: {before.get(1, 'none')}"
    )
