"""Taking GitHub's observations into a Session: who may steer, and the re-scan of comments
and checks since a committed watermark (events can be dropped, so every job re-scans; each
observation enters the Inbox once, under a stable id)."""

from __future__ import annotations

from collections.abc import Callable

from rio_ci.errors import Rejected, RunEnded
from rio_ci.github import progress
from rio_ci.github.env import log
from rio_ci.github.events import NEVER_WRITERS, branch_for, quote_untrusted, steer_command
from rio_ci.github.forge.base import Check, Comment, Forge
from rio_ci.github.images import ImageFetcher, kept
from rio_ci.run.owner import Owner

WRITERS = frozenset({"admin", "maintain", "write"})
COMMENT_QUOTE_BYTES = 6000


def may_steer(forge: Forge, user: str | None, association: str | None) -> bool:
    """Write access comes only from the collaborator-permission API (``admin``,
    ``maintain``, ``write``). ``author_association`` may only reject early, and only the
    values no writer can have (FIRST_TIMER, FIRST_TIME_CONTRIBUTOR): OWNER, MEMBER and
    COLLABORATOR do not imply write access, and a private organization member with write
    access arrives as CONTRIBUTOR or NONE. Bots never steer."""
    if not user or user.endswith("[bot]") or association in NEVER_WRITERS:
        return False
    return forge.permission(user) in WRITERS


def is_ours(comment: Comment) -> bool:
    """A comment rio-ci or another bot wrote (the progress comment among them)."""
    return progress.MARKER in comment.body or comment.author.endswith("[bot]")


def take_in(
    owner: Owner,
    forge: Forge,
    issue: int,
    warn: Callable[[str], None] | None = None,
    reported: Check | None = None,
    fetcher: ImageFetcher | None = None,
) -> None:
    """Re-scan comments (issue and pull request) and checks; each observation enters the
    Inbox once, under a stable id. Listing checks is optional: a 403 or 404 there goes to
    ``warn``, and the finished run or check this job's own event ``reported`` still enters
    (under the id the listing would give it). Comments advance a watermark (their ids rise
    in the order they are written); checks do not — runs finish out of id order — and rely
    on the message id alone. A full Inbox stops the scan without advancing past what it
    refused."""
    session = owner.session
    marks = session.proj.watermarks
    numbers = [issue, *([int(marks["pull_request"])] if marks.get("pull_request") else [])]
    try:
        for number in numbers:
            _take_comments(owner, forge, number, fetcher)
        listed = forge.checks(branch_for(issue), warn=warn)
        for check in sorted(
            {(c.kind, c.id): c for c in [*([reported] if reported else []), *listed]}.values(),
            key=lambda c: c.id,
        ):
            if session.refresh().ended:
                return
            session.receive(
                f"check:{check.kind}:{check.id}",
                "check",
                {
                    "name": check.name,
                    "conclusion": check.conclusion,
                    "url": check.url,
                    "kind": check.kind,
                },
            )
    except (Rejected, RunEnded) as exc:
        log(f"::warning::rio-ci: an observation was not taken in: {exc}")


def _take_comments(
    owner: Owner, forge: Forge, number: int, fetcher: ImageFetcher | None = None
) -> None:
    session = owner.session
    key = f"comments:{number}"
    last = int(session.proj.watermarks.get(key, 0))
    for comment in forge.comments(number, after_id=last):
        if session.refresh().ended:
            return
        command = steer_command(comment.body)
        if is_ours(comment):
            pass
        elif not may_steer(forge, comment.author, comment.association):
            log(f"rio-ci: comment {comment.id} by @{comment.author} ignored (no write access)")
        elif command == "stop":
            owner.end_in_failure(f"stopped by @{comment.author} ({comment.url})")
        elif command is None:
            session.receive(
                f"comment:{comment.id}",
                "comment",
                {
                    "author": comment.author,
                    "url": comment.url,
                    "untrusted": True,
                    "body": quote_untrusted(comment.body, COMMENT_QUOTE_BYTES),
                    # its pictures, stored by digest (rio_ci/github/images.py)
                    **(kept(session, fetcher.fetch(comment.body)) if fetcher else {}),
                },
            )
        # "/rio status" needs nothing here: this job rewrites the progress comment anyway.
        session.set_watermark(key, comment.id)
