"""GitHub's rate-limit answers, waited out within a time budget (docs/github.md
"Requests, rate limits and storage").

GitHub answers a request over a rate limit ``403`` or ``429``. Its pages say how long to
wait: ``retry-after`` seconds when the header is there; else, when
``x-ratelimit-remaining`` is ``0``, until the UTC epoch second in ``x-ratelimit-reset``;
else (a secondary limit that names no time) at least a minute, longer on each repeat. A
``403`` with none of these and no rate limit in its message is a refusal (a missing
permission) and is not waited on. A refused request did nothing, so waiting and asking
again is safe for a write too.

``Patience`` holds the budget: it waits (``sleep``, injectable, so tests take no time) only
when the wait ends before its deadline, at most ``tries`` times in a row; otherwise it gives
up, and the caller reports a ``ForgeError`` saying so.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rio_ci.core.errors import ForgeError

SECONDARY_WAIT = 60.0  # "wait for at least one minute before retrying"
TRIES = 5  # waits in a row for one request before giving up


@dataclass(frozen=True)
class Refusal:
    """A rate-limit answer: its status and the headers that say how long to wait."""

    status: int
    retry_after: str = ""
    remaining: str = ""
    reset: str = ""

    def seconds(self, now: float, repeat: int) -> float:
        """How long to wait before asking again (``repeat``: waits already made for it)."""
        retry = _number(self.retry_after)
        if retry is not None:
            return retry
        reset = _number(self.reset)
        if self.remaining == "0" and reset is not None:
            return max(0.0, reset - now) + 1.0  # "not until after" the reset second
        return SECONDARY_WAIT * 2.0**repeat

    def __str__(self) -> str:
        if self.retry_after:
            return f"HTTP {self.status}, retry-after {self.retry_after} s"
        if self.remaining == "0":
            return f"HTTP {self.status}, x-ratelimit-remaining 0 until {self.reset}"
        return f"HTTP {self.status}, a secondary rate limit"


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value < 10**10 else None


def refusal(status: int | None, headers: Mapping[str, str], message: str) -> Refusal | None:
    """The answer as a rate-limit refusal, or None when it is none (any other status, or a
    ``403`` that names no limit: a missing permission)."""
    if status not in (403, 429):
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    found = Refusal(
        status,
        lowered.get("retry-after", ""),
        lowered.get("x-ratelimit-remaining", ""),
        lowered.get("x-ratelimit-reset", ""),
    )
    if status == 429 or found.retry_after or found.remaining == "0":
        return found
    return found if "rate limit" in message.lower() else None


class Limited(ForgeError):
    """A request GitHub refused for a rate limit (``refusal``); ``GitHubForge`` waits it out
    or gives up."""

    def __init__(self, message: str, found: Refusal) -> None:
        super().__init__(message, status=found.status)
        self.refusal = found


class Patience:
    """How long this step may wait for rate limits: until ``seconds`` from now (None: no
    waiting at all). ``log`` hears every wait and every giving up."""

    def __init__(
        self,
        seconds: float | None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] | None = None,
        tries: int = TRIES,
    ) -> None:
        self.deadline = None if seconds is None else monotonic() + seconds
        self.sleep, self.clock, self.monotonic = sleep, clock, monotonic
        self.log = log or (lambda message: None)
        self.tries = tries
        self.waited: list[float] = []

    def wait(self, found: Refusal, repeat: int, what: str) -> str | None:
        """Wait before ``what`` is asked again; None once waited, else why it gives up."""
        seconds = found.seconds(self.clock(), repeat)
        if self.deadline is None:
            return "this step does not wait for rate limits"
        if repeat >= self.tries:
            return f"still limited after {repeat} waits"
        if self.monotonic() + seconds > self.deadline:
            return f"waiting {seconds:.0f} s would pass this step's time budget"
        self.log(f"rio-ci: GitHub's rate limit ({found}) on {what}: waiting {seconds:.0f} s")
        self.waited.append(seconds)
        self.sleep(seconds)
        return None
