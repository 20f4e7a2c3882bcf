"""The fake's vocabulary: recorded requests, tokens, injected failures, the permission a job
token needs for each REST path, and how answers are encoded."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

Json = Any
Reply = tuple[int, Json, dict[str, str]]


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    body: bytes


@dataclass
class Token:
    """What a token may do. ``permissions`` None means everything (the fake's default token);
    otherwise a GITHUB_TOKEN-style map such as ``{"contents": "write", "checks": "read"}``.
    ``workflows`` lets its pushes change ``.github/workflows/``; ``kind`` is ``app`` (the job
    token or an installation token) or ``pat`` and picks GitHub's wording of refusals."""

    permissions: dict[str, str] | None = None
    workflows: bool = False
    kind: str = "app"
    expired: bool = False


@dataclass
class Failure:
    """Injected answers: every request matching ``method`` (``*`` = any) and ``pattern``,
    after the first ``after`` of them, gets ``status`` — ``times`` times, or forever."""

    method: str
    pattern: re.Pattern[str]
    status: int
    times: int | None = None
    after: int = 0
    message: str = ""
    seen: int = 0
    hits: int = 0
    retry_after: int | None = None  # a rate-limit answer's ``retry-after`` (seconds)
    reset_in: float | None = None  # ``x-ratelimit-remaining: 0``, reset this many s from now

    def headers(self) -> dict[str, str]:
        """The headers GitHub sends with this answer (a rate-limit answer's)."""
        found = {}
        if self.retry_after is not None:
            found["retry-after"] = str(self.retry_after)
        if self.reset_in is not None:
            found["x-ratelimit-remaining"] = "0"
            found["x-ratelimit-reset"] = str(int(time.time() + self.reset_in))
        return found

    def take(self, method: str, path: str) -> bool:
        if self.method not in ("*", method) or not self.pattern.fullmatch(path):
            return False
        self.seen += 1
        if self.seen <= self.after or (self.times is not None and self.hits >= self.times):
            return False
        self.hits += 1
        return True


# The permission a job token needs for a REST path (after /repos/{owner}/{repo}); reads need
# `read`, anything else `write`. Paths not listed need only metadata, which every token has.
SCOPES = [
    (re.compile(p), scope)
    for p, scope in (
        (r"/issues.*", "issues"),
        (r"/pulls.*", "pull-requests"),
        (r"/actions/permissions.*", "administration"),  # the repository's Actions settings
        (r"/actions/.*", "actions"),
        (r"/commits/[^/]+/check-(runs|suites)|/check-(runs|suites).*", "checks"),
        (r"/dispatches", "contents"),
        (r"/git/.*|/contents/.*", "contents"),
    )
]
REFUSALS = {
    "app": "Resource not accessible by integration",
    "pat": "Resource not accessible by personal access token",
}
WORKFLOW_STATES = ("active", "disabled_manually", "disabled_inactivity")


def not_found() -> Reply:
    return 404, {"message": "Not Found"}, {}


def encode(status: int, data: Json, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
    if data is None:
        return status, b"", headers
    return status, json.dumps(data).encode(), {"Content-Type": "application/json", **headers}
