"""The seam between what happens outside and a Session: a source yields ``WakeUp`` values
(and ``Mark`` values, its place in its host's history), and ``rio_ci.wake.take`` takes them
in. Nothing here knows a code host."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

# What a wake-up may ask besides a message: ``stop`` ends the run in failure; ``status`` asks
# for a report (the caller gives it; nothing enters the Inbox).
Command = Literal["stop", "status"]


@dataclass(frozen=True)
class Mark:
    """A source's place in its host's history, kept as the Session's watermark ``name``
    (the next scan starts after it; a follow-up Session keeps it)."""

    name: str
    value: Any  # JSON


@dataclass(frozen=True)
class WakeUp:
    """One thing from outside that may wake a Session.

    ``id`` is stable: the same thing seen again (a re-scan, a second job) has the same id,
    and it enters the Inbox once under it. ``kind`` and ``payload`` are the Inbox message's
    (the rules of ``rio_ci.core.inbox`` apply). ``author`` is who wrote it (None: the host's
    own report, a finished check); ``may_steer`` says whether it may reach the model at all,
    as the source decided (its author may steer the Session, or it is the host's report).
    ``command``: a ``stop`` or ``status`` instead of a message. ``url`` is where a person
    reads it. ``mark``: the place to keep once it is taken (whatever became of it)."""

    id: str
    kind: str
    payload: Mapping[str, Any]
    author: str | None = None
    may_steer: bool = False
    command: Command | None = None
    url: str = ""
    mark: Mark | None = None


class Source(Protocol):
    """Where wake-ups come from (GitHub: ``rio_ci.github.intake.GitHubSource``)."""

    def wake_ups(self, marks: Mapping[str, Any]) -> Iterable[WakeUp | Mark]:
        """What happened since the places kept in ``marks`` (the Session's watermarks),
        oldest first, as wake-ups and, for what it skips, bare marks. Lazily: taking in
        stops at the first wake-up that finds the run ended, and asks for nothing more."""
        ...
