"""Worker gate, output, exit status, stop and recovery-time stop_survivors, on real processes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import psutil
import pytest

from rio_ci.core.errors import RecoveryError
from rio_ci.run.confinement import spawn as spawning
from rio_ci.run.survivors import StopReport, WorkerIdentity, find_token_holders, stop_survivors
from rio_ci.run.worker import GATE_REFUSED, Worker
from tests.kit import until

PY = sys.executable
ROOT = Path(__file__).resolve().parents[2]
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

Spawn = Callable[[Sequence[str]], Worker]


def gone(pid: int) -> bool:
    """Dead for our purposes: no such process, or a zombie nobody reaped yet."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def kill_tokens(tokens: Sequence[str]) -> None:
    for token in tokens:
        for pid in find_token_holders(token):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def collect(worker: Worker, timeout: float = 5.0) -> list[tuple[str, bytes]]:
    """Every chunk until both streams reach EOF."""
    chunks: list[tuple[str, bytes]] = []
    deadline = time.monotonic() + timeout
    while not worker.output_eof and time.monotonic() < deadline:
        chunks += worker.read_output(0.1)
    assert worker.output_eof, "output never reached EOF"
    return chunks


def read_lines(worker: Worker, count: int, timeout: float = 5.0) -> list[str]:
    """The first ``count`` stdout lines, without waiting for EOF."""
    buffer = b""
    deadline = time.monotonic() + timeout
    while buffer.count(b"\n") < count and time.monotonic() < deadline:
        buffer += b"".join(d for s, d in worker.read_output(0.1) if s == "stdout")
    lines = buffer.decode().splitlines()
    assert len(lines) >= count, lines
    return lines


@pytest.fixture
def tokens() -> Iterator[list[str]]:
    made: list[str] = []
    yield made
    kill_tokens(made)


@pytest.fixture
def spawn(tmp_path: Path, tokens: list[str]) -> Iterator[Spawn]:
    workers: list[Worker] = []

    def make(argv: Sequence[str]) -> Worker:
        tokens.append(uuid.uuid4().hex)
        worker = Worker.spawn(argv, tmp_path, ENV, tokens[-1])
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        with contextlib.suppress(RecoveryError):
            worker.stop(grace=0.2)
        worker.close()


def test_gate_holds_until_release(spawn: Spawn, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    worker = spawn(["touch", str(marker)])
    assert worker.identity.pgid == worker.identity.pid
    assert os.getpgid(worker.identity.pid) == worker.identity.pid
    time.sleep(0.3)
    assert not marker.exists()
    assert worker.poll() is None
    worker.release()
    assert worker.wait(5) == 0
    assert marker.exists()


def test_a_confinements_wrapper_runs_first_and_the_gate_keeps_its_pid(
    tmp_path: Path, tokens: list[str]
) -> None:
    """A confinement may start the gate through a wrapper (``Spawn.prefix``, which must exec
    what it is given: a namespace's, say). The wrapper runs before the gate and the gate
    keeps its pid, so the identity the Owner commits is still the process that runs argv."""
    tokens.append(uuid.uuid4().hex)
    wrapper = spawning.Spawn(prefix=("/usr/bin/env", "RIO_TEST_WRAPPED=yes"))
    script = "import os; print(os.getpid(), os.environ.get('RIO_TEST_WRAPPED'))"
    worker = Worker.spawn([PY, "-c", script], tmp_path, ENV, tokens[-1], wrapper)
    try:
        worker.release()
        out = b"".join(d for s, d in collect(worker) if s == "stdout").decode().split()
        assert worker.wait(5) == 0
    finally:
        worker.stop(grace=0.2)
        worker.close()
    assert out == [str(worker.identity.pid), "yes"]


@pytest.mark.parametrize("line", [b"gox\n", b" go\n", b"go", b"no\n", b""])
def test_wrong_gate_line_runs_nothing(spawn: Spawn, tmp_path: Path, line: bytes) -> None:
    marker = tmp_path / "ran"
    worker = spawn(["touch", str(marker)])
    worker._write_gate(line)
    assert worker.wait(5) == GATE_REFUSED
    assert not marker.exists()


def test_refuse(spawn: Spawn, tmp_path: Path) -> None:
    worker = spawn(["touch", str(tmp_path / "ran")])
    worker.refuse()
    assert worker.wait(5) == GATE_REFUSED
    assert not (tmp_path / "ran").exists()


def test_output_chunks_name_their_stream(spawn: Spawn) -> None:
    script = (
        "import sys; sys.stdout.write('to-out'); sys.stdout.flush(); sys.stderr.write('to-err')"
    )
    worker = spawn([PY, "-c", script])
    assert worker.read_output(0.2) == []  # gated: nothing can have been written
    worker.release()
    chunks = collect(worker)
    assert {stream for stream, _ in chunks} <= {"stdout", "stderr"}
    assert b"".join(d for s, d in chunks if s == "stdout") == b"to-out"
    assert b"".join(d for s, d in chunks if s == "stderr") == b"to-err"
    assert worker.read_output(0.5) == []  # EOF on both: returns at once, nothing more
    assert worker.wait(5) == 0


def test_released_script_reads_eof_on_stdin(spawn: Spawn) -> None:
    worker = spawn([PY, "-c", "import sys; print(repr(sys.stdin.read()))"])
    worker.release()
    assert b"".join(d for s, d in collect(worker) if s == "stdout") == b"''\n"


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["sh", "-c", "exit 3"], 3),
        (["true"], 0),
        (["sh", "-c", "kill -TERM $$"], 128 + signal.SIGTERM),
        (["/nonexistent/program"], 127),
    ],
)
def test_exit_status(spawn: Spawn, argv: list[str], status: int) -> None:
    worker = spawn(argv)
    worker.release()
    assert worker.wait(5) == status
    assert worker.poll() == status
    worker.stop(grace=0.1)
    assert worker.poll() == status  # unchanged once reaped


def test_wait_times_out(spawn: Spawn) -> None:
    worker = spawn(["sleep", "5"])
    worker.release()
    started = time.monotonic()
    assert worker.wait(0.2) is None
    assert time.monotonic() - started < 1.0


# A leader and child that ignore SIGTERM; the grandchild also leaves the process group, so only
# the token or the descendant walk can find it. SIG_IGN is inherited across fork and exec.
GRANDCHILD = "import time; time.sleep(60)"
CHILD = textwrap.dedent(f"""
    import subprocess, sys, time
    grand = subprocess.Popen([sys.executable, "-c", {GRANDCHILD!r}], start_new_session=True)
    print("grand", grand.pid, flush=True)
    time.sleep(60)
""")
STUBBORN = textwrap.dedent(f"""
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", {CHILD!r}])
    print("child", child.pid, flush=True)
    time.sleep(60)
""")


def test_stop_kills_stubborn_tree(spawn: Spawn) -> None:
    worker = spawn([PY, "-c", STUBBORN])
    worker.release()
    pids = {name: int(pid) for name, pid in (line.split() for line in read_lines(worker, 2))}
    pids["leader"] = worker.identity.pid
    assert os.getpgid(pids["grand"]) != worker.identity.pgid
    assert not any(gone(pid) for pid in pids.values())
    report = worker.stop(grace=0.3)
    assert all(gone(pid) for pid in pids.values())
    assert find_token_holders(worker.identity.token) == []
    assert set(pids.values()) <= set(report.killed) <= set(report.stopped)
    assert worker.poll() == 128 + signal.SIGKILL
    assert not psutil.pid_exists(worker.identity.pid)  # reaped


DAEMONIZE = (
    "import subprocess, sys\n"
    "d = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
    " start_new_session=True)\n"
    "print(d.pid, flush=True)\n"
)


def test_stop_finds_daemon_by_token_alone(spawn: Spawn) -> None:
    """The daemon left the group and its parent exited: only the token still names it."""
    worker = spawn([PY, "-c", DAEMONIZE])
    worker.release()
    daemon = int(read_lines(worker, 1)[0])
    try:
        assert worker.wait(5) == 0
        assert os.getpgid(daemon) != worker.identity.pgid
        assert psutil.Process(daemon).ppid() != worker.identity.pid
        assert find_token_holders(worker.identity.token) == [daemon]
        report = worker.stop(grace=1.0)
        assert report.stopped == (daemon,)
        assert gone(daemon)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon, signal.SIGKILL)


def test_stop_polite_worker_needs_no_sigkill(spawn: Spawn) -> None:
    worker = spawn(["sleep", "30"])
    worker.release()
    until(lambda: psutil.Process(worker.identity.pid).name() == "sleep", 5)
    report = worker.stop(grace=2.0)
    assert report == StopReport(stopped=(worker.identity.pid,), killed=())
    assert worker.poll() == 128 + signal.SIGTERM


def test_identity_round_trips_through_json(spawn: Spawn) -> None:
    worker = spawn(["true"])
    identity = worker.identity
    assert identity.create_time == psutil.Process(identity.pid).create_time()
    again = WorkerIdentity.from_dict(json.loads(json.dumps(identity.to_dict())))
    assert again == identity


ORPHAN_LEADER = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "time.sleep(60)\n"
)
SPAWNER = textwrap.dedent(f"""
    import json, os, sys
    from rio_ci.run.worker import Worker
    env = {{"PATH": os.environ["PATH"]}}
    worker = Worker.spawn([sys.executable, "-c", {ORPHAN_LEADER!r}], sys.argv[1], env, sys.argv[2])
    worker.release()
    print(json.dumps(worker.identity.to_dict()), flush=True)
""")


def test_stop_survivors_stops_orphaned_worker_and_child(tmp_path: Path, tokens: list[str]) -> None:
    tokens.append(uuid.uuid4().hex)
    env = {**ENV, "PYTHONPATH": str(ROOT)}
    spawner = subprocess.run(
        [PY, "-c", SPAWNER, str(tmp_path), tokens[0]],
        env=env,
        capture_output=True,
        check=True,
        timeout=10,
    )
    identity = WorkerIdentity.from_dict(json.loads(spawner.stdout))
    until(lambda: len(find_token_holders(identity.token)) == 2, 5)
    holders = find_token_holders(identity.token)
    assert identity.pid in holders
    assert psutil.Process(identity.pid).ppid() != os.getpid()  # orphaned: its Owner is gone
    report = stop_survivors(identity, grace=1.0)
    assert set(report.stopped) == set(holders)
    assert all(gone(pid) for pid in holders)
    assert find_token_holders(identity.token) == []
    assert stop_survivors(identity) == StopReport()  # a second recovery finds nothing


def test_recycled_pid_fails_closed_without_signalling() -> None:
    bystander = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"])
    try:
        real = psutil.Process(bystander.pid)
        identity = WorkerIdentity(
            pid=bystander.pid,
            pgid=bystander.pid,
            create_time=real.create_time() - 50.0,
            boot_time=psutil.boot_time(),
            token=uuid.uuid4().hex,
        )
        with pytest.raises(RecoveryError, match=f"pid {bystander.pid} was reused"):
            stop_survivors(identity, grace=0.1)
        time.sleep(0.1)
        assert bystander.poll() is None
        assert real.status() != psutil.STATUS_ZOMBIE
    finally:
        bystander.kill()
        bystander.wait()


def test_lost_leader_with_surviving_group_fails_closed(spawn: Spawn) -> None:
    worker = spawn(["sh", "-c", "sleep 30 & echo $!"])
    worker.release()
    child = int(read_lines(worker, 1)[0])
    try:
        assert worker.wait(5) == 0
        assert os.getpgid(child) == worker.identity.pgid
        with pytest.raises(RecoveryError, match=rf"lost leader.*\b{child}\b"):
            stop_survivors(worker.identity, grace=0.1)
        assert not gone(child)  # fail closed: nothing was signalled
        worker.stop(grace=1.0)  # the live Owner knows its group: it may clean up
        assert gone(child)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)


def test_other_boot_means_nothing_survives(spawn: Spawn) -> None:
    worker = spawn(["sleep", "30"])
    shifted = dataclasses.replace(worker.identity, boot_time=worker.identity.boot_time - 100)
    assert stop_survivors(shifted, grace=0.1) == StopReport()
    assert worker.poll() is None  # untouched


def test_nothing_alive_gives_empty_report(spawn: Spawn) -> None:
    worker = spawn(["true"])
    worker.release()
    assert worker.wait(5) == 0
    worker.stop(grace=0.1)
    assert stop_survivors(worker.identity, grace=0.1) == StopReport()


def test_stop_survivors_stops_gated_worker(spawn: Spawn) -> None:
    """An Owner that died between committing the identity and releasing the gate."""
    worker = spawn(["sleep", "30"])
    report = stop_survivors(worker.identity, grace=1.0)
    assert report.stopped == (worker.identity.pid,)
    assert worker.poll() == 128 + signal.SIGTERM
