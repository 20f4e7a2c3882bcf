"""Listening while a job runs rounds: the round loop calls a ``Listener`` between rounds and
while it waits; at most every ``interval`` seconds it asks its source, cheaply, whether
anything changed, and only then takes the source's wake-ups in (``take_all``: the same ids
and marks as a job's start, so each still enters the Inbox once). A wake-up — a ``stop``
included — reaches the running Session's next Turn instead of waiting behind the job.

The job's own scan comes first; the first look comes one interval later and, with nothing to
compare with, counts as a change, so nothing that came in between is missed, and a job
shorter than the interval asks nothing for listening. A failed look is a warning: the job
goes on, and the next job's scan takes in what this one missed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from rio_ci.core.errors import Rejected, RioError, RunEnded
from rio_ci.run.owner import Owner
from rio_ci.wake.source import Source
from rio_ci.wake.take import Taken, take_all


class Watched(Source, Protocol):
    """A source a running job can listen to (GitHub's: ``rio_ci.github.intake.GitHubSource``)."""

    def changed(self, marks: Mapping[str, Any]) -> bool:
        """Whether anything may have come since the last call (True the first time); cheap
        enough to ask every ``interval`` (GitHub: conditional requests, free when nothing
        changed). ``marks``: the Session's watermarks, as for ``wake_ups``."""
        ...


class Listener:
    def __init__(
        self,
        owner: Owner,
        source: Watched,
        *,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        warn: Callable[[str], None] | None = None,
        told: Callable[[Taken], None] = lambda taken: None,
    ) -> None:
        self.owner, self.source, self.told = owner, source, told
        self.interval, self.clock = interval, clock
        self.warn = warn or (lambda message: None)
        self.last: float | None = None
        self.looks = 0  # looks made (each a few cheap questions to the source)
        self.scans = 0  # scans they caused

    def prime(self) -> None:
        """Start the clock: the first look comes one ``interval`` from now. Having nothing
        to compare with, it counts as a change, so its scan takes in whatever came after
        the job's own."""
        self.last = self.clock()

    def __call__(self) -> None:
        now = self.clock()
        if self.last is not None and now - self.last < self.interval:
            return
        self.last = now
        session = self.owner.session
        if session.refresh().ended:
            return
        try:
            self.looks += 1
            if self.source.changed(session.proj.watermarks):
                self.scans += 1
                marks = dict(session.proj.watermarks)
                take_all(self.owner, self.source.wake_ups(marks), told=self.told)
        except (Rejected, RunEnded) as exc:
            self.warn(f"an observation was not taken in: {exc}")
        except RioError as exc:
            self.warn(f"looking for what is new failed ({exc}); the next job re-scans")
