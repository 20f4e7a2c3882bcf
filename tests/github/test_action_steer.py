"""docs/github.md: write access only from the collaborator-permission API; a stranger's comment
still re-scans; optional reads are optional."""

from __future__ import annotations

import pytest
from action_job import WAIT, Repository, commented, labeled, messages, script
from fakes.github_api import FakeGitHub

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write")]


def permission_calls(gh: FakeGitHub, user: str) -> int:
    return len(gh.to(f"/repos/{gh.repo}/collaborators/{user}/permission"))


def test_member_and_collaborator_with_read_access_do_not_steer(
    repo: Repository, gh: FakeGitHub
) -> None:
    gh.add_user("rita", "read", member=True)  # author_association MEMBER
    gh.add_user("carl", "triage")  # COLLABORATOR (triage is read in the legacy permission)
    gh.add_user("pia", "maintain", member=True, association="CONTRIBUTOR")  # private member
    repo.set_script(script(WAIT, WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))

    by_reader = repo.job("issues", labeled(issue, sender="rita"))
    repo.job("issues", labeled(issue, sender="alice"))
    member = gh.add_comment(issue, "MEMBER-READ rm -rf", user="rita")
    by_member = repo.job("issue_comment", commented(gh, member))
    collaborator = gh.add_comment(issue, "COLLABORATOR-READ", user="carl")
    by_collaborator = repo.job("issue_comment", commented(gh, collaborator))
    steering = gh.add_comment(issue, "pia steers", user="pia")
    last = repo.job("issue_comment", commented(gh, steering))

    assert by_reader.run.result == {
        "status": "ignored",
        "reason": "label by a user without write access",
    }
    assert [gh.comments[c]["author_association"] for c in (member, collaborator, steering)] == [
        "MEMBER",
        "COLLABORATOR",
        "CONTRIBUTOR",
    ]
    for ignored in (by_member, by_collaborator):
        assert ignored.run.result["status"] == "ignored" and ignored.artifact_id is None
    text = repo.events_text(last)
    assert "MEMBER-READ" not in text and "COLLABORATOR-READ" not in text
    assert [m["payload"]["body"] for m in messages(repo.events(last), "comment")] == ["pia steers"]


def test_a_first_timer_is_turned_away_without_asking_the_api(
    repo: Repository, gh: FakeGitHub
) -> None:
    issue, _ = repo.labeled_issue(script(WAIT))
    first = gh.add_comment(issue, "hello", user="newbie", association="FIRST_TIMER")

    job = repo.job("issue_comment", commented(gh, first))

    assert job.run.result["status"] == "ignored"
    assert permission_calls(gh, "newbie") == 0
    assert "newbie" in job.run.stderr


def test_a_strangers_comment_delivers_a_maintainers_comment_whose_event_was_dropped(
    repo: Repository, gh: FakeGitHub
) -> None:
    issue, _ = repo.labeled_issue(script(WAIT, WAIT))
    gh.add_comment(issue, "please also handle the empty case", user="alice")  # job dropped
    stranger = gh.add_comment(issue, "+1 from a passer-by", user="eve", association="NONE")

    job = repo.job("issue_comment", commented(gh, stranger))

    assert job.outputs["status"] == "waiting", job.logs
    events = repo.events(job)
    assert [m["payload"]["body"] for m in messages(events, "comment")] == [
        "please also handle the empty case"
    ]
    assert "passer-by" not in repo.events_text(job)
    assert len([e for e in events if e["kind"] == "model_attempt"]) == 2  # a round for it


@pytest.mark.parametrize(("runs", "check_runs"), [(404, 403), (403, 404)])
def test_optional_reads_refused_are_a_warning_not_the_end_of_the_job(
    repo: Repository, gh: FakeGitHub, runs: int, check_runs: int
) -> None:
    issue, _ = repo.labeled_issue(script(WAIT, WAIT))
    branch = f"rio/issue-{issue}"
    head = repo.push_branch(branch)
    gh.add_workflow_run(branch, "CI", "failure")
    gh.add_check_run(head, "lint", "success")
    gh.fail(rf"/repos/{gh.repo}/actions/runs", runs)
    gh.fail(rf"/repos/{gh.repo}/commits/[^/]+/check-runs", check_runs)
    steer = gh.add_comment(issue, "go on", user="alice")

    job = repo.job("issue_comment", commented(gh, steer))

    assert job.run.code == 0 and job.outputs["status"] == "waiting", job.logs
    warnings = [line for line in job.run.stderr.splitlines() if line.startswith("::warning::")]
    assert len(warnings) == 2 and all("optional read" in w for w in warnings)
    assert "workflow runs" in job.summary and "check runs" in job.summary
    assert messages(repo.events(job), "check") == []
    assert [m["payload"]["body"] for m in messages(repo.events(job), "comment")] == ["go on"]
