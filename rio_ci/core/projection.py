"""The Projection: everything the harness needs to act, folded from the Journal alone.

It stays bounded however long the Journal grows: finished, settled Executions of Cells that
left the context and consumed Inbox messages are dropped by the fold (their events stay in the
Journal, where history is read). Of the dropped Executions it keeps the last
``DEPARTED_KEPT`` in short (``departed``: what ``rio-ci show`` lists, so that it reads no
history) and how many were dropped before them (``departed_before``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from rio_ci.core.limits import Limits

# The shape of a Projection. Raise it whenever the fold changes what it keeps: a saved
# projection written in another format is ignored and the Journal replayed.
PROJECTION_FORMAT = 5
DEPARTED_KEPT = 10  # more would cross a page of the saved projection in the bench's drive
REFUSED_KEPT = 32  # refused hosts listed; the later ones are counted under the host "*"


@dataclass
class Projection:
    session: dict[str, Any] = field(default_factory=dict)
    last_seq: int = 0
    revision: int = 0
    next_cell_id: int = 1
    cells: list[dict[str, Any]] = field(default_factory=list)
    executions: dict[str, dict[str, Any]] = field(default_factory=dict)
    inbox: list[dict[str, Any]] = field(default_factory=list)
    turn: dict[str, Any] | None = None  # the open Turn
    accepted_turns: int = 0
    pause: str | None = None
    controls: list[dict[str, Any]] = field(default_factory=list)  # awaiting the Owner
    timers: dict[str, dict[str, Any]] = field(default_factory=dict)  # waiting
    usage: dict[str, Any] = field(default_factory=dict)
    idle_streak: int = 0
    ended: dict[str, Any] | None = None
    watermarks: dict[str, Any] = field(default_factory=dict)
    prices: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> price (--price)
    rationale: str = ""  # what the model last wrote before its step call
    cell_user: dict[str, Any] | None = None  # how Cells run (the last cell_user event)
    departed: list[dict[str, Any]] = field(default_factory=list)  # the last dropped Executions
    departed_before: int = 0  # Executions dropped before those
    # Connections through the egress proxy: {"allowed": N, "refused": [{host, port, count,
    # cell_id, reason}]}, a host refused again counted in its entry (the last Cell it
    # refused, and why).
    egress: dict[str, Any] = field(default_factory=lambda: {"allowed": 0, "refused": []})

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Projection:
        return cls(**copy.deepcopy(data))

    @property
    def limits(self) -> Limits:
        """The Session's limits, typed (stored as a mapping in ``session_created``)."""
        return Limits.from_stored(self.session["limits"])

    def pending(self) -> list[dict[str, Any]]:
        """Executions not yet finished, in acceptance order (ids rise with acceptance)."""
        rows = [e for e in self.executions.values() if e["phase"] != "finished"]
        return sorted(rows, key=lambda e: e["cell_id"])

    def queued(self) -> list[dict[str, Any]]:
        return [e for e in self.pending() if e["phase"] == "queued"]

    def unresolved(self) -> list[dict[str, Any]]:
        rows = [e for e in self.executions.values() if is_unresolved(e)]
        return sorted(rows, key=lambda e: e["cell_id"])

    def next_wake(self) -> float | None:
        """The earliest waiting Timer's deadline, or None."""
        return min((t["deadline"] for t in self.timers.values()), default=None)

    def success_problems(self) -> list[str]:
        """Why a success conclusion cannot be accepted now (validators aside); [] when clean."""
        problems = []
        if self.pending():
            problems.append(f"work is pending (cells {[e['cell_id'] for e in self.pending()]})")
        if self.unresolved():
            problems.append(
                f"uncertainty is unresolved (cells {[e['cell_id'] for e in self.unresolved()]})"
            )
        if self.timers:
            problems.append(f"Timers are waiting ({sorted(self.timers)})")
        if self.inbox:
            problems.append(f"observations are unconsumed ({[m['id'] for m in self.inbox]})")
        return problems


def is_unresolved(execution: dict[str, Any]) -> bool:
    result = execution.get("result")
    return (
        isinstance(result, dict)
        and result.get("type") == "UnknownExecution"
        and execution.get("resolved_by") is None
    )
