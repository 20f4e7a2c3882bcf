"""GitHub's wake-ups (``GitHubSource``, the first source of ``rio_ci.wake``): who may steer,
and the re-scan of comments, reviews and checks since the committed watermarks (events can be
dropped, so every job re-scans; each observation enters the Inbox once, under a stable id)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
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
from rio_ci.wake.source import Mark, WakeUp
from rio_ci.wake.take import Taken, take_all

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


def watched(issue: int, marks: Mapping[str, Any]) -> list[int]:
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
    """Re-scan comments (issue and pull request), the pull request's reviews, and checks,
    and take them in through the seam (``rio_ci.wake.take.take_all``): each observation
    enters the Inbox once, under a stable id. Listing checks is optional: a 403 or 404 there
    goes to ``warn``, and the finished run or check this job's own event ``reported`` still
    enters (under the id the listing would give it). A full Inbox stops the scan without
    advancing past what it refused. ``head``: the head commit of the Session's branch as
    this job checked it out (``""``: the branch is not on the host yet, so nothing ran on
    it; None: the host is asked)."""
    session = owner.session
    pictures = (lambda body: kept(session, fetcher.fetch(body))) if fetcher else None
    source = GitHubSource(
        forge,
        issue,
        budget=session.limits.output_bytes,
        warn=warn,
        reported=reported,
        pictures=pictures,
        head=head,
    )
    try:
        take_all(owner, source.wake_ups(dict(session.proj.watermarks)), told=partial(told, forge))
    except (Rejected, RunEnded) as exc:
        log(f"::warning::rio-ci: an observation was not taken in: {exc}")


def told(forge: Forge, taken: Taken) -> None:
    """The job's log of a wake-up no writer wrote; an eyes reaction on a writer's comment
    the Session took in (or that stopped it), so its writer knows it was read."""
    wake_up = taken.wake_up
    if taken.outcome == "ignored":
        what = wake_up.id.replace(":", " ", 1)  # "comment 12", "review 34"
        log(f"rio-ci: {what} by @{wake_up.author} ignored (no write access)")
    elif _a_writers_comment(taken) and wake_up.mark is not None:
        # its mark is comments:<number>, the issue or pull request it is on
        _heard(forge, int(wake_up.mark.name.split(":")[1]), int(wake_up.id.split(":")[1]))
    # "/rio status" needs nothing here: this job rewrites the progress comment anyway.


def _a_writers_comment(taken: Taken) -> bool:
    return taken.outcome in ("received", "stopped") and taken.wake_up.id.startswith("comment:")


def _heard(forge: Forge, number: int, comment_id: int) -> None:
    """A reaction GitHub refuses is a log line, never the job's end."""
    try:
        forge.react(number, comment_id, "eyes")
    except RioError as exc:
        log(f"rio-ci: no reaction on comment {comment_id}: {exc}")


@dataclass(frozen=True)
class GitHubSource:
    """GitHub's wake-ups for the Session of ``issue``: the comments on the issue and on its
    pull request, the pull request's reviews, and the finished runs and checks on its branch
    (see ``take_in`` for ``warn``, ``reported`` and ``head``). ``budget``: the Session's
    ``output_bytes``, which a review's message fits; ``pictures``: a writer's comment body →
    its pictures, stored by digest (rio_ci/github/images.py). Who may steer is asked of the
    permission API, and only for what reaches that question."""

    forge: Forge
    issue: int
    budget: int
    warn: Callable[[str], None] | None = None
    reported: Check | None = None
    pictures: Callable[[str], dict[str, Any]] | None = None
    head: str | None = None

    def wake_ups(self, marks: Mapping[str, Any]) -> Iterator[WakeUp | Mark]:
        """Comments advance a mark (their ids rise in the order they are written); checks
        do not — runs finish out of id order — and rely on the message id alone."""
        for number in watched(self.issue, marks):
            yield from self._comments(number, marks)
        if marks.get("pull_request"):
            yield from self._reviews(int(marks["pull_request"]), marks)
        yield from self._checks()

    def changed(self, marks: Mapping[str, Any]) -> bool:
        """Whether the issue, or its pull request's lists, changed since the last call
        (``Forge.changed``: conditional requests); every resource is asked, so each keeps
        its own ETag fresh."""
        changed = self.forge.changed(self.issue)
        if marks.get("pull_request"):
            changed = self.forge.changed(int(marks["pull_request"]), pull=True) or changed
        return changed

    def _comments(self, number: int, marks: Mapping[str, Any]) -> Iterator[WakeUp | Mark]:
        key = f"comments:{number}"
        for comment in self.forge.comments(number, after_id=int(marks.get(key, 0))):
            mark = Mark(key, comment.id)
            if is_ours(comment):
                yield mark
                continue
            steers = may_steer(self.forge, comment.author, comment.association)
            command = steer_command(comment.body)
            yield WakeUp(
                f"comment:{comment.id}",
                "comment",
                self._comment_message(comment) if steers and command is None else {},
                author=comment.author,
                may_steer=steers,
                command=command,
                url=comment.url,
                mark=mark,
            )

    def _comment_message(self, comment: Comment) -> dict[str, Any]:
        return {
            "author": comment.author,
            "url": comment.url,
            "untrusted": True,
            "body": quote_untrusted(comment.body, COMMENT_QUOTE_BYTES),
            **(self.pictures(comment.body) if self.pictures else {}),
        }

    def _reviews(self, pull: int, marks: Mapping[str, Any]) -> Iterator[WakeUp | Mark]:
        """Each submitted review by a writer enters once, as one ``review`` message carrying
        all its inline comments, or — a lone inline comment (GitHub wraps one in a COMMENTED
        review of its own with no body) — as one ``review_comment``; both under the id
        ``review:<id>``. The mark ``reviews:<pull>`` lists the reviews taken (a follow-up
        Session keeps it): a review's id is given when it is started, not when it is
        submitted, so ids do not rise in submission order and a highest id would skip a
        review started early. A review by someone who may not steer is not marked: it is
        asked about again at the next scan."""
        key = f"reviews:{pull}"
        taken = [int(i) for i in marks.get(key) or []]
        for review in self.forge.reviews(pull):
            if review.id in taken or review.author.endswith("[bot]"):
                continue
            wake_up = partial(WakeUp, f"review:{review.id}", author=review.author, url=review.url)
            if not may_steer(self.forge, review.author, review.association):
                yield wake_up("review", {})
            elif steer_command(review_text(review)) == "stop":
                yield wake_up("review", {}, may_steer=True, command="stop")
            else:
                taken = sorted([*taken, review.id])
                kind, message = review_message(review, self.budget)
                if kind is None:  # nothing to read: only marked
                    yield Mark(key, taken)
                else:
                    yield wake_up(kind, message, may_steer=True, mark=Mark(key, taken))

    def _checks(self) -> Iterator[WakeUp]:
        """The finished runs and checks on the branch, and the one this job's event
        ``reported``: the host's own reports, so they may reach the model."""
        listed = (
            []
            if self.head == ""
            else self.forge.checks(branch_for(self.issue), warn=self.warn, head=self.head)
        )
        reported = [self.reported] if self.reported else []
        for check in sorted({(c.kind, c.id): c for c in [*reported, *listed]}.values(), key=_id):
            yield WakeUp(
                f"check:{check.kind}:{check.id}",
                "check",
                {
                    "name": check.name,
                    "conclusion": check.conclusion,
                    "url": check.url,
                    "kind": check.kind,
                },
                may_steer=True,
                url=check.url,
            )


def _id(check: Check) -> int:
    return check.id


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
