"""Workers: gated, supervised process groups, and the stop of survivors at recovery (SPEC §5, §6).

A Worker is ``/bin/sh -c GATE rio-worker ARGV...`` started in its own session, so its pid is
also its process group id. The gate reads one line from stdin and ``exec``s ARGV only if that
line is exactly ``go``; anything else (another line, EOF) exits 125 having run nothing. The
Owner therefore commits the Worker's identity (pid, start time, boot time, token) *before* any
user code can run, then calls :meth:`Worker.release`.

Every Worker environment carries ``RIO_WORKER_TOKEN=<token>``; descendants inherit it, so
processes that left the group (``setsid``) or were reparented are still found by
:func:`find_token_holders`. A process that scrubs its own environment *and* leaves the group is
out of reach; that is the documented limit of this design.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

import psutil

from rio_ci.errors import RecoveryError

TOKEN_VAR = "RIO_WORKER_TOKEN"
GATE_REFUSED = 125
KILL_DEADLINE = 5.0  # seconds from the first signal after which survivors fail recovery
# `read` fails on EOF and on a last line without newline, so only a complete "go\n" launches.
_GATE = 'IFS= read -r line || exit 125\n[ "$line" = go ] || exit 125\nexec "$@"\n'
_CHUNK = 65536
_READ_BUDGET = 1 << 20  # bytes per read_output call, so one chatty stream cannot starve callers
_START_TOLERANCE = 0.005  # below one clock tick: equal start times come from the same process
_POLL = 0.05
_PROC_ENVIRON = os.path.exists("/proc/self/environ")


@dataclasses.dataclass(frozen=True)
class WorkerIdentity:
    """What the Owner commits before launch; enough to find or rule out the Worker later."""

    pid: int
    pgid: int
    create_time: float
    boot_time: float
    token: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerIdentity:
        pid, pgid, token = int(data["pid"]), int(data["pgid"]), str(data["token"])
        return cls(pid, pgid, float(data["create_time"]), float(data["boot_time"]), token)


@dataclasses.dataclass(frozen=True)
class StopReport:
    """``stopped``: every pid seen alive and then confirmed dead; ``killed``: those of them
    that needed SIGKILL. Both sorted; empty when nothing was running."""

    stopped: tuple[int, ...] = ()
    killed: tuple[int, ...] = ()


def _start_stamp(proc: psutil.Process) -> tuple[float, float]:
    """(create_time, boot_time) read together. psutil derives create_time from the kernel's
    btime, which moves when the wall clock is stepped; only ``create_time - boot_time``
    (seconds since boot) is stable, so both are read with the same btime."""
    for _ in range(3):
        before = psutil.boot_time()
        created = proc.create_time()
        after = psutil.boot_time()
        if before == after:
            break
    return created, after


def _alive(proc: psutil.Process) -> bool:
    """True while ``proc`` (pid *and* start time) runs; zombies and reused pids are dead."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _scan(token: str, pgid: int | None) -> dict[int, psutil.Process]:
    """Live processes (not us) carrying ``token`` in their environment or in group ``pgid``.
    Processes whose environment we may not read are skipped: they cannot be ours."""
    found: dict[int, psutil.Process] = {}
    me = os.getpid()
    entry = f"\0{TOKEN_VAR}={token}\0".encode()
    for pid in psutil.pids():
        if pid <= 0 or pid == me:
            continue
        try:
            group = os.getpgid(pid)
            if group == 0:
                continue  # kernel threads (and a container's init): never a Worker's
            if group == pgid or _carries(pid, token, entry):
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found[pid] = proc
        except (psutil.Error, OSError):
            continue
    return found


def _carries(pid: int, token: str, entry: bytes) -> bool:
    """True if process ``pid`` has ``RIO_WORKER_TOKEN=token`` in its environment. Where
    /proc exists the raw block is searched for the whole ``entry`` (NUL to NUL): this runs
    for every process at every Worker stop, and decoding each environment into a dict
    through psutil costs about four times as much."""
    if _PROC_ENVIRON:
        with open(f"/proc/{pid}/environ", "rb") as block:
            return entry in b"\0" + block.read()
    return bool(psutil.Process(pid).environ().get(TOKEN_VAR) == token)


def _descendants(proc: psutil.Process) -> dict[int, psutil.Process]:
    try:
        return {child.pid: child for child in proc.children(recursive=True)}
    except psutil.Error:
        return {}


def _descendants_of(procs: list[psutil.Process]) -> dict[int, psutil.Process]:
    """What ``_descendants`` finds for each process in ``procs``, from one pass over the
    process table instead of one per process. A dead or zombie process has no children (the
    kernel reparents them before the exit is visible). As in psutil, a "child" created
    before the root carries a reused pid and is left out."""
    roots = [proc for proc in procs if _alive(proc)]
    if not roots:
        return {}
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found: dict[int, psutil.Process] = {}
    for root in roots:
        with contextlib.suppress(psutil.Error):
            born, todo, seen = root.create_time(), [root.pid], set()
            while todo:
                if (pid := todo.pop()) in seen:
                    continue  # pids reused while the map was read can make a cycle
                seen.add(pid)
                for child_pid in children.get(pid, []):
                    with contextlib.suppress(psutil.Error):  # gone meanwhile
                        child = found.get(child_pid) or psutil.Process(child_pid)
                        if born <= child.create_time():
                            found[child_pid] = child
                            todo.append(child_pid)
    return found


def _parents() -> dict[int, int]:
    """The parent pid of every process: /proc/PID/stat read directly where it exists (as
    fast as one psutil ``children()`` call, which would read it all once per process)."""
    if not _PROC_ENVIRON:
        return {proc.pid: proc.info["ppid"] for proc in psutil.process_iter(["ppid"])}
    parents: dict[int, int] = {}
    for pid in psutil.pids():
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()  # "pid (comm) state ppid ...": comm may hold spaces and ")"
            parents[pid] = int(data[data.rfind(b")") + 2:].split(maxsplit=2)[1])
    return parents


def find_token_holders(token: str) -> list[int]:
    """Sorted pids of live (non-zombie) processes with ``RIO_WORKER_TOKEN=token``."""
    return sorted(_scan(token, None))


def _stop_all(
    targets: Mapping[int, psutil.Process], *, token: str, pgid: int, pinned: bool, grace: float
) -> StopReport:
    """SIGTERM ``targets``, their descendants, every token holder and, only if ``pinned``
    (the group id provably still names our group), group ``pgid``; SIGKILL survivors after
    ``grace`` s. Every pass rescans, so processes forked meanwhile are signalled too. Raises
    RecoveryError listing survivors alive ``KILL_DEADLINE`` s after the first signal (and
    1 s after SIGKILL). A pinned group stays ours for the whole loop: a leader reaped here
    frees its id only once the group is empty, and reuse needs a pid wrap-around."""
    start = time.monotonic()
    tracked: dict[int, psutil.Process] = dict(targets)
    seen: set[int] = set()
    killed: set[int] = set()

    def gather() -> dict[int, psutil.Process]:
        found = _scan(token, pgid if pinned else None)
        # children may have neither token nor group
        found.update(_descendants_of([*tracked.values(), *found.values()]))
        tracked.update(found)
        live = {pid: proc for pid, proc in tracked.items() if _alive(proc)}
        seen.update(live)
        return live

    def send(procs: Mapping[int, psutil.Process], sig: signal.Signals) -> None:
        if sig == signal.SIGKILL:
            killed.update(procs)
        if pinned:
            with contextlib.suppress(OSError):
                os.killpg(pgid, sig)  # atomic for the group: catches a fork racing our scan
                if sig == signal.SIGTERM:
                    os.killpg(pgid, signal.SIGCONT)
        for proc in procs.values():
            with contextlib.suppress(psutil.Error):  # psutil refuses a pid that was reused
                proc.send_signal(sig)
                if sig == signal.SIGTERM:
                    proc.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM

    live = gather()
    phase = signal.SIGTERM
    send(live, phase)
    kill_at = start + grace
    give_up = max(start + KILL_DEADLINE, kill_at + 1.0)
    delay = 0.005  # most processes die within milliseconds of SIGTERM: look again soon
    while live:
        time.sleep(delay)
        delay = min(delay * 2, _POLL)
        before = set(live)
        live = gather()
        now = time.monotonic()
        if live and phase == signal.SIGTERM and now >= kill_at:
            phase = signal.SIGKILL
            send(live, phase)
            continue
        if newcomers := live.keys() - before:
            send({pid: live[pid] for pid in newcomers}, phase)
        if live and now >= give_up:
            pids = ", ".join(str(pid) for pid in sorted(live))
            raise RecoveryError(
                f"Worker group {pgid}: processes [{pids}] still alive "
                f"{now - start:.1f} s after SIGTERM/SIGKILL; cannot prove the Worker stopped"
            )
    return StopReport(stopped=tuple(sorted(seen)), killed=tuple(sorted(killed)))


class Worker:
    """One gated Worker process group supervised by the Owner that spawned it.

    The leader is reaped only by :meth:`stop`: until then its pid (== the group id) stays
    reserved, even as a zombie, so signalling the group can never hit a recycled group.
    """

    def __init__(self, proc: subprocess.Popen[bytes], identity: WorkerIdentity) -> None:
        """Use :meth:`spawn`."""
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
    ) -> Worker:
        """Start the gate (nothing of ``argv`` runs yet) in a new session with piped
        stdin/stdout/stderr. ``env`` is used as given, plus ``RIO_WORKER_TOKEN=token``."""
        if not argv:
            raise ValueError("a Worker needs a non-empty argv")
        if not token or "\0" in token:
            raise ValueError("a Worker token must be a non-empty string without NUL")
        pipe = subprocess.PIPE
        proc = subprocess.Popen(
            ["/bin/sh", "-c", _GATE, "rio-worker", *argv],
            cwd=cwd,
            env={**env, TOKEN_VAR: token},
            stdin=pipe,
            stdout=pipe,
            stderr=pipe,
            start_new_session=True,
        )
        try:
            create_time, boot_time = _start_stamp(psutil.Process(proc.pid))
            identity = WorkerIdentity(proc.pid, os.getpgid(proc.pid), create_time, boot_time, token)
        except BaseException:
            proc.kill()  # still at the gate: nothing of argv ran
            proc.communicate()
            raise
        return cls(proc, identity)

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

    def read_output(self, timeout: float) -> list[tuple[str, bytes]]:
        """Chunks ``("stdout"|"stderr", data)`` available within ``timeout`` s, in arrival
        order per stream. Returns [] on timeout, and at once when :attr:`output_eof`."""
        chunks: list[tuple[str, bytes]] = []
        wait, budget = max(0.0, timeout), _READ_BUDGET
        while self._selector.get_map() and budget > 0:
            events = self._selector.select(wait)
            if not events:
                break
            wait = 0.0  # drain what is already there, never wait twice
            for key, _ in events:
                data = os.read(key.fd, _CHUNK)
                if data:
                    chunks.append((key.data, data))
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
                delay = min(delay * 2, _POLL)
        return status

    def _pidfd(self) -> int | None:
        """A pidfd of the leader (readable once it exits), or None where unsupported. The
        pid cannot name another process meanwhile: only :meth:`stop` reaps the leader."""
        if self._exit_fd is None and self._proc.returncode is None:
            with contextlib.suppress(AttributeError, OSError):
                self._exit_fd = os.pidfd_open(self._proc.pid)
        return self._exit_fd

    def stop(self, grace: float = 2.0) -> StopReport:
        """Stop the group, every descendant and every token holder: SIGTERM, ``grace`` s,
        SIGKILL, and fail with RecoveryError (naming the pids) if anything is alive 5 s
        after the first signal. Reaps the leader. Safe to call after the leader exited."""
        targets: dict[int, psutil.Process] = {}
        pinned = self._proc.returncode is None  # unreaped leader keeps the group id reserved
        if pinned and self.poll() is None:  # an exited leader has no descendants left
            with contextlib.suppress(psutil.Error):
                leader = psutil.Process(self._proc.pid)
                targets = {leader.pid: leader, **_descendants(leader)}
        token, pgid = self.identity.token, self.identity.pgid
        try:
            return _stop_all(targets, token=token, pgid=pgid, pinned=pinned, grace=grace)
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


def stop_survivors(identity: WorkerIdentity, grace: float = 2.0) -> StopReport:
    """Recovery: stop what is left of a Worker whose Owner is gone, or fail closed.

    - another boot (boot time differs by > 1 s): nothing can survive; empty report;
    - the pid runs with another start time (recycled): RecoveryError, nothing signalled;
    - the leader is gone but group members or token holders live: RecoveryError naming them,
      nothing signalled (a lost leader proves nothing about who they are);
    - the leader runs with its committed start time: the group, the leader's descendants and
      all token holders are stopped as in :meth:`Worker.stop` (RecoveryError on survivors);
    - nothing alive: empty report. Zombies count as dead throughout.
    """
    if abs(psutil.boot_time() - identity.boot_time) > 1.0:
        return StopReport()
    leader: psutil.Process | None = None
    try:
        candidate = psutil.Process(identity.pid)
        if candidate.status() != psutil.STATUS_ZOMBIE:
            created, booted = _start_stamp(candidate)
            committed = identity.create_time - identity.boot_time
            if abs((created - booted) - committed) > _START_TOLERANCE:
                raise RecoveryError(
                    f"pid {identity.pid} was reused by another process; "
                    f"cannot prove Worker {identity.pid} stopped"
                )
            leader = candidate
    except psutil.NoSuchProcess:
        leader = None
    except psutil.AccessDenied as exc:
        raise RecoveryError(f"cannot inspect pid {identity.pid}: {exc}") from exc
    survivors = _scan(identity.token, identity.pgid)
    if leader is None:
        if survivors:
            pids = ", ".join(str(pid) for pid in sorted(survivors))
            raise RecoveryError(
                f"lost leader with a surviving group: Worker {identity.pid} is gone but "
                f"processes [{pids}] remain in its group or carry its token; not signalled"
            )
        return StopReport()
    targets = {leader.pid: leader, **_descendants(leader), **survivors}
    # While pid N runs, a group N can only be the one it created: the group id is ours.
    return _stop_all(targets, token=identity.token, pgid=identity.pgid, pinned=True, grace=grace)
