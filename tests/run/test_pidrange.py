"""Leftovers are looked for among the pids handed out since a Worker's spawn only when the
kernel's counters prove that range holds all of them (rio_ci.run.pidrange); otherwise, and
off Linux, every process is looked at. Real processes throughout."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest

from rio_ci.run import pidrange
from rio_ci.run.survivors import find_token_holders
from rio_ci.run.worker import Worker
from tests.kit import until

pytestmark = pytest.mark.skipif(pidrange.counters() is None, reason="needs Linux /proc")

# Leaves two processes that outlive the Worker's leader: one in a session of its own running
# two threads (its second thread has a pid of its own, in the range), and its child.
LEAVE = """
import os, subprocess, sys
code = "import threading, time, subprocess, sys\\n" \\
       "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\\n" \\
       "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\\n" \\
       "print(child.pid, flush=True)\\n" \\
       "time.sleep(60)\\n"
d = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                     stdout=subprocess.PIPE)
print(d.pid, d.stdout.readline().decode().strip(), flush=True)
"""


def leave_two(tmp_path: Path) -> tuple[Worker, list[int]]:
    worker = Worker.spawn(
        [sys.executable, "-c", LEAVE],
        tmp_path,
        {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        uuid.uuid4().hex,
    )
    worker.release()
    out = b""
    while b"\n" not in out and not worker.output_eof:
        out += b"".join(data for stream, data in worker.read_output(0.5) if stream == "stdout")
    assert worker.wait(10) == 0
    return worker, sorted(int(pid) for pid in out.split())


def settled(token: str, left: list[int]) -> None:
    """Wait until exactly ``left`` carry ``token`` (the leader's other processes are gone)."""
    until(lambda: find_token_holders(token) == left, 10)


def test_the_range_since_a_spawn_holds_every_leftover_and_no_thread(tmp_path: Path) -> None:
    for _ in range(3):  # the counter may wrap meanwhile (pid_max is 32768 on some kernels)
        worker, left = leave_two(tmp_path)
        try:
            assert worker.mark is not None and worker.mark.pid == worker.identity.pid
            newer = pidrange.since(worker.mark)
            if newer is None:
                continue
            settled(worker.identity.token, left)
            assert set(left) <= set(newer)
            # Same answer as the scan of every process: the daemon's second thread, whose pid
            # is in the range too, is not taken for a process.
            assert find_token_holders(worker.identity.token, worker.mark) == left
            assert len(list(newer)) > len(left)  # the range did hold a thread id, or others
            report = worker.stop(grace=1.0)
            assert sorted(report.stopped) == left
            assert find_token_holders(worker.identity.token) == []
            return
        finally:
            for pid in find_token_holders(worker.identity.token):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            worker.close()
    pytest.fail("the pid counter wrapped in each of three tries")


def test_a_counter_that_may_have_wrapped_means_every_process_is_looked_at(tmp_path: Path) -> None:
    worker, left = leave_two(tmp_path)
    try:
        settled(worker.identity.token, left)
        now, limit = pidrange.counters(), pidrange.pid_max()
        assert now is not None and limit is not None
        unsure = {
            "wrapped: the last pid is below the leader": pidrange.Mark(now.last + 1, now),
            "may have come round again": pidrange.Mark(
                now.last, dataclasses.replace(now, created=now.created - limit)
            ),
            "too long to probe": pidrange.Mark(max(1, now.last - 100_000), now),
        }
        for why, mark in unsure.items():
            assert pidrange.since(mark) is None, why
            # Found all the same: by a scan of every process.
            assert find_token_holders(worker.identity.token, mark) == left, why
    finally:
        worker.stop(grace=0.5)
        worker.close()
