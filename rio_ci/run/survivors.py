"""Finding and stopping what is left of Workers (docs/sessions.md): by process group, by the
token every Worker environment carries (``RIO_WORKER_TOKEN``, inherited by descendants, so
processes that left the group with ``setsid`` or were reparented are still found), by
descent, and — when Cells run as their own user (``rio_ci.run.confinement.user``) — by user: every
process of the Cell user is a Cell's, whatever it did to its group, environment or
dumpability. Without a Cell user, a process that scrubs its own environment *and* leaves the
group is out of reach; that is the documented limit of sharing the harness's user.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Mapping
from typing import Any

import psutil

from rio_ci.core.errors import RecoveryError
from rio_ci.core.events import WorkerRecord
from rio_ci.run import pidrange

TOKEN_VAR = "RIO_WORKER_TOKEN"
KILL_DEADLINE = 5.0  # seconds from the first signal after which survivors fail recovery
_START_TOLERANCE = 0.005  # below one clock tick: equal start times come from the same process
POLL = 0.05
_PROC_ENVIRON = os.path.exists("/proc/self/environ")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if _PROC_ENVIRON else 100


@dataclasses.dataclass(frozen=True)
class WorkerIdentity:
    """What the Owner commits before launch; enough to find or rule out the Worker later."""

    pid: int
    pgid: int
    create_time: float
    boot_time: float
    token: str

    def to_dict(self) -> WorkerRecord:
        return {
            "pid": self.pid,
            "pgid": self.pgid,
            "create_time": self.create_time,
            "boot_time": self.boot_time,
            "token": self.token,
        }

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


def start_stamp(pid: int, boot: float | None = None) -> tuple[float, float]:
    """(create_time, boot_time) of process ``pid``, read together. Both derive from the
    kernel's btime, which moves when the wall clock is stepped; only ``create_time -
    boot_time`` (seconds since boot) is stable, so both use the same btime: ``boot`` if
    given (``pidrange.counters`` read just before the spawn), else read now. Where /proc
    exists they come from ``/proc/PID/stat`` and ``/proc/stat`` (psutil reads /proc/stat
    twice and builds a Process, a sixth of a ``cmd`` launch's own work).
    psutil.NoSuchProcess when the process is gone."""
    if boot is None and (now := pidrange.counters()) is not None:
        boot = now.boot
    if boot is not None:  # /proc exists: the counters were read from it
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except (FileNotFoundError, ProcessLookupError):
            raise psutil.NoSuchProcess(pid) from None
        return boot + int(fields[19]) / _CLOCK_TICKS, boot  # field 22: starttime, in ticks
    proc = psutil.Process(pid)
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


def _scan(
    token: str | None,
    pgid: int | None,
    *,
    prefix: bool = False,
    mark: pidrange.Mark | None = None,
    uid: int | None = None,
) -> dict[int, psutil.Process]:
    """Live processes (not us) carrying ``token`` (or, with ``prefix``, any token starting
    with it) in their environment, in group ``pgid``, or running as user ``uid`` (real,
    effective or saved). Processes whose environment we may not read are skipped: they
    cannot be ours (a non-dumpable process hides its environment from a non-root Owner; the
    user still shows). With the ``mark`` taken at the Worker's spawn, only the pids handed
    out since are looked at, when those are known for sure (``rio_ci.run.pidrange``; a Cell
    user's processes all started after the last stop, which left none); otherwise every
    process is."""
    found: dict[int, psutil.Process] = {}
    me = os.getpid()
    entry = f"\0{TOKEN_VAR}={token}{'' if prefix else chr(0)}".encode() if token else None
    newer = pidrange.since(mark) if mark is not None else None
    for pid in psutil.pids() if newer is None else newer:
        if pid <= 0 or pid == me:
            continue
        try:
            group = os.getpgid(pid)
            if group == 0:
                continue  # kernel threads (and a container's init): never a Worker's
            ours = (
                group == pgid
                or (uid is not None and runs_as(pid, uid))
                or (entry is not None and _carries_safely(pid, entry))
            )
            if ours and (newer is None or pidrange.thread_group_leader(pid)):
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found[pid] = proc
        except (psutil.Error, OSError):
            continue
    return found


def _carries_safely(pid: int, entry: bytes) -> bool:
    """``_carries``, False when the environment may not be read (another user's process, or
    a non-dumpable one, seen by an Owner that is not root)."""
    try:
        return _carries(pid, entry)
    except (PermissionError, psutil.AccessDenied):
        return False


def runs_as(pid: int, uid: int) -> bool:
    """True if process ``pid``'s real, effective or saved user id is ``uid``. Read from
    ``/proc/PID/status``, which anyone may read, non-dumpable processes included (their
    ``/proc/PID`` directory is root's, so its owner proves nothing)."""
    if not _PROC_ENVIRON:
        ids = psutil.Process(pid).uids()
        return uid in (ids.real, ids.effective, ids.saved)
    with open(f"/proc/{pid}/status", "rb") as status:
        for line in status:
            if line.startswith(b"Uid:"):
                return uid in {int(field) for field in line.split()[1:4]}
    return False


def _carries(pid: int, entry: bytes) -> bool:
    """True if process ``pid``'s environment holds ``entry`` (``\\0RIO_WORKER_TOKEN=...``).
    Where /proc exists the raw block is searched: this runs for every process at every
    Worker stop, and decoding each environment into a dict through psutil costs about four
    times as much."""
    if _PROC_ENVIRON:
        with open(f"/proc/{pid}/environ", "rb") as block:
            return entry in b"\0" + block.read()
    value = psutil.Process(pid).environ().get(TOKEN_VAR)
    return value is not None and (b"\0%s=%s\0" % (TOKEN_VAR.encode(), value.encode())).startswith(
        entry
    )


def descendants(proc: psutil.Process) -> dict[int, psutil.Process]:
    try:
        return {child.pid: child for child in proc.children(recursive=True)}
    except psutil.Error:
        return {}


def descendants_of(procs: list[psutil.Process]) -> dict[int, psutil.Process]:
    """What ``descendants`` finds for each process in ``procs``, from one pass over the
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
            parents[pid] = int(data[data.rfind(b")") + 2 :].split(maxsplit=2)[1])
    return parents


def find_token_holders(token: str, mark: pidrange.Mark | None = None) -> list[int]:
    """Sorted pids of live (non-zombie) processes with ``RIO_WORKER_TOKEN=token`` (``mark``:
    see ``_scan``)."""
    return sorted(_scan(token, None, mark=mark))


def stop_all(
    targets: Mapping[int, psutil.Process],
    *,
    token: str | None,
    pgid: int,
    pinned: bool,
    grace: float,
    mark: pidrange.Mark | None = None,
    uid: int | None = None,
) -> StopReport:
    """SIGTERM ``targets``, their descendants, every token holder, every process of user
    ``uid`` (the Cell user, if any) and, only if ``pinned`` (the group id provably still
    names our group), group ``pgid``; SIGKILL survivors after
    ``grace`` s. Every pass rescans (``mark``: see ``_scan``), so processes forked
    meanwhile are signalled too. Raises RecoveryError listing survivors alive
    ``KILL_DEADLINE`` s after the first signal (and 1 s after SIGKILL). A pinned group
    stays ours for the whole loop: a leader reaped here frees its id only once the group is
    empty, and reuse needs a pid wrap-around."""
    stopper = _Stopper(dict(targets), token, pgid, pinned, mark, uid)
    return stopper.stop(grace)


@dataclasses.dataclass
class _Stopper:
    """One ``stop_all``: what it tracks and signals, pass after pass."""

    tracked: dict[int, psutil.Process]
    token: str | None
    pgid: int
    pinned: bool
    mark: pidrange.Mark | None
    uid: int | None
    seen: set[int] = dataclasses.field(default_factory=set)
    killed: set[int] = dataclasses.field(default_factory=set)

    def gather(self) -> dict[int, psutil.Process]:
        found = _scan(self.token, self.pgid if self.pinned else None, mark=self.mark, uid=self.uid)
        # children may have neither token nor group
        found.update(descendants_of([*self.tracked.values(), *found.values()]))
        self.tracked.update(found)
        live = {pid: proc for pid, proc in self.tracked.items() if _alive(proc)}
        self.seen.update(live)
        return live

    def send(self, procs: Mapping[int, psutil.Process], sig: signal.Signals) -> None:
        if sig == signal.SIGKILL:
            self.killed.update(procs)
        if self.pinned:
            with contextlib.suppress(OSError):
                os.killpg(self.pgid, sig)  # atomic for the group: catches a fork racing our scan
                if sig == signal.SIGTERM:
                    os.killpg(self.pgid, signal.SIGCONT)
        for proc in procs.values():
            with contextlib.suppress(psutil.Error):  # psutil refuses a pid that was reused
                proc.send_signal(sig)
                if sig == signal.SIGTERM:
                    proc.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM

    def stop(self, grace: float) -> StopReport:
        start = time.monotonic()
        live = self.gather()
        phase = signal.SIGTERM
        self.send(live, phase)
        kill_at = start + grace
        give_up = max(start + KILL_DEADLINE, kill_at + 1.0)
        delay = 0.005  # most processes die within milliseconds of SIGTERM: look again soon
        while live:
            time.sleep(delay)
            delay = min(delay * 2, POLL)
            before = set(live)
            live = self.gather()
            now = time.monotonic()
            if live and phase == signal.SIGTERM and now >= kill_at:
                phase = signal.SIGKILL
                self.send(live, phase)
                continue
            if newcomers := live.keys() - before:
                self.send({pid: live[pid] for pid in newcomers}, phase)
            if live and now >= give_up:
                self.fail(live, now - start)
        return StopReport(stopped=tuple(sorted(self.seen)), killed=tuple(sorted(self.killed)))

    def fail(self, live: Mapping[int, psutil.Process], elapsed: float) -> None:
        pids = ", ".join(str(pid) for pid in sorted(live))
        whose = f"Worker group {self.pgid}" if self.pgid else f"Cell user {self.uid}"
        raise RecoveryError(
            f"{whose}: processes [{pids}] still alive "
            f"{elapsed:.1f} s after SIGTERM/SIGKILL; cannot prove the Worker stopped"
        )


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
            created, booted = start_stamp(candidate.pid)
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
    targets = {leader.pid: leader, **descendants(leader), **survivors}
    # While pid N runs, a group N can only be the one it created: the group id is ours.
    return stop_all(targets, token=identity.token, pgid=identity.pgid, pinned=True, grace=grace)


def stop_session_leftovers(session_id: str) -> list[int]:
    """Stop every process still carrying one of this Session's Worker tokens (validators,
    Workers that were spawned but never registered). Raises RecoveryError if any survive."""
    found = list(_scan(f"rio-{session_id}-", None, prefix=True).values())
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _, alive = psutil.wait_procs(found, timeout=KILL_DEADLINE)
    alive = [p for p in alive if _alive(p)]
    if alive:
        raise RecoveryError(
            f"processes {[p.pid for p in alive]} of this Session survived "
            "SIGKILL; cannot prove the old Workers stopped"
        )
    return [p.pid for p in found]


def stop_user(uid: int, grace: float = 1.0) -> StopReport:
    """Stop every process of user ``uid`` (a Cell user: all its processes are Cells'), at
    the run's end and in recovery: SIGTERM, ``grace`` s, SIGKILL, and RecoveryError naming
    the pids alive ``KILL_DEADLINE`` s after the first signal. Every process is looked at:
    a leftover of an earlier Owner can have any pid."""
    if uid in (0, os.getuid(), os.geteuid()):
        raise ValueError(f"user {uid} runs the harness: its processes are not Cells'")
    return stop_all({}, token=None, pgid=0, pinned=False, grace=grace, uid=uid)
