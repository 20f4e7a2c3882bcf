"""A running job hears new comments (docs/github.md "Steering a running job").

While ``rio-ci action`` runs rounds, the harness calls a ``Listener`` between rounds and
while it waits. At most every ``interval`` seconds it asks GitHub, with conditional requests,
whether the issue changed (its comment count moves with each comment) or its pull request's
lists did (comments, reviews, inline comments); an unchanged answer is a 304, which costs no
rate limit. Only when something changed does it re-scan (``intake.take_in``: the same
watermarks and message ids as a job's start, so each observation still enters the Inbox
once; the lists it reads again were kept with their ETags, so an unchanged one is free). A
writer's comment — ``/rio stop`` included — reaches the running Session's next Turn instead
of waiting behind the job.

The job's own re-scan comes first; the listener's first look comes one interval later and,
with nothing to compare with, re-scans, so nothing written in between is missed, and a job
shorter than the interval asks nothing for listening. A failed look is a warning: the job
goes on, and the next job's re-scan delivers what this one missed.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rio_ci.core.errors import RioError
from rio_ci.forge.base import Forge
from rio_ci.github.intake import take_in
from rio_ci.run.owner import Owner

INTERVAL_SECONDS = 30.0


class Listener:
    def __init__(
        self,
        owner: Owner,
        forge: Forge,
        issue: int,
        *,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        warn: Callable[[str], None] | None = None,
        head: str | None = None,
    ) -> None:
        self.owner, self.forge, self.issue = owner, forge, issue
        self.head = head  # the branch's head as the job checked it out (intake.take_in)
        self.interval, self.clock = interval, clock
        self.warn = warn or (lambda message: None)
        self.last: float | None = None
        self.looks = 0  # conditional looks made (each a few requests)
        self.scans = 0  # re-scans they caused

    def prime(self) -> None:
        """Start the clock: the first look comes one ``interval`` from now. Having nothing
        to compare with, it counts as a change, so its re-scan takes in whatever came after
        the job's own (reading again, for free, what did not change)."""
        self.last = self.clock()

    def __call__(self) -> None:
        now = self.clock()
        if self.last is not None and now - self.last < self.interval:
            return
        self.last = now
        if self.owner.session.refresh().ended:
            return
        try:
            if self._changed():
                self.scans += 1
                take_in(self.owner, self.forge, self.issue, warn=self.warn, head=self.head)
        except RioError as exc:
            self.warn(f"looking for new comments failed ({exc}); the next job re-scans")

    def _changed(self) -> bool:
        """Looks at every resource (each keeps its own ETag fresh), True if any changed."""
        self.looks += 1
        pull = self.owner.session.proj.watermarks.get("pull_request")
        changed = self.forge.changed(self.issue)
        if pull:
            changed = self.forge.changed(int(pull), pull=True) or changed
        return changed
