"""A read of the GitHub API whose HTTP status is the answer, not an error: what the set-up
check (``rio_ci.github.setup_check``) asks, to tell a missing permission, label or workflow
from a working one. GitHub names the permissions a refused request needed in the
``X-Accepted-GitHub-Permissions`` header (docs/github.md, "Checking the set-up")."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from github.GithubException import GithubException
from github.Requester import Requester

from rio_ci.core.errors import ForgeError

ACCEPTED = "x-accepted-github-permissions"


@dataclass(frozen=True)
class Answer:
    """``status`` (200 …); ``body`` the decoded JSON (None if none); ``accepted`` the
    permissions GitHub says the endpoint takes (``issues=read``; empty when it sent none)."""

    status: int
    body: Any
    accepted: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def fetch(requester: Requester, url: str, params: dict[str, Any] | None = None) -> Answer:
    """GET ``url``; a network failure is a ``ForgeError``, any HTTP status an ``Answer``."""
    try:
        status, headers, text = requester.requestJson("GET", url, parameters=params)
    except (GithubException, OSError) as exc:
        raise ForgeError(f"GitHub: reading {url} failed: {exc}") from exc
    try:
        body = json.loads(text) if text else None
    except ValueError:
        body = None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    return Answer(status, body, lowered.get(ACCEPTED, ""))
