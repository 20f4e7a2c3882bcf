"""A running job hears new comments (docs/github.md "Steering a running job").

While ``rio-ci action`` runs rounds, the harness calls a ``Listener`` between rounds and
while it waits. At most every ``interval`` seconds it asks GitHub, with conditional requests,
whether the issue or its pull request changed (a new comment, review or inline comment); an
unchanged answer is a 304, which costs no rate limit. Only when something changed does it
re-scan (``intake.take_in``: the same watermarks and message ids as a job's start, so each
observation still enters the Inbox once). A writer's comment — ``/rio stop`` included —
reaches the running Session's next Turn instead of waiting behind the job.

The listener looks first (``prime``) and the job's own re-scan comes after, so anything
written between the two is seen by the next look. A failed look is a warning: the job goes
on, and the next job's re-scan delivers what this one missed.
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
    ) -> None:
        self.owner, self.forge, self.issue = owner, forge, issue
        self.interval, self.clock = interval, clock
        self.warn = warn or (lambda message: None)
        self.last: float | None = None
        self.looks = 0  # conditional looks made (each a few requests)
        self.scans = 0  # re-scans they caused

    def prime(self) -> None:
        """The first look: remembers what the issue and pull request are now."""
        self.last = self.clock()
        self._changed()

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
                take_in(self.owner, self.forge, self.issue, warn=self.warn)
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
