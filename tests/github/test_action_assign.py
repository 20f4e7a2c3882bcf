"""Assignment starts a Session (docs/github.md "Events"): ``issues: assigned`` to the login
the ``assignee-trigger`` input names, by a user with write access, starts a Session like the
trigger label; any other assignment, or an empty input, starts nothing."""

from __future__ import annotations

from typing import Any

import pytest
from action_job import WAIT, Repository, script
from fakes.github_api import FakeGitHub

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write", rita="read")]


def assigned(issue: int, assignee: str, sender: str = "alice") -> dict[str, Any]:
    return {
        "action": "assigned",
        "assignee": {"login": assignee},
        "sender": {"login": sender},
        "issue": {"number": issue, "title": "ignored: read through the API"},
    }


def assign(repo: Repository, issue: int, assignee: str, sender: str, trigger: str) -> Any:
    job = repo.prepare("issues", assigned(issue, assignee, sender))
    job.env["RIO_ASSIGNEE_TRIGGER"] = trigger
    repo.collect(job, repo.start(job))
    repo.step(job, "finish")
    repo.upload(job)
    return job


def test_assigning_the_trigger_login_starts_a_session_and_labels_the_issue(
    repo: Repository, gh: FakeGitHub
) -> None:
    repo.set_script(script(WAIT))
    issue = gh.add_issue("Fix the parser", body="it breaks on empty input")

    job = assign(repo, issue, "rio-bot", "alice", "rio-bot")

    assert job.outputs["status"] == "waiting", job.logs
    (created,) = [e for e in repo.events(job) if e["kind"] == "session_created"]
    assert "it breaks on empty input" in created["goal"]
    # labelled, so the sweep (which looks only at labelled issues) sees its Timers
    assert [label["name"] for label in gh.issues[issue]["labels"]] == ["rio"]
    assert job.artifact_id is not None


@pytest.mark.parametrize(
    ("assignee", "sender", "trigger", "reason"),
    [
        ("rio-bot", "rita", "rio-bot", "assignment by a user without write access"),
        ("bob", "alice", "rio-bot", "issues/assigned to 'bob'"),
        ("rio-bot", "alice", "", "issues/assigned to 'rio-bot'"),  # the input is off
    ],
)
def test_any_other_assignment_starts_nothing(
    repo: Repository, gh: FakeGitHub, assignee: str, sender: str, trigger: str, reason: str
) -> None:
    repo.set_script(script(WAIT))
    issue = gh.add_issue("Fix")

    job = assign(repo, issue, assignee, sender, trigger)

    assert job.run.result == {"status": "ignored", "reason": reason}
    assert job.artifact_id is None and gh.comments_on(issue) == []
    assert gh.issues[issue]["labels"] == []
