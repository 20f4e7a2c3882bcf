"""Taking GitHub's observations into a Session: who may steer, and the re-scan of comments
and checks since a committed watermark (events can be dropped, so every job re-scans; each
observation enters the Inbox once, under a stable id)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rio_ci.core.errors import Rejected, RioError, RunEnded
from rio_ci.core.json_value import encoded_size
from rio_ci.forge.base import Check, Comment, Forge, Review, ReviewComment
from rio_ci.forge.issues import branch_for, quote_untrusted
from rio_ci.github.contract import log
from rio_ci.github.images import ImageFetcher, kept
from rio_ci.github.triggers import NEVER_WRITERS, steer_command
from rio_ci.reports import progress
from rio_ci.run.owner import Owner

WRITERS = frozenset({"admin", "maintain", "write"})
COMMENT_QUOTE_BYTES = 6000
INLINE_QUOTE_BYTES = 2000  # one inline comment's body
HUNK_CHARS = 1500  # the diff hunk an inline comment points at
REVIEW_COMMENTS = 40  # inline comments quoted in one review message; the rest are counted


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


def watched(issue: int, marks: dict[str, Any]) -> list[int]:
    """The numbers whose comments steer a Session: its issue and, once it has one, its pull
    request (the ``pull_request`` watermark)."""
    pull = marks.get("pull_request")
    return [issue, int(pull)] if pull else [issue]


def take_in(
    owner: Owner,
    forge: Forge,
    issue: int,
    warn: Callable[[str], None] | None = None,
    reported: Check | None = None,
    fetcher: ImageFetcher | None = None,
    head: str | None = None,
) -> None:
    """Re-scan comments (issue and pull request), the pull request's reviews, and checks;
    each observation enters the
    Inbox once, under a stable id. Listing checks is optional: a 403 or 404 there goes to
    ``warn``, and the finished run or check this job's own event ``reported`` still enters
    (under the id the listing would give it). Comments advance a watermark (their ids rise
    in the order they are written); checks do not — runs finish out of id order — and rely
    on the message id alone. A full Inbox stops the scan without advancing past what it
    refused. ``head``: the head commit of the Session's branch as this job checked it out
    (``""``: the branch is not on the host yet, so nothing ran on it; None: the host is
    asked)."""
    session = owner.session
    marks = session.proj.watermarks
    numbers = watched(issue, marks)
    try:
        for number in numbers:
            _take_comments(owner, forge, number, fetcher)
        if marks.get("pull_request"):
            _take_reviews(owner, forge, int(marks["pull_request"]))
        listed = [] if head == "" else forge.checks(branch_for(issue), warn=warn, head=head)
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
            _heard(forge, number, comment)
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
            _heard(forge, number, comment)
        # "/rio status" needs nothing here: this job rewrites the progress comment anyway.
        session.set_watermark(key, comment.id)


def _heard(forge: Forge, number: int, comment: Comment) -> None:
    """An eyes reaction on a writer's comment this job took in, so its writer knows it was
    read; a reaction GitHub refuses is a log line, never the job's end."""
    try:
        forge.react(number, comment.id, "eyes")
    except RioError as exc:
        log(f"rio-ci: no reaction on comment {comment.id}: {exc}")


def _take_reviews(owner: Owner, forge: Forge, pull: int) -> None:
    """Each submitted review by a writer enters once, as one ``review`` message carrying all
    its inline comments, or — a lone inline comment (GitHub wraps one in a COMMENTED review
    of its own with no body) — as one ``review_comment``; both under the id ``review:<id>``.
    The watermark ``reviews:<pull>`` lists the reviews taken (a follow-up Session keeps it):
    a review's id is given when it is started, not when it is submitted, so ids do not rise
    in submission order and a highest id would skip a review started early."""
    session = owner.session
    key = f"reviews:{pull}"
    for review in forge.reviews(pull):
        taken = [int(i) for i in session.refresh().watermarks.get(key) or []]
        if session.proj.ended:
            return
        if review.id in taken or review.author.endswith("[bot]"):
            continue
        if not may_steer(forge, review.author, review.association):
            log(f"rio-ci: review {review.id} by @{review.author} ignored (no write access)")
            continue
        if steer_command(review_text(review)) == "stop":
            owner.end_in_failure(f"stopped by @{review.author} ({review.url})")
            return
        kind, payload = review_message(review, session.limits.output_bytes)
        if kind:
            session.receive(f"review:{review.id}", kind, payload)
        session.set_watermark(key, sorted([*taken, review.id]))


def review_text(review: Review) -> str:
    """What a review says besides its inline comments (a lone comment: that comment)."""
    return review.comments[0].body if is_lone(review) else review.body


def is_lone(review: Review) -> bool:
    """A lone inline comment: "Add single comment" or a reply in a thread, which GitHub
    submits as a review of its own — COMMENTED, no body, that one comment."""
    return review.state == "COMMENTED" and not review.body.strip() and len(review.comments) == 1


def review_message(review: Review, budget: int) -> tuple[str | None, dict[str, Any]]:
    """The Inbox message for a review: ``review_comment`` for a lone inline comment,
    ``review`` otherwise, or no kind for an empty COMMENTED review (nothing to read). It
    fits ``budget`` bytes (the Session's ``output_bytes``): inline comments are added whole
    while they fit, then shortened, and any left over are counted in
    ``comments_not_shown`` with the review's URL to read them at."""
    if is_lone(review):
        comment = {"author": review.author, **_inline(review.comments[0]), "untrusted": True}
        return "review_comment", comment
    if not (review.body.strip() or review.comments or review.state != "COMMENTED"):
        return None, {}
    room = budget - 200  # for comments_not_shown and the encoding's slack
    message: dict[str, Any] = {
        "author": review.author,
        "state": review.state,
        "body": quote_untrusted(review.body, min(COMMENT_QUOTE_BYTES, room // 3)),
        "url": review.url,
        "comments": [],
        "untrusted": True,
    }
    for said in review.comments[:REVIEW_COMMENTS]:
        fitting = next(
            (
                each
                for each in (_inline(said), _inline(said, hunk=300, body=500))
                if encoded_size({**message, "comments": [*message["comments"], each]}) <= room
            ),
            None,
        )
        if fitting is None:
            break
        message["comments"].append(fitting)
    left = len(review.comments) - len(message["comments"])
    if left:
        message["comments_not_shown"] = left
    return "review", message


def _inline(
    comment: ReviewComment, *, hunk: int = HUNK_CHARS, body: int = INLINE_QUOTE_BYTES
) -> dict[str, Any]:
    # GitHub's diff_hunk ends at the commented line: keep its end.
    lines = comment.diff_hunk
    return {
        "path": comment.path,
        "line": comment.line,
        "side": comment.side,
        "diff_hunk": lines if len(lines) <= hunk else "…" + lines[len(lines) - hunk + 1 :],
        "body": quote_untrusted(comment.body, body),
        "url": comment.url,
    }
