"""GitHub's webhook events → what a job should do: its ``Trigger``. Pure: a payload in, a
``Trigger`` out (the Journal's events are another thing: ``rio_ci.core.events``).

Which events reach a Session (docs/github.md): a trigger label starts one; comments on its issue
or pull request, and finished workflow/check runs on its branch, become Inbox messages;
``schedule`` sweeps for due Timers; ``workflow_dispatch`` with an ``issue`` input resumes.
Who may steer is decided later, with the permission API; here only the shape is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rio_ci.core.json_value import ascii_int
from rio_ci.forge.base import Check, IssueEvent
from rio_ci.forge.issues import issue_of_branch
from rio_ci.wake.source import Command

# author_association values that can only belong to someone without write access, so a
# comment may be dropped before asking the permission API. NONE and CONTRIBUTOR are not
# among them: a private organization member with write access through a team arrives so.
NEVER_WRITERS = frozenset({"FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR"})


@dataclass(frozen=True)
class Trigger:
    kind: str  # start | comment | check | sweep | resume | ignore
    issue: int | None = None
    actor: str | None = None
    association: str | None = None
    reason: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def classify(
    event_name: str,
    payload: dict[str, Any],
    trigger_label: str,
    repository: str | None = None,
    assignee_trigger: str = "",
) -> Trigger:
    """Map one event to a Trigger; anything unexpected is ``ignore`` with a reason.
    ``repository`` (``owner/name``), when given, is where a finished run's branch must live:
    a fork may name its own branch ``rio/issue-7`` too. ``assignee_trigger``, when not
    empty, is the login whose assignment to an issue starts a Session like the label."""
    if not isinstance(payload, dict):
        return Trigger("ignore", reason="the event payload is not a JSON object")
    sender = (payload.get("sender") or {}).get("login")
    if event_name == "issues":
        return _issue_event(payload, sender, trigger_label, assignee_trigger)
    if event_name in ("pull_request_review", "pull_request_review_comment"):
        return _review_event(event_name, payload)
    if event_name == "issue_comment":
        return _comment_event(payload)
    if event_name in ("workflow_run", "check_run", "check_suite"):
        return _finished_event(event_name, payload, sender, repository)
    if event_name == "schedule":
        return Trigger("sweep")
    if event_name == "workflow_dispatch":
        return _dispatch_event(payload, sender)
    return Trigger("ignore", reason=f"event {event_name!r} is not handled")


def _comment_event(payload: dict[str, Any]) -> Trigger:
    if payload.get("action") != "created":
        return Trigger("ignore", reason=f"issue_comment/{payload.get('action')}")
    comment, issue = payload.get("comment") or {}, payload.get("issue") or {}
    carries = {  # what the issue carries as the event saw it (job.py: a start that was lost)
        "labels": _names(issue.get("labels"), "name"),
        "assignees": _names(issue.get("assignees"), "login"),
    }
    return Trigger(
        "comment",
        issue=_number(issue),
        actor=(comment.get("user") or {}).get("login"),
        association=comment.get("author_association"),
        data={
            "comment_id": comment.get("id"),
            "body": str(comment.get("body") or ""),
            "url": str(comment.get("html_url") or ""),
            "is_pull_request": bool(issue.get("pull_request")),
            **({} if issue.get("pull_request") else carries),
        },
    )


def _names(items: Any, key: str) -> list[str]:
    """The ``key`` of each object in a payload's list (labels' names, users' logins)."""
    if not isinstance(items, list):
        return []
    return [str(item[key]) for item in items if isinstance(item, dict) and item.get(key)]


def _finished_event(
    event_name: str, payload: dict[str, Any], sender: Any, repository: str | None
) -> Trigger:
    """A finished workflow run, check run or check suite on a Session's branch."""
    if payload.get("action") != "completed":
        return Trigger("ignore", reason=f"{event_name}/{payload.get('action')}")
    body = payload.get(event_name) or {}
    branch = body.get("head_branch") or (body.get("check_suite") or {}).get("head_branch")
    issue = issue_of_branch(branch)
    if issue is None:
        return Trigger("ignore", reason=f"{event_name} on branch {branch!r}")
    head = (body.get("head_repository") or {}).get("full_name")
    if repository and head and head != repository:
        return Trigger("ignore", reason=f"{event_name} on {branch!r} of the fork {head}")
    return Trigger(
        "check",
        issue=issue,
        actor=sender,
        data={"check": _finished(event_name, body, str(branch))},
    )


SETUP_CHECK = "check"  # the workflow_dispatch issue that asks for the set-up check


def is_setup_check(payload: dict[str, Any]) -> bool:
    """A ``workflow_dispatch`` whose ``issue`` input is ``check``: run the set-up check, no
    Session (docs/github.md, "Checking the set-up")."""
    inputs = payload.get("inputs")
    issue = inputs.get("issue") if isinstance(inputs, dict) else None
    return isinstance(issue, str) and issue.strip().lower() == SETUP_CHECK


def _dispatch_event(payload: dict[str, Any], sender: Any) -> Trigger:
    issue = ascii_int(str((payload.get("inputs") or {}).get("issue") or "").strip(), 12)
    if not issue:
        return Trigger("ignore", reason="workflow_dispatch needs an 'issue' input (a number)")
    return Trigger("resume", issue=issue, actor=sender)


def _issue_event(
    payload: dict[str, Any], sender: str | None, trigger_label: str, assignee_trigger: str
) -> Trigger:
    """``issues``: ``labeled`` with the trigger label, or ``assigned`` to the login named by
    the ``assignee-trigger`` input (the sender is who assigned it: they must be a writer)."""
    issue = payload.get("issue") or {}
    action = payload.get("action")
    label = (payload.get("label") or {}).get("name")
    assignee = (payload.get("assignee") or {}).get("login")
    if action == "assigned" and assignee_trigger and assignee == assignee_trigger:
        kind = "assignment"
    elif action == "labeled" and label == trigger_label:
        kind = "label"
    elif action == "assigned":
        return Trigger("ignore", reason=f"issues/assigned to {assignee!r}")
    else:
        return Trigger("ignore", reason=f"issues/{action} with label {label!r}")
    if issue.get("pull_request"):
        return Trigger("ignore", reason=f"the trigger {kind} on a pull request")
    return Trigger("start", issue=_number(issue), actor=sender, data={"by": kind})


def _review_event(event_name: str, payload: dict[str, Any]) -> Trigger:
    """A submitted review, or an inline comment created on a pull request's diff: the
    pull request's Session takes it in through the re-scan (intake.py), which lists the
    review with all its comments; the event only names the pull request and the author."""
    wanted = "submitted" if event_name == "pull_request_review" else "created"
    if payload.get("action") != wanted:
        return Trigger("ignore", reason=f"{event_name}/{payload.get('action')}")
    pull = payload.get("pull_request") or {}
    item = payload.get("review" if event_name == "pull_request_review" else "comment") or {}
    head = pull.get("head") or {}
    return Trigger(
        "comment",
        issue=_number(pull),
        actor=(item.get("user") or {}).get("login"),
        association=item.get("author_association"),
        data={
            "is_pull_request": True,
            "review": True,
            "head_branch": str(head.get("ref") or ""),
        },
    )


def _finished(event_name: str, body: dict[str, Any], branch: str) -> Check | None:
    """The finished run or check an event reports, as the re-scan would list it (the same
    kind and id, so the Inbox takes it once), or None when the event cannot say (a check
    made by GitHub Actions: the workflow run it belongs to is the observation)."""
    number = body.get("id")
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        return None
    app = (body.get("app") or {}).get("slug")
    if event_name != "workflow_run" and app == "github-actions":
        return None
    name = body.get("name") or (body.get("app") or {}).get("name") or event_name
    return Check(
        id=number,
        kind=event_name,
        name=str(name),
        conclusion=str(body.get("conclusion") or ""),
        url=str(body.get("html_url") or ""),
        head_branch=branch,
    )


def _number(issue: dict[str, Any]) -> int | None:
    number = issue.get("number")
    return number if isinstance(number, int) and number > 0 else None


_COMMANDS: dict[str, Command] = {"stop": "stop", "status": "status"}


def steer_command(body: str) -> Command | None:
    """``/rio stop`` or ``/rio status`` when a comment is exactly that command."""
    words = body.strip().split()
    return _COMMANDS.get(words[1]) if len(words) == 2 and words[0] == "/rio" else None


def request_of(body: str) -> str | None:
    """The request of a ``/rio <request>`` comment (not ``/rio stop`` or ``/rio status``)."""
    text = body.strip()
    if not text.startswith("/rio") or steer_command(text) is not None:
        return None
    rest = text[len("/rio") :]
    if rest[:1] not in (" ", "\n", "\t") or not rest.strip():
        return None
    return rest.strip()


@dataclass(frozen=True)
class Standing:
    """A trigger an issue carries now: ``how`` (``label`` or ``assignment``), who put it
    there (``actor``) and when (``at``, ISO 8601)."""

    how: str
    actor: str
    at: str


def standing_trigger(
    history: Sequence[IssueEvent], trigger_label: str, assignee_trigger: str = ""
) -> Standing | None:
    """The trigger label on an issue now, or (with ``assignee_trigger``) its assignment to
    that login, and who put it there last, from the issue's history (``Forge.issue_events``);
    the label first. A label taken off (or an assignee removed) after it was put on stands
    no more."""
    held: dict[str, Standing | None] = {"label": None, "assignment": None}
    for event in sorted(history, key=lambda e: (e.created_at, e.id)):
        if event.kind in ("labeled", "unlabeled") and event.subject == trigger_label:
            how, on = "label", event.kind == "labeled"
        elif (
            event.kind in ("assigned", "unassigned")
            and assignee_trigger
            and event.subject == assignee_trigger
        ):
            how, on = "assignment", event.kind == "assigned"
        else:
            continue
        held[how] = Standing(how, event.actor, event.created_at) if on else None
    return held["label"] or held["assignment"]
