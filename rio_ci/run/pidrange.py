"""Which pids the kernel handed out since a Worker was spawned, when that can be known for
sure: a cheaper way to find the Worker's leftovers than reading every process's environment.

Every process that carries a Worker's token or sits in its group was created after the
Worker's leader: the token enters an environment only through the leader's ``execve`` and is
inherited from there, and only the leader's session (which it created) can join its group.
Linux hands out pids in increasing order and wraps at ``pid_max``. So if the counter did not
wrap since the leader was spawned, every such process has a pid in ``(leader, last]``, where
``last`` is the last pid handed out (``/proc/loadavg``, for the reader's pid namespace).

The counter wrapped if ``last`` is below the leader. It can be back above the leader after
a wrap only if it moved at least ``pid_max - 300`` places (it wraps to 300): each new task
moves it one place plus the pids in use that it skips, and those belong to tasks alive when
the mark was taken or created since. The kernel counts every task it creates (``processes``
in ``/proc/stat``, all namespaces), so the count of new tasks ``n`` and of tasks alive at
the mark ``t`` (``/proc/loadavg``) bound the move by ``2n + t``.
Whenever that bound does not rule a wrap out, or the range is long, the caller scans every
process instead (``None``). A process that was given the token deliberately by one created
before the leader is as out of reach here as one that scrubs its environment and leaves the
group (``rio_ci.run.survivors``).
"""

from __future__ import annotations

import dataclasses
import os

_RESERVED = 300  # the kernel wraps to this pid, not to 1
_LONGEST = 512  # probing more pids one by one costs more than listing /proc


@dataclasses.dataclass(frozen=True)
class Counters:
    """The kernel's counters at one moment: ``btime``, tasks created since boot, tasks
    alive, and the last pid handed out."""

    boot: float
    created: int
    alive: int
    last: int


@dataclasses.dataclass(frozen=True)
class Mark:
    """Counters read before a Worker's leader (``pid``) was spawned."""

    pid: int
    before: Counters


def counters() -> Counters | None:
    """The counters now; None where /proc does not give them."""
    try:
        system = _read("/proc/stat")
        load = _read("/proc/loadavg").split()
        boot = float(_field(system, b"\nbtime "))
        created = int(_field(system, b"\nprocesses "))
        alive, last = int(load[3].split(b"/")[1]), int(load[4])
    except (OSError, ValueError, IndexError):
        return None
    return Counters(boot, created, alive, last)


def since(mark: Mark) -> range | None:
    """Every pid handed out after ``mark.pid`` (dead ones included), or None when that is
    not sure or the range is too long to probe."""
    now, limit = counters(), pid_max()
    if now is None or limit is None or now.last < mark.pid:
        return None
    # Back above the leader after a wrap, the counter moved at least limit - _RESERVED.
    moved_at_most = 2 * (now.created - mark.before.created) + mark.before.alive
    if moved_at_most >= limit - _RESERVED or now.last - mark.pid > _LONGEST:
        return None
    return range(mark.pid + 1, now.last + 1)


def pid_max() -> int | None:
    try:
        return int(_read("/proc/sys/kernel/pid_max"))
    except (OSError, ValueError):
        return None


def thread_group_leader(pid: int) -> bool:
    """True if ``pid`` names a process, not one of its other threads (``/proc/PID`` answers
    for both, but only processes are listed)."""
    try:
        return int(_field(_read(f"/proc/{pid}/status"), b"\nTgid:")) == pid
    except (OSError, ValueError):
        return False


def _read(path: str) -> bytes:
    """The whole of a /proc file, read to its end (``/proc/stat`` outgrows one page on a
    machine with many CPUs and interrupts)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        parts = [os.read(fd, 1 << 16)]
        while parts[-1]:
            parts.append(os.read(fd, 1 << 16))
        return b"".join(parts)
    finally:
        os.close(fd)


def _field(text: bytes, key: bytes) -> bytes:
    at = text.index(key) + len(key)
    return text[at : text.index(b"\n", at)].strip()
