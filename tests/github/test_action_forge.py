"""The Forge calls the action relies on for the sweep, pull-request comments and checks:
the real PyGithub client against FakeGitHub."""

from __future__ import annotations

from fakes.github_api import FakeGitHub

from rio_ci.forge.github import GitHubForge

MARKER = "<!-- rio-ci:progress -->"


def test_issues_with_label_are_the_open_issues_without_pull_requests(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    first = gh.add_issue("first", "body", labels=("rio", "bug"))
    gh.add_issue("other label", labels=("bug",))
    gh.add_issue("closed", labels=("rio",), state="closed")
    pull = gh.add_pull("rio/issue-1", "a pull request")
    gh.add_label(pull, "rio")
    second = gh.add_issue("second", labels=("rio",))

    found = forge.issues_with_label("rio")

    assert [(i.number, i.title) for i in found] == [(first, "first"), (second, "second")]
    assert found[0].labels == ("rio", "bug") and found[0].body == "body"
    (listing,) = gh.to(f"/repos/{gh.repo}/issues")
    assert listing.query == {"state": "open", "labels": "rio", "per_page": "100"}


def test_find_comment_trusts_only_bots_and_writers(gh: FakeGitHub, forge: GitHubForge) -> None:
    issue = gh.add_issue("goal")
    gh.add_comment(issue, f"{MARKER} planted", user="eve", association="NONE")
    gh.add_comment(issue, "unrelated", user="alice", association="OWNER")
    ours = gh.add_comment(issue, f"{MARKER} ours", user=gh.bot, association="NONE")
    gh.add_comment(issue, f"{MARKER} later", user=gh.bot, association="NONE")

    found = forge.find_comment(issue, MARKER)

    assert found is not None and (found.id, found.body) == (ours, f"{MARKER} ours")
    assert forge.find_comment(gh.add_issue("empty"), MARKER) is None
    # upsert follows the same rule: the planted comment is never taken over.
    assert forge.upsert_comment(issue, MARKER, f"{MARKER} edited") == ours


def test_a_writer_may_own_the_marker_comment_when_the_token_is_a_person(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    issue = gh.add_issue("goal")
    gh.add_user("rita", "read", member=True)  # a read-only member: MEMBER, yet no writer
    gh.add_user("alice", "write", member=True)
    gh.add_comment(issue, f"{MARKER} planted by a reader", user="rita")
    theirs = gh.add_comment(issue, f"{MARKER} by a PAT", user="alice")
    found = forge.find_comment(issue, MARKER)
    assert found is not None and found.id == theirs


def test_pull_head_is_the_branch_of_a_pull_request_of_this_repository(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    ours = gh.add_pull("rio/issue-4", "ours")
    fork = gh.add_pull("rio/issue-4", "a fork's", head_repo="eve/demo")
    issue = gh.add_issue("not a pull request")

    assert forge.pull_head(ours) == "rio/issue-4"
    assert forge.pull_head(fork) is None
    assert forge.pull_head(issue) is None


def test_checks_leave_out_runs_from_forks_with_the_same_branch_name(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    gh.set_branch("rio/issue-4", "a" * 40)
    ours = gh.add_workflow_run("rio/issue-4", "CI", "success")
    gh.add_workflow_run("rio/issue-4", "CI", "failure", head_repo="eve/demo")

    assert [c.id for c in forge.checks("rio/issue-4")] == [ours]
