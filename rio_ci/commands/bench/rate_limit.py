"""How GitHub counts REST requests against a token's rate limit, written once for the two
loopback fakes that count them: the bench's (``github_api``) and the tests'
(``tests/fakes/github``). docs/github.md "Requests, rate limits and storage" cites GitHub's
pages for each rule.

- Every request to the REST API counts, errors and redirects included, except a conditional
  request (``If-None-Match`` naming the resource's current ``ETag``) answered
  ``304 Not Modified``.
- A download from the place an API answer redirects to (an artifact's blob: the API answers
  ``302`` with its ``Location``) is not a request to the API: the API's ``302`` counts, the
  blob does not. The fakes serve blobs outside the API and never call ``answer`` for them.
- Every API answer carries ``x-ratelimit-limit``, ``-remaining``, ``-used``, ``-reset``
  (UTC epoch seconds) and ``-resource``; once the window's budget is spent, requests are
  refused ``403`` with ``x-ratelimit-remaining: 0`` until ``x-ratelimit-reset``.
- An ``ETag`` is a digest of the answer's body, so it changes whenever the resource does.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["JOB_TOKEN_LIMIT", "Counted", "RateLimit", "etag_of", "names"]

JOB_TOKEN_LIMIT = 1000  # GITHUB_TOKEN: requests per hour per repository on github.com
WINDOW_SECONDS = 3600.0
PRIMARY = "API rate limit exceeded for installation."
SECONDARY = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)


def etag_of(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def names(if_none_match: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (weak or strong, in a list)."""
    given = [t.strip().removeprefix("W/") for t in (if_none_match or "").split(",")]
    return etag.removeprefix("W/") in given


@dataclass(frozen=True)
class Counted:
    """One request that counted against the rate limit."""

    method: str
    path: str
    query: str  # as sent, ``a=1&b=2`` (empty when none)
    status: int

    def __str__(self) -> str:
        return f"{self.method} {self.path}{'?' + self.query if self.query else ''} → {self.status}"


class RateLimit:
    """One token's budget: ``limit`` counted requests per ``window`` seconds, the window
    starting at the first request (``clock``: epoch seconds)."""

    def __init__(
        self,
        limit: int = JOB_TOKEN_LIMIT,
        *,
        window: float = WINDOW_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.limit, self.window, self.clock = limit, window, clock
        self.counted: list[Counted] = []
        self._started: float | None = None
        self._used = 0

    def _reset_at(self) -> float:
        now = self.clock()
        if self._started is None or now >= self._started + self.window:
            self._started, self._used = now, 0
        return self._started + self.window

    def spent(self) -> bool:
        """Whether the window's budget is spent (the next request is refused)."""
        self._reset_at()
        return self._used >= self.limit

    def answer(self, method: str, path: str, query: str, status: int) -> dict[str, str]:
        """Record an API answer (it counts unless it is a 304) and return the rate-limit
        headers GitHub sends with it."""
        reset = self._reset_at()
        if status != 304:
            self._used += 1
            self.counted.append(Counted(method, path, query, status))
        return {
            "x-ratelimit-limit": str(self.limit),
            "x-ratelimit-remaining": str(max(0, self.limit - self._used)),
            "x-ratelimit-used": str(self._used),
            "x-ratelimit-reset": str(int(reset)),
            "x-ratelimit-resource": "core",
        }
