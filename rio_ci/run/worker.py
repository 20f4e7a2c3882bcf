"""Workers: gated, supervised process groups (docs/sessions.md).

A Worker is ``/bin/sh -c GATE rio-worker ARGV...`` started in its own session, so its pid is
also its process group id. The gate reads one line from stdin and ``exec``s ARGV only if that
line is exactly ``go``; anything else (another line, EOF) exits 125 having run nothing. The
Owner therefore commits the Worker's identity (pid, start time, boot time, token) *before* any
user code can run, then calls :meth:`Worker.release`.

Every Worker environment carries ``RIO_WORKER_TOKEN=<token>``; ``rio_ci.run.survivors``
finds and stops what is left of a Worker by it — and, for a Worker started as a Cell user
(``rio_ci.run.confinement.user``), by that user: every process of it. How a Worker is started
(as whom, through which wrapper) is its ``Spawn``, which the Owner's confinement decides
(``rio_ci.run.confinement``); this module applies it.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Literal, cast

import psutil

from rio_ci.run import pidrange
from rio_ci.run.confinement.spawn import Spawn
from rio_ci.run.survivors import (
    POLL,
    TOKEN_VAR,
    StopReport,
    WorkerIdentity,
    descendants,
    start_stamp,
    stop_all,
)

Stream = Literal["stdout", "stderr"]
GATE_REFUSED = 125
# `read` fails on EOF and on a last line without newline, so only a complete "go\n" launches.
GATE = 'IFS= read -r line || exit 125\n[ "$line" = go ] || exit 125\nexec "$@"\n'
_CHUNK = 65536
_READ_BUDGET = 1 << 20  # bytes per read_output call, so one chatty stream cannot starve callers


class Worker:
    """One gated Worker process group supervised by the Owner that spawned it.

    The leader is reaped only by :meth:`stop`: until then its pid (== the group id) stays
    reserved, even as a zombie, so signalling the group can never hit a recycled group.
    """

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        identity: WorkerIdentity,
        mark: pidrange.Mark | None = None,
        uid: int | None = None,
    ) -> None:
        """Use :meth:`spawn`."""
        self.uid = uid  # the Cell user's, if the Worker runs as one
        self.mark = mark  # the kernel's counters before the spawn (rio_ci.run.pidrange)
        assert proc.stdout is not None and proc.stderr is not None
        self._proc = proc
        self._status: int | None = None
        self.identity = identity
        self._selector = selectors.DefaultSelector()
        self._selector.register(proc.stdout, selectors.EVENT_READ, "stdout")
        self._selector.register(proc.stderr, selectors.EVENT_READ, "stderr")
        self._exit_fd: int | None = None  # a pidfd of the leader, once wait() needs it

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        cwd: str | os.PathLike[str],
        env: Mapping[str, str],
        token: str,
        spawn: Spawn | None = None,
    ) -> Worker:
        """Start the gate (nothing of ``argv`` runs yet) in a new session with piped
        stdin/stdout/stderr, as ``spawn`` says (default: as this process, directly).
        ``env`` is used as given, plus ``RIO_WORKER_TOKEN=token``."""
        if not argv:
            raise ValueError("a Worker needs a non-empty argv")
        if not token or "\0" in token:
            raise ValueError("a Worker token must be a non-empty string without NUL")
        spawn = spawn or Spawn()
        pipe = subprocess.PIPE
        before = pidrange.counters()  # before the leader exists: see rio_ci.run.pidrange
        with spawn.around():
            proc = subprocess.Popen(
                [*spawn.prefix, "/bin/sh", "-c", GATE, "rio-worker", *argv],
                cwd=cwd,
                env={**env, TOKEN_VAR: token},
                stdin=pipe,
                stdout=pipe,
                stderr=pipe,
                start_new_session=True,
                **spawn.options,
            )
        try:
            create_time, boot_time = start_stamp(proc.pid, before.boot if before else None)
            identity = WorkerIdentity(proc.pid, os.getpgid(proc.pid), create_time, boot_time, token)
        except BaseException:
            proc.kill()  # still at the gate: nothing of argv ran
            proc.communicate()
            raise
        mark = pidrange.Mark(proc.pid, before) if before else None
        return cls(proc, identity, mark, spawn.uid)

    def _write_gate(self, line: bytes) -> None:
        """Answer the gate once with ``line`` and close stdin (tests send malformed lines)."""
        stdin = self._proc.stdin
        if stdin is None or stdin.closed:
            raise RuntimeError("the gate of this Worker was already answered")
        # A gate that already died (killed, Owner stopped it) simply never launches.
        with contextlib.suppress(BrokenPipeError):
            stdin.write(line)
            stdin.flush()
        with contextlib.suppress(BrokenPipeError):
            stdin.close()

    def release(self) -> None:
        """Let the gate ``exec`` argv; stdin is then closed, so argv reads EOF from it."""
        self._write_gate(b"go\n")

    def refuse(self) -> None:
        """Answer the gate with a refusal: the process exits 125 without running argv."""
        self._write_gate(b"no\n")

    @property
    def output_eof(self) -> bool:
        """True once both stdout and stderr reached EOF (every holder of the pipes is gone)."""
        return not self._selector.get_map()

    def read_output(self, timeout: float) -> list[tuple[Stream, bytes]]:
        """Chunks ``("stdout"|"stderr", data)`` available within ``timeout`` s, in arrival
        order per stream. Returns [] on timeout, and at once when :attr:`output_eof`."""
        chunks: list[tuple[Stream, bytes]] = []
        wait, budget = max(0.0, timeout), _READ_BUDGET
        while self._selector.get_map() and budget > 0:
            events = self._selector.select(wait)
            if not events:
                break
            wait = 0.0  # drain what is already there, never wait twice
            for key, _ in events:
                data = os.read(key.fd, _CHUNK)
                if data:
                    chunks.append((cast(Stream, key.data), data))
                    budget -= len(data)
                else:
                    self._selector.unregister(key.fileobj)
        return chunks

    def poll(self) -> int | None:
        """The leader's exit status, or None while it runs: the exit code, or 128 + signum
        for a death by signal (shell convention). Does not reap the leader."""
        if self._status is None:
            if self._proc.returncode is not None:
                code = self._proc.returncode
                self._status = code if code >= 0 else 128 - code
            else:
                flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
                info = os.waitid(os.P_PID, self._proc.pid, flags)
                if info is not None:
                    exited = info.si_code == os.CLD_EXITED
                    self._status = info.si_status if exited else 128 + info.si_status
        return self._status

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` s for the leader to exit; its status (see poll) or None.
        Where the kernel offers a pidfd (Linux) this sleeps until the exit itself, so a
        caller neither spins nor adds a polling delay; elsewhere it polls."""
        deadline = time.monotonic() + timeout
        delay = 0.005
        while (status := self.poll()) is None and (left := deadline - time.monotonic()) > 0:
            exit_fd = self._pidfd()
            if exit_fd is not None:
                waiter = select.poll()
                waiter.register(exit_fd, select.POLLIN)
                waiter.poll(max(1, round(left * 1000)))
            else:
                time.sleep(min(delay, left))
                delay = min(delay * 2, POLL)
        return status

    def _pidfd(self) -> int | None:
        """A pidfd of the leader (readable once it exits), or None where unsupported. The
        pid cannot name another process meanwhile: only :meth:`stop` reaps the leader."""
        if self._exit_fd is None and self._proc.returncode is None:
            with contextlib.suppress(AttributeError, OSError):
                self._exit_fd = os.pidfd_open(self._proc.pid)
        return self._exit_fd

    def stop(self, grace: float = 2.0) -> StopReport:
        """Stop the group, every descendant, every token holder and every process of the
        Cell user: SIGTERM, ``grace`` s,
        SIGKILL, and fail with RecoveryError (naming the pids) if anything is alive 5 s
        after the first signal. Reaps the leader. Safe to call after the leader exited."""
        targets: dict[int, psutil.Process] = {}
        pinned = self._proc.returncode is None  # unreaped leader keeps the group id reserved
        if pinned and self.poll() is None:  # an exited leader has no descendants left
            with contextlib.suppress(psutil.Error):
                leader = psutil.Process(self._proc.pid)
                targets = {leader.pid: leader, **descendants(leader)}
        token, pgid = self.identity.token, self.identity.pgid
        try:
            return stop_all(
                targets,
                token=token,
                pgid=pgid,
                pinned=pinned,
                grace=grace,
                mark=self.mark,
                uid=self.uid,
            )
        finally:
            if self.poll() is not None and self._proc.returncode is None:
                self._proc.wait()

    def close(self) -> None:
        """Release the pipes (call after stop; unread output is discarded)."""
        self._selector.close()
        if self._exit_fd is not None:
            os.close(self._exit_fd)
            self._exit_fd = None
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
