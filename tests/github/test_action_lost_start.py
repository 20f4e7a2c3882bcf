"""No start is lost (docs/github.md "Who started it"): GitHub may cancel a pending label job
(one pending job per concurrency group without ``queue: max``), so any later job for an issue
without a Session whose trigger label — or assignment to the trigger login — a user with
write access put there starts the Session that label would have. The writer check is on who
labelled (the issue's timeline says), never on who commented; and it costs one request, only
when no Session exists.

Every test plays "the label job was cancelled while pending" the way it looks afterwards:
the label is on the issue (its history names who put it there) and no job ever ran for it.
"""

from __future__ import annotations

from typing import Any

import pytest
from action_job import WAIT, Job, Repository, commented, dispatched, script
from fakes.github_api import FakeGitHub

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write", rita="read")]


def timeline_requests(gh: FakeGitHub, issue: int) -> int:
    return len(gh.to(f"/repos/{gh.repo}/issues/{issue}/timeline"))


def created(repo: Repository, job: Job) -> dict[str, Any]:
    (event,) = [e for e in repo.events(job) if e["kind"] == "session_created"]
    return event


@pytest.mark.parametrize("commenter", ["alice", "rita"])
def test_a_later_comment_starts_the_session_a_cancelled_label_job_would_have(
    repo: Repository, gh: FakeGitHub, commenter: str
) -> None:
    """Whoever comments (a writer, or rita who may not steer), the Session starts, on the
    strength of alice's label."""
    repo.set_script(script(WAIT))
    issue = gh.add_issue("Fix the parser", body="it breaks on empty input")
    gh.add_label(issue, "rio", by="alice")  # its labeled job: cancelled while pending
    comment = gh.add_comment(issue, "any news?", user=commenter)

    job = repo.job("issue_comment", commented(gh, comment))

    assert job.outputs["status"] == "waiting", job.logs
    assert "it breaks on empty input" in created(repo, job)["goal"]
    assert "(by @alice," in job.logs and "starting it now" in job.logs
    assert job.artifact_id is not None and repo.progress_comments(issue)
    assert timeline_requests(gh, issue) == 1  # the one extra request, made once

    # the Session now exists: the next job reads no history
    again = repo.job("issue_comment", commented(gh, gh.add_comment(issue, "and now?")))
    assert again.run.result["session"] == created(repo, job)["session_id"], again.logs
    assert timeline_requests(gh, issue) == 1


def test_a_dispatch_starts_the_session_of_a_label_whose_job_was_cancelled(
    repo: Repository, gh: FakeGitHub
) -> None:
    repo.set_script(script(WAIT))
    issue = gh.add_issue("Fix", body="the label's job never ran")
    gh.add_label(issue, "rio", by="alice")

    job = repo.job("workflow_dispatch", dispatched(issue))

    assert job.outputs["status"] == "waiting", job.logs
    assert "the label's job never ran" in created(repo, job)["goal"]


def test_a_standing_assignment_starts_the_session_and_labels_the_issue(
    repo: Repository, gh: FakeGitHub
) -> None:
    """The assignment's job was cancelled: the history's ``assigner`` (alice) is who is
    checked, not the assignee and not who comments."""
    repo.set_script(script(WAIT))
    issue = gh.add_issue("Fix", body="assigned to the bot")
    gh.assign(issue, "rio-bot", by="alice")

    job = repo.prepare("issue_comment", commented(gh, gh.add_comment(issue, "hi", user="rita")))
    job.env["RIO_ASSIGNEE_TRIGGER"] = "rio-bot"
    repo.collect(job, repo.start(job))

    assert job.run.result["status"] == "waiting", job.logs
    assert [label["name"] for label in gh.issues[issue]["labels"]] == ["rio"]


@pytest.mark.parametrize("how", ["label", "assignment"])
def test_a_trigger_put_there_by_someone_without_write_access_starts_nothing(
    repo: Repository, gh: FakeGitHub, how: str
) -> None:
    """rita (read access) labelled or assigned; alice, a writer, comments: the comment's
    author does not make rita's label count."""
    repo.set_script(script(WAIT))
    issue = gh.add_issue("Fix")
    if how == "label":
        gh.add_label(issue, "rio", by="rita")
    else:
        gh.assign(issue, "rio-bot", by="rita")

    job = repo.prepare("issue_comment", commented(gh, gh.add_comment(issue, "please")))
    job.env["RIO_ASSIGNEE_TRIGGER"] = "rio-bot"
    repo.collect(job, repo.start(job))

    assert job.run.result == {"status": "ignored", "reason": f"issue #{issue} has no Session"}
    assert "put there by @rita without write access" in job.logs
    assert repo.progress_comments(issue) == []


def test_an_issue_without_the_label_starts_nothing(repo: Repository, gh: FakeGitHub) -> None:
    """A comment shows the issue's labels in its payload: no request at all. A dispatch
    does not, so the history is read — and shows no label."""
    repo.set_script(script(WAIT))
    issue = gh.add_issue("Fix")
    gh.add_label(issue, "rio", by="alice")
    gh.remove_label(issue, "rio", by="alice")  # on, then off again: nothing stands

    comment = repo.job("issue_comment", commented(gh, gh.add_comment(issue, "/rio status")))
    assert comment.run.result["status"] == "ignored", comment.logs
    assert timeline_requests(gh, issue) == 0

    dispatch = repo.job("workflow_dispatch", dispatched(issue))
    assert dispatch.run.result == {
        "status": "ignored",
        "reason": f"issue #{issue} has no Session",
    }
    assert timeline_requests(gh, issue) == 1
    assert repo.progress_comments(issue) == [] and gh.artifacts == {}


@pytest.mark.parametrize("sign", ["artifact", "progress comment"])
def test_a_label_a_session_already_took_starts_nothing_again(
    repo: Repository, gh: FakeGitHub, sign: str
) -> None:
    """The label's Session ran: it saved an artifact (expired since) or wrote its progress
    comment (its artifacts are all gone). The label still stands but was served: starting
    again takes a new label — whose own job may be cancelled too."""
    repo.set_script(script(WAIT))
    issue = gh.add_issue("Fix")
    gh.add_label(issue, "rio", by="alice", at="2024-01-01T00:00:00Z")
    if sign == "artifact":
        gh.add_artifact(f"rio-session-{issue}", b"gone", "2024-02-01T00:00:00Z", expired=True)
    else:
        comment = gh.add_comment(issue, "<!-- rio-ci:progress -->\n### waiting", user=gh.bot)
        gh.comments[comment]["updated_at"] = "2024-02-01T00:00:00Z"

    job = repo.job("workflow_dispatch", dispatched(issue))

    assert job.run.result["status"] == "ignored", job.logs
    assert "starting it now" not in job.logs

    gh.remove_label(issue, "rio")
    gh.add_label(issue, "rio", by="alice", at="2024-03-01T00:00:00Z")  # its job: cancelled
    relabelled = repo.job("workflow_dispatch", dispatched(issue))
    assert relabelled.outputs["status"] == "waiting", relabelled.logs
