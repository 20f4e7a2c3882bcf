"""The Cells' network (docs/network.md): under the Cell user, a network namespace of their own
whose only way out is the egress proxy this Owner serves from outside it; elsewhere the host's
network, and why.

One ``CellNetwork`` per Owner, built before its first launch from the network the Session
fixed when it was created. The Owner tells it when an Execution (a tag: a Cell id, or a
validator's name) is released (:meth:`CellNetwork.begin`) and once its processes are stopped
(:meth:`CellNetwork.end`); what the ledger hands over becomes ``egress`` events and, for the
refused hosts, part of the Execution's result (``rio_ci.core.events``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from rio_ci.core import events as ev
from rio_ci.egress import netns
from rio_ci.egress.connection import Tag, variables
from rio_ci.egress.ledger import Entry, Ledger
from rio_ci.egress.netns import Netns
from rio_ci.session.settings import Network

if TYPE_CHECKING:  # the proxy (asyncio) is imported only where Cells have a namespace
    from rio_ci.egress.proxy import EgressProxy

HOST_NOTICE = "Cells use the host's network"


class CellNetwork:
    """Where a Session's Cells connect: through the proxy, or the host's network."""

    def __init__(self, network: Network, problem: str | None) -> None:
        """``problem``: why Cells cannot have a network of their own before any namespace
        is tried (they share the harness's user), or None: one is made now. NamespaceError
        when the thread that made it could not come back."""
        self.network = network
        self.reason = problem
        self._space: Netns | None = None
        self._proxy: EgressProxy | None = None
        self._ledger = Ledger()
        if problem is None:
            try:
                self._space = Netns.make()
            except OSError as exc:
                self.reason = netns.refusal(exc)
        if self._space is not None:
            from rio_ci.egress.proxy import EgressProxy

            self._proxy = EgressProxy(network.policy(), self._ledger.put)
            self._proxy.serve(self._space.listener)

    @property
    def isolated(self) -> bool:
        return self._proxy is not None

    def record(self) -> ev.CellNetwork:
        """What the ``cell_user`` event says of it."""
        return {"isolated": self.isolated, "reason": self.reason}

    def notice(self) -> str | None:
        """The line for the log when Cells use the host's network, else None."""
        if self.isolated:
            return None
        return f"{HOST_NOTICE} ({self.reason}): nothing records or stops their connections"

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """Around a Worker's ``Popen``: it starts inside the namespace (where there is one)."""
        if self._space is None:
            yield
            return
        with self._space.entered():
            yield

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """A Worker's environment, pointing its tools at the proxy (where there is one)."""
        return {**env, **variables(netns.PORT)} if self.isolated else env

    def begin(self, tag: Tag) -> None:
        """The Execution ``tag`` is about to be released: its connections are its own."""
        if self._proxy is not None:
            self._proxy.tag = tag

    def end(self, tag: Tag) -> tuple[list[ev.Egress], list[ev.RefusedHost]]:
        """Once the processes of ``tag`` are stopped: the ``egress`` events still to commit
        for it (and any others due) and the hosts it was refused."""
        if self._proxy is None:
            return [], []
        self._proxy.end(tag)
        self._proxy.tag = None
        ending = self._ledger.end(tag, time.monotonic())
        refused: list[ev.RefusedHost] = [
            {
                "host": r.host,
                "port": r.port,
                "reason": r.reason,
                "count": r.count,
                "allow": r.line,
            }
            for r in ending.refused
        ]
        return [_event(e) for e in ending.entries], refused

    def due(self) -> list[ev.Egress]:
        """The ``egress`` events to commit now (the first few of a kind, counts that have
        waited long enough)."""
        return [_event(e) for e in self._ledger.drain(time.monotonic())]

    def close(self) -> list[ev.Egress]:
        """Stop the proxy (its connections closed) and let the namespace go; every
        ``egress`` event still to commit."""
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = None
        if self._space is not None:
            self._space.close()
            self._space = None
        return [_event(e) for e in self._ledger.rest(time.monotonic())]


def _event(entry: Entry) -> ev.Egress:
    return {
        "cell_id": entry.tag if isinstance(entry.tag, int) else None,
        "host": entry.host,
        "port": entry.port,
        "allowed": entry.allowed,
        "reason": entry.reason,
        "bytes_up": entry.bytes_up,
        "bytes_down": entry.bytes_down,
        "count": entry.count,
    }
