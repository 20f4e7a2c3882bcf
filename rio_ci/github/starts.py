"""Where a Session comes from on GitHub (docs/github.md "After the run ends").

- the trigger label on an issue, by a user with write access: goal = the issue;
- ``/rio <request>`` by a maintainer on an issue without a Session: goal = the issue + the
  request, and the issue gets the trigger label (the sweep only looks at labelled issues);
- the trigger label again, by a user with write access, on an issue whose Session ended: a
  new Session on the issue as it reads now, with what the follow-up keeps (below);
- any other job for an issue without a Session whose trigger label (or assignment to the
  trigger login) stands, put there by a user with write access after the last sign of a
  Session on the issue (an artifact, a progress comment): the Session that label's own job
  would have started (that job can be cancelled while pending, or lost), started now
  (``lost_start``);
- a maintainer's comment on the issue or its pull request after the run ended (success or
  failure): a follow-up Session on the same branch, whose goal is the previous goal + the
  comment as a follow-up request, and whose first Turn is told how the previous Session
  ended (an Inbox message ``previous_session``). It keeps the previous Session's
  watermarks, so it answers on the same pull request and takes in only newer comments.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rio_ci.core.errors import RioError
from rio_ci.core.projection import Projection
from rio_ci.core.text import clip
from rio_ci.forge.base import Comment, Forge, IssueEvent, Review
from rio_ci.forge.issues import goal_for, requested_goal
from rio_ci.github import images
from rio_ci.github.contract import ActionInputs, Config, log, warn
from rio_ci.github.images import ImageFetcher
from rio_ci.github.intake import is_ours, may_steer, review_text, watched
from rio_ci.github.triggers import Standing, Trigger, standing_trigger, steer_command
from rio_ci.reports.progress import MARKER, PUBLISHED
from rio_ci.session.session import Session

CONCLUSION_CHARS = 2000


def create(env: ActionInputs, db: Path, config: Config, goal: str) -> Session:
    """A new Session at ``db`` working in this job's checkout, with the configuration read
    now (validators, limits, credentials Cells may see, the Cells' network)."""
    db.unlink(missing_ok=True)
    return Session.create(db, goal, config.settings(str(env.workspace)))


def from_issue(
    env: ActionInputs,
    forge: Forge,
    db: Path,
    config: Config,
    issue: int,
    request: tuple[str, str, str] | None = None,
    *,
    label: bool = False,
) -> None:
    """Start a Session on ``issue`` (the label or an assignment), or on a maintainer's
    ``/rio`` request given as ``(author, url, request)``. A request, or ``label`` (an
    assignment), also puts the trigger label on the issue: the sweep looks only there."""
    info = forge.issue(issue)
    # the issue's pictures (rio_ci/github/images.py): fetched first, so a note on one that
    # was not fetched is part of the goal; stored once the Session exists
    fetched = ImageFetcher(env.server_url, env.api_url, env.token).fetch(info.body)
    goal = goal_for(issue, info.title, info.body) + images.notes_text(fetched)
    if request is not None:
        goal = requested_goal(goal, *request, follow_up=False)
    session = create(env, db, config, goal)
    try:
        _keep_goal_pictures(session, fetched)
    finally:
        session.close()
    if (request is not None or label) and env.trigger_label not in info.labels:
        forge.add_label(issue, env.trigger_label)
        why = "/rio" if request is not None else "the assignment"
        log(f"rio-ci: #{issue} labelled {env.trigger_label!r} for the Session {why} started")


def lost_start(
    env: ActionInputs, forge: Forge, trigger: Trigger, issue: int, saved_at: str | None
) -> Standing | None:
    """The trigger label (or the assignment to the trigger login) on ``issue``, which has no
    Session, when a user with write access put it there after the last sign of a Session on
    the issue — ``saved_at`` (its newest artifact, if any is listed) or the last change of a
    progress comment: the start its own job should have made. One request (the issue's
    timeline), none when this job's event shows the issue without either. None: nothing to
    start (logged when a trigger stands but may not start)."""
    if _shown_bare(env, trigger):
        return None
    try:
        timeline = forge.issue_timeline(issue)
    except RioError as exc:
        warn(env, f"the timeline of #{issue} was not read ({exc}); no lost start is looked for")
        return None
    standing = standing_trigger(timeline, env.trigger_label, env.assignee_trigger)
    served = max([saved_at or "", *(e.updated_at for e in _progress(timeline))])
    if standing is None or standing.at <= served:
        return None  # nothing stands, or a Session took it (its artifacts are gone since)
    what = f"the label {env.trigger_label!r}"
    if standing.how == "assignment":
        what = f"the assignment to @{env.assignee_trigger}"
    if not may_steer(forge, standing.actor, None):
        log(
            f"rio-ci: #{issue} carries {what}, put there by @{standing.actor} without write "
            "access; no Session is started"
        )
        return None
    log(
        f"rio-ci: #{issue} carries {what} (by @{standing.actor}, {standing.at}) but has no "
        "Session: its own job never started one (cancelled while pending?); starting it now"
    )
    return standing


def _progress(timeline: list[IssueEvent]) -> list[IssueEvent]:
    """The comments carrying the progress comment's marker: a Session published there."""
    return [e for e in timeline if e.kind == "commented" and MARKER in e.subject]


def _shown_bare(env: ActionInputs, trigger: Trigger) -> bool:
    """Whether this job's event shows the issue without the trigger label and without the
    assignment (a comment's payload carries the issue's labels and assignees)."""
    labels, assignees = trigger.data.get("labels"), trigger.data.get("assignees")
    if labels is None:
        return False  # the event does not show the issue: its history says
    assigned = bool(env.assignee_trigger) and env.assignee_trigger in (assignees or [])
    return env.trigger_label not in labels and not assigned


def follow_up_request(forge: Forge, proj: Projection, issue: int) -> Comment | Review | None:
    """The oldest comment after the ended Session's watermarks (issue and pull request) by
    someone with write access that is not a command, else the first review of the pull
    request it has not taken by such a writer: the request a follow-up answers."""
    marks = proj.watermarks
    numbers = watched(issue, marks)
    for comment in sorted(
        (
            c
            for n in numbers
            for c in forge.comments(n, after_id=int(marks.get(f"comments:{n}", 0)))
        ),
        key=lambda c: c.id,
    ):
        if is_ours(comment) or steer_command(comment.body) is not None:
            continue
        if may_steer(forge, comment.author, comment.association):
            return comment
        log(f"rio-ci: comment {comment.id} by @{comment.author} ignored (no write access)")
    return _review_request(forge, proj)


def _review_request(forge: Forge, proj: Projection) -> Review | None:
    pull = proj.watermarks.get("pull_request")
    if not pull:
        return None
    taken = set(proj.watermarks.get(f"reviews:{pull}") or [])
    for review in forge.reviews(int(pull)):
        if review.id in taken or review.author.endswith("[bot]"):
            continue
        if steer_command(review_text(review)) is not None:
            continue
        if may_steer(forge, review.author, review.association):
            return review
        log(f"rio-ci: review {review.id} by @{review.author} ignored (no write access)")
    return None


def follow_up(
    env: ActionInputs, db: Path, config: Config, previous: Projection, request: Comment | Review
) -> None:
    """Replace the ended Session at ``db`` with its follow-up (the previous one stays in the
    older generations of the artifact). A comment is the request itself; a review is named
    in the goal and reaches the first Turn whole (with its inline comments) through the
    re-scan, which the follow-up's watermarks leave it to."""
    if isinstance(request, Review):
        text = review_text(request) or f"(a review: {request.state})"
        what, marks = f"review {request.id}", {}
        text += "\n\n[the review with its inline comments is in the Inbox]"
    else:
        text, what = request.body, f"comment {request.id}"
        marks = {f"comments:{request.issue}": request.id}
    goal = requested_goal(
        previous.session["goal"], request.author, request.url, text, follow_up=True
    )
    _succeed(env, db, config, goal, previous, marks)
    log(
        f"rio-ci: follow-up Session for @{request.author}'s {what} (the previous "
        f"Session {previous.session['id']} ended in {_result(previous)})"
    )


def relabel(
    env: ActionInputs, forge: Forge, db: Path, config: Config, previous: Projection, issue: int
) -> None:
    """The trigger label put on an issue whose Session ended: a new Session on the issue as
    it reads now, on the same branch and pull request, told how the previous one ended."""
    info = forge.issue(issue)
    _succeed(env, db, config, goal_for(issue, info.title, info.body), previous, {})
    log(
        f"rio-ci: #{issue} labelled again: a new Session (the previous Session "
        f"{previous.session['id']} ended in {_result(previous)})"
    )


def _succeed(
    env: ActionInputs,
    db: Path,
    config: Config,
    goal: str,
    previous: Projection,
    marks: dict[str, Any],
) -> None:
    """Replace the ended Session at ``db`` with a new one for ``goal`` (the previous one
    stays in the older generations of the artifact), which keeps its watermarks (the same
    pull request, only newer comments) and starts with how it ended."""
    fetched = ImageFetcher(env.server_url, env.api_url, env.token).fetch(goal)
    session = create(env, db, config, goal + images.notes_text(fetched))
    try:
        session.receive(
            f"previous:{previous.session['id']}", "previous_session", conclusion_of(previous)
        )
        for name, value in sorted({**previous.watermarks, **marks}.items()):
            if name not in (PUBLISHED, images.GOAL_IMAGES):  # the pictures are fetched again
                session.set_watermark(name, value)
        _keep_goal_pictures(session, fetched)
    finally:
        session.close()


def _keep_goal_pictures(session: Session, fetched: images.Fetched) -> None:
    """Store the goal's pictures and name them (the watermark ``goal_images``)."""
    carried = images.kept(session, replace(fetched, notes=[]))
    if carried.get("images"):
        session.set_watermark(images.GOAL_IMAGES, carried["images"])


def _result(proj: Projection) -> str | None:
    """How the Session ended (``success``, ``failure``), or None while it runs."""
    return None if proj.ended is None else proj.ended["result"]


def conclusion_of(proj: Projection) -> dict[str, Any]:
    """How a Session ended, for its follow-up's first Turn."""
    ended = proj.ended
    note = max(
        (c for c in proj.cells if c.get("role") == "conclusion"),
        key=lambda c: int(c["id"]),
        default=None,
    )
    return {
        "session_id": proj.session["id"],
        "result": _result(proj),
        "reason": clip(ended["reason"] if ended else "", CONCLUSION_CHARS),
        "conclusion": clip(note["text"], CONCLUSION_CHARS) if note else None,
        "unresolved": [u["cell_id"] for u in ended["unresolved"]] if ended else [],
        "rounds": proj.usage.get("rounds", 0),
        "cost_usd": round(float(proj.usage.get("cost_usd", 0.0)), 4),
        "pull_request": proj.watermarks.get("pull_request"),
    }
