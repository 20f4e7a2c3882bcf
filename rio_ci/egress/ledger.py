"""From the proxy's accounts to the ``egress`` entries the Owner commits (docs/design.md,
"Egress: the mechanism", counting).

Within one Execution (a tag), the connections with the same host, port, verdict and reason
share a key. The first ``FIRST`` of a key are entries of their own, each with its own bytes;
the later ones are added up in one pending entry (their count, their bytes) that is handed
over when the Execution ends, or once it has waited ``WAIT`` seconds, so a crash loses at most
that much of a count and never the fact that there was one. Admitted connections are counted
the same way as refused ones: a loop that reaches an allowed host floods just as well.

Names are no way around it: once an Execution has named ``HOSTS`` distinct hosts (with their
ports), connections to any further one are counted under the host ``*`` and port 0.

So an Execution of ``s`` seconds adds at most ``(HOSTS + 1) * (FIRST + s / WAIT + 1)`` entries
per verdict and reason, however many connections it makes; every connection is still counted.
"""

from __future__ import annotations

import dataclasses
import queue

from rio_ci.egress.connection import Connection, Tag
from rio_ci.egress.policy import allow_line

FIRST = 3
WAIT = 60.0
HOSTS = 64
OTHERS = "*"  # the host that stands for every host past the first HOSTS of an Execution

_Key = tuple[Tag | None, str, int, bool, str]  # tag, host, port, allowed, reason


@dataclasses.dataclass(frozen=True)
class Entry:
    """One ``egress`` event to commit: ``count`` connections of one Execution to one host
    and port with one verdict, and their bytes each way."""

    tag: Tag | None
    host: str
    port: int
    allowed: bool
    reason: str
    bytes_up: int
    bytes_down: int
    count: int = 1


@dataclasses.dataclass(frozen=True)
class Refusal:
    """A host an Execution was refused, and how many times: for the Cell's result."""

    tag: Tag | None
    host: str
    port: int
    reason: str
    count: int

    @property
    def line(self) -> str | None:
        """The option that would admit the host (None where none would)."""
        return None if self.host == OTHERS else allow_line(self.host, self.port, self.reason)


@dataclasses.dataclass(frozen=True)
class Ending:
    """What an Execution's end hands over: the entries still to commit (the counted ones of
    that Execution among them), and the hosts it was refused, in the order first refused."""

    entries: tuple[Entry, ...]
    refused: tuple[Refusal, ...]


@dataclasses.dataclass
class _Count:
    since: float
    count: int = 0
    bytes_up: int = 0
    bytes_down: int = 0


class Ledger:
    """Accounts in (from the proxy's thread, :meth:`put`), entries out (on the Owner's)."""

    def __init__(self, *, first: int = FIRST, wait: float = WAIT, hosts: int = HOSTS) -> None:
        self._first, self._wait, self._most = first, wait, hosts
        self._inbox: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        self._seen: dict[_Key, int] = {}
        self._counts: dict[_Key, _Count] = {}
        self._refused: dict[tuple[Tag | None, str, int, str], int] = {}
        self._hosts: dict[Tag | None, set[tuple[str, int]]] = {}

    def put(self, account: Connection) -> None:
        """The proxy's sink: safe from any thread, never blocks."""
        self._inbox.put(account)

    def drain(self, now: float) -> list[Entry]:
        """The entries to commit now (``now``: ``time.monotonic()``): the first few of each
        key among the accounts that came in, then every count that has waited long enough."""
        entries = []
        while True:
            try:
                account = self._inbox.get_nowait()
            except queue.Empty:
                break
            entry = self._take(account, now)
            if entry is not None:
                entries.append(entry)
        due = [key for key, count in self._counts.items() if now - count.since >= self._wait]
        return entries + [self._release(key) for key in due]

    def end(self, tag: Tag | None, now: float) -> Ending:
        """Call once the proxy has ended ``tag`` (every account of it is in): what is left to
        commit, the counts of ``tag`` included, and the hosts it was refused. ``tag`` is
        forgotten: an Execution that ran again would count afresh."""
        entries = self.drain(now)
        entries += [self._release(key) for key in list(self._counts) if key[0] == tag]
        refused = [
            Refusal(tag, host, port, reason, count)
            for (owner, host, port, reason), count in self._refused.items()
            if owner == tag
        ]
        self._seen = {key: n for key, n in self._seen.items() if key[0] != tag}
        self._refused = {key: n for key, n in self._refused.items() if key[0] != tag}
        self._hosts.pop(tag, None)
        return Ending(tuple(entries), tuple(refused))

    def rest(self, now: float) -> list[Entry]:
        """Every entry still to commit, each pending count among them: call it once the
        proxy is closed (every account is in), as the Owner stops."""
        entries = self.drain(now)
        return entries + [self._release(key) for key in list(self._counts)]

    def _take(self, account: Connection, now: float) -> Entry | None:
        host, port = self._named(account)
        if not account.allowed and host:
            refusal = (account.tag, host, port, account.reason)
            self._refused[refusal] = self._refused.get(refusal, 0) + 1
        key = (account.tag, host, port, account.allowed, account.reason)
        self._seen[key] = seen = self._seen.get(key, 0) + 1
        if seen <= self._first:
            return Entry(*key, account.bytes_up, account.bytes_down)
        count = self._counts.setdefault(key, _Count(since=now))
        count.count += 1
        count.bytes_up += account.bytes_up
        count.bytes_down += account.bytes_down
        return None

    def _named(self, account: Connection) -> tuple[str, int]:
        """The host and port an account is counted under: its own, or ``*`` once its
        Execution has named the most hosts it may."""
        hosts = self._hosts.setdefault(account.tag, set())
        where = (account.host, account.port)
        if where in hosts or not account.host:
            return where
        if len(hosts) >= self._most:
            return OTHERS, 0
        hosts.add(where)
        return where

    def _release(self, key: _Key) -> Entry:
        count = self._counts.pop(key)
        return Entry(*key, count.bytes_up, count.bytes_down, count.count)
