"""docs/github.md "After the run ends": follow-up Sessions on the same branch and pull request,
``/rio <request>`` without the label, and comments that start nothing cost nothing."""

from __future__ import annotations

import pytest
from action_job import WAIT, Repository, commented, conclude, labeled, messages, script
from fakes.github_api import FakeGitHub

from tests.kit import add, cmd_cell

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write")]
FIX = [add(cmd_cell("python3", "-c", "open('fix.py', 'w').write('fixed = 1')"))]
MORE = [add(cmd_cell("python3", "-c", "open('fix.py', 'a').write('\\nmore = 2')"))]


def created(events: list[dict[str, object]]) -> dict[str, object]:
    (first,) = [e for e in events if e["kind"] == "session_created"]
    return first


def test_a_maintainer_comment_after_success_starts_a_follow_up_on_the_same_pull_request(
    repo: Repository, gh: FakeGitHub
) -> None:
    repo.set_script(script(FIX, [conclude()]))
    issue = gh.add_issue("Fix the bug", "it breaks", labels=("rio",))
    done = repo.job("issues", labeled(issue))
    (pull,) = gh.pulls
    previous = created(repo.events(done))
    ask = gh.add_comment(pull, "please also add `more`", user="alice")
    repo.set_script(script(MORE, [conclude()]))  # the follow-up's own rounds

    follow = repo.job("issue_comment", commented(gh, ask))

    assert follow.outputs["status"] == "succeeded", follow.logs
    events = repo.events(follow)
    session = created(events)
    assert session["session_id"] != previous["session_id"]
    assert str(session["goal"]).startswith(str(previous["goal"]))
    assert "follow-up request by @alice" in str(session["goal"])
    assert "please also add `more`" in str(session["goal"])
    (told,) = messages(events, "previous_session")
    assert told["payload"]["result"] == "success"
    assert told["payload"]["session_id"] == previous["session_id"]
    assert told["payload"]["conclusion"] == "conclude success"
    first_turn = next(e for e in events if e["kind"] == "turn_prepared")
    assert told["id"] in first_turn["delivered"]
    assert messages(events, "comment") == []  # the request is the goal, not a message
    assert list(gh.pulls) == [pull]  # the same pull request, never a second
    assert len([r for r in gh.requests if r.method == "POST" and r.path.endswith("/pulls")]) == 1
    assert follow.outputs["pull-request"] == done.outputs["pull-request"]
    assert repo.branch_file(f"rio/issue-{issue}", "fix.py") == "fixed = 1\nmore = 2"
    manifest_generation = follow.finish.result["generation"]
    assert manifest_generation == 2


def test_the_label_again_on_an_issue_whose_session_ended_starts_a_new_session(
    repo: Repository, gh: FakeGitHub
) -> None:
    """docs/github.md: a label by a user with write access starts a Session, also after the
    previous one ended; the new one is told how the previous one ended."""
    issue, _ = repo.labeled_issue(script(WAIT), title="Fix the parser")
    stop = gh.add_comment(issue, "/rio stop", user="alice")
    stopped = repo.job("issue_comment", commented(gh, stop))
    assert stopped.outputs["status"] == "failed"
    previous = created(repo.events(stopped))
    gh.issues[issue]["body"] = "it fails on empty input"  # the issue as it reads now
    repo.set_script(script(WAIT))

    again = repo.job("issues", labeled(issue))

    assert again.outputs["status"] == "waiting", again.logs
    events = repo.events(again)
    session = created(events)
    assert session["session_id"] != previous["session_id"]
    assert "# Fix the parser\n\nit fails on empty input" in str(session["goal"])
    assert "follow-up" not in str(session["goal"])
    (told,) = messages(events, "previous_session")
    assert told["payload"]["result"] == "failure"
    assert told["payload"]["session_id"] == previous["session_id"]
    assert messages(events, "comment") == []  # "/rio stop" was before the new Session


def test_a_maintainer_comment_after_a_failure_starts_a_follow_up_too(
    repo: Repository, gh: FakeGitHub
) -> None:
    issue, _ = repo.labeled_issue(script(WAIT))
    stop = gh.add_comment(issue, "/rio stop", user="alice")
    stopped = repo.job("issue_comment", commented(gh, stop))
    assert stopped.outputs["status"] == "failed"
    again = gh.add_comment(issue, "try the other approach", user="alice")
    repo.set_script(script(WAIT))

    follow = repo.job("issue_comment", commented(gh, again))

    assert follow.outputs["status"] == "waiting", follow.logs
    (told,) = messages(repo.events(follow), "previous_session")
    assert told["payload"]["result"] == "failure"
    assert "stopped by @alice" in told["payload"]["reason"]


def test_a_comment_that_starts_nothing_costs_no_generation_and_no_push_even_after_a_merge(
    repo: Repository, gh: FakeGitHub
) -> None:
    issue, _ = repo.labeled_issue(script(FIX, [conclude()]))
    (pull,) = gh.pulls
    gh.merge_pull(pull)
    repo.delete_branch(f"rio/issue-{issue}")  # "delete branch" after the merge
    refs, artifacts = repo.branches(), len(gh.artifacts)

    stranger = repo.job(
        "issue_comment",
        commented(gh, gh.add_comment(issue, "nice!", user="eve", association="NONE")),
    )
    status = repo.job(
        "issue_comment", commented(gh, gh.add_comment(issue, "/rio status", user="alice"))
    )

    for job in (stranger, status):
        assert job.run.result["status"] == "ignored", job.logs
        assert "the run has ended (success)" in job.run.result["reason"]
        assert job.artifact_id is None and job.finish.result["status"] == "ignored"
    assert repo.branches() == refs and f"refs/heads/rio/issue-{issue}" not in refs
    assert len(gh.artifacts) == artifacts
    (comment,) = repo.progress_comments(issue)
    assert "actions/runs/1003" in comment["body"]  # /rio status rewrote it


def test_rio_request_by_a_maintainer_starts_a_session_and_labels_the_issue(
    repo: Repository, gh: FakeGitHub
) -> None:
    repo.set_script(script(WAIT))
    issue = gh.add_issue("Flaky test", "test_x fails sometimes")
    by_stranger = gh.add_comment(issue, "/rio delete everything", user="eve", association="NONE")
    ignored = repo.job("issue_comment", commented(gh, by_stranger))
    request = gh.add_comment(issue, "/rio make test_x deterministic", user="alice")

    job = repo.job("issue_comment", commented(gh, request))

    assert ignored.run.result["status"] == "ignored" and ignored.artifact_id is None
    assert job.outputs["status"] == "waiting", job.logs
    goal = str(created(repo.events(job))["goal"])
    assert "Flaky test" in goal and "make test_x deterministic" in goal
    assert "delete everything" not in goal
    assert [label["name"] for label in gh.issues[issue]["labels"]] == ["rio"]
    assert messages(repo.events(job), "comment") == []
