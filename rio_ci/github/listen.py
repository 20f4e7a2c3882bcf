"""A running job hears new comments (docs/github.md "Steering a running job"): the seam's
``Listener`` (rio_ci/wake/listen.py) on GitHub's source.

At most every ``interval`` seconds it asks GitHub, with conditional requests, whether the
issue changed (its comment count moves with each comment) or its pull request's lists did
(comments, reviews, inline comments: ``GitHubSource.changed``); an unchanged answer is a
304, which costs no rate limit. Only when something changed does it re-scan (the same
watermarks and message ids as a job's start; the lists it reads again were kept with their
ETags, so an unchanged one is free). A writer's comment — ``/rio stop`` included — reaches
the running Session's next Turn instead of waiting behind the job.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from rio_ci.forge.base import Forge
from rio_ci.github.intake import GitHubSource, told
from rio_ci.run.owner import Owner
from rio_ci.wake import listen

INTERVAL_SECONDS = 30.0


class Listener(listen.Listener):
    """The listener of a job on ``issue``; ``head``: the branch's head as the job checked it
    out (``intake.take_in``)."""

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
        budget = owner.session.limits.output_bytes
        source = GitHubSource(forge, issue, budget, warn=warn, head=head)
        super().__init__(
            owner, source, interval=interval, clock=clock, warn=warn, told=partial(told, forge)
        )
