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
from typing import Any, cast

from rio_ci.core.entities import (
    Cell,
    CellUserRecord,
    Departed,
    EgressTally,
    Ended,
    Execution,
    Message,
    SessionFacts,
    Timer,
    Turn,
    Usage,
)
from rio_ci.core.events import Control, Json
from rio_ci.core.limits import Limits

# The shape of a Projection. Raise it whenever the fold changes what it keeps: a saved
# projection written in another format is ignored and the Journal replayed.
PROJECTION_FORMAT = 5
DEPARTED_KEPT = 10  # more would cross a page of the saved projection in the bench's drive
REFUSED_KEPT = 32  # refused hosts listed; the later ones are counted under the host "*"


@dataclass
class Projection:
    # empty until ``session_created``, the first event, is folded
    session: SessionFacts = field(default_factory=lambda: cast(SessionFacts, {}))
    last_seq: int = 0
    revision: int = 0
    next_cell_id: int = 1
    cells: list[Cell] = field(default_factory=list)
    executions: dict[str, Execution] = field(default_factory=dict)
    inbox: list[Message] = field(default_factory=list)
    turn: Turn | None = None  # the open Turn
    accepted_turns: int = 0
    pause: str | None = None
    controls: list[Control] = field(default_factory=list)  # awaiting the Owner
    timers: dict[str, Timer] = field(default_factory=dict)  # waiting
    usage: Usage = field(default_factory=lambda: cast(Usage, {}))  # as session is
    idle_streak: int = 0
    ended: Ended | None = None
    watermarks: dict[str, Json] = field(default_factory=dict)  # name -> value
    prices: dict[str, dict[str, float]] = field(default_factory=dict)  # model -> price (--price)
    rationale: str = ""  # what the model last wrote before its step call
    cell_user: CellUserRecord | None = None  # how Cells run (the last cell_user event)
    departed: list[Departed] = field(default_factory=list)  # the last dropped Executions
    departed_before: int = 0  # Executions dropped before those
    # Connections through the egress proxy: {"allowed": N, "refused": [{host, port, count,
    # cell_id, reason}]}, a host refused again counted in its entry (the last Cell it
    # refused, and why).
    egress: EgressTally = field(default_factory=lambda: EgressTally(allowed=0, refused=[]))

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Projection:
        return cls(**copy.deepcopy(data))

    @property
    def limits(self) -> Limits:
        """The Session's limits, typed (stored as a mapping in ``session_created``)."""
        return Limits.from_stored(self.session["limits"])

    def pending(self) -> list[Execution]:
        """Executions not yet finished, in acceptance order (ids rise with acceptance)."""
        rows = [e for e in self.executions.values() if e["phase"] != "finished"]
        return sorted(rows, key=lambda e: e["cell_id"])

    def queued(self) -> list[Execution]:
        return [e for e in self.pending() if e["phase"] == "queued"]

    def unresolved(self) -> list[Execution]:
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


def is_unresolved(execution: Execution) -> bool:
    result = execution["result"]
    return (
        result is not None
        and result["type"] == "UnknownExecution"
        and execution["resolved_by"] is None
    )
