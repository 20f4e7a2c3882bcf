"""GitHubForge: the real PyGithub client against a local fake of the GitHub REST API."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.github_api import FakeGitHub

from rio_ci.core.errors import ForgeError, StorageError
from rio_ci.forge.github import GitHubForge

MARKER = "<!-- rio:progress -->"


def test_a_wrong_token_fails_at_construction(gh: FakeGitHub) -> None:
    with pytest.raises(ForgeError, match="opening repository octo/demo") as caught:
        GitHubForge(gh.repo, "not-the-token", gh.api_url, throttle=False, retries=0)
    assert caught.value.status == 401


def test_the_default_branch_is_the_repositorys_own() -> None:
    """The pull request's base and the sweep's dispatch ref when ``GITHUB_REF_NAME`` is not
    set: the repository's default branch, whatever its name, not an assumed ``main``."""
    with FakeGitHub(default_branch="trunk") as fake:
        forge = GitHubForge(fake.repo, fake.token, fake.api_url, throttle=False)
        assert forge.default_branch() == "trunk"


def test_permission_is_the_collaborator_level_or_none(gh: FakeGitHub, forge: GitHubForge) -> None:
    gh.add_collaborator("alice", "write")
    gh.add_collaborator("bob", "read")
    gh.add_collaborator("odd", "superuser")
    assert forge.permission("alice") == "write"
    assert forge.permission("bob") == "read"
    assert forge.permission("mallory") == "none"  # 404 from GitHub
    assert forge.permission("odd") == "none"  # an unknown answer grants nothing


def test_issue_is_read_with_its_labels(gh: FakeGitHub, forge: GitHubForge) -> None:
    number = gh.add_issue("Fix the route", "It 500s", user="carol", labels=("rio", "bug"))
    assert forge.issue(number).title == "Fix the route"
    assert forge.issue(number).body == "It 500s"
    assert forge.issue(number).author == "carol"
    assert forge.issue(number).labels == ("rio", "bug")


def test_the_timeline_says_who_labelled_who_assigned_and_what_was_commented(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    """One request; only label, assignment and comment entries; an assignment's actor is
    who made it, never the assignee; a comment's is its author."""
    issue = gh.add_issue("Fix", user="carol", labels=("bug",))
    gh.add_label(issue, "rio", by="alice", at="2024-02-01T00:00:00Z")
    gh.assign(issue, "rio-bot", by="bob")
    gh.remove_label(issue, "bug", by="dave")
    gh.add_comment(issue, "hello", user="erin")
    gh.issue_events[issue].append({**gh.issue_events[issue][0], "id": 1, "event": "closed"})
    before = len(gh.requests)

    entries = forge.issue_timeline(issue)

    assert sorted((e.kind, e.actor, e.subject) for e in entries) == [
        ("assigned", "bob", "rio-bot"),
        ("commented", "erin", "hello"),
        ("labeled", "alice", "rio"),
        ("labeled", "carol", "bug"),
        ("unlabeled", "dave", "bug"),
    ]
    assert entries[-1].created_at == "2024-02-01T00:00:00Z"  # oldest first
    (request,) = gh.requests[before:]
    assert request.path == f"/repos/{gh.repo}/issues/{issue}/timeline"


def test_comments_after_the_watermark_come_oldest_first(gh: FakeGitHub, forge: GitHubForge) -> None:
    number = gh.add_issue("goal")
    first = gh.add_comment(number, "one", user="alice", association="OWNER")
    second = gh.add_comment(number, "two", user="eve", association="NONE")
    third = gh.add_comment(number, "three", user="bob", association="COLLABORATOR")
    gh.add_comment(gh.add_issue("other"), "elsewhere")

    assert [c.id for c in forge.comments(number)] == [first, second, third]
    later = forge.comments(number, after_id=first)
    assert [(c.id, c.author, c.association, c.body) for c in later] == [
        (second, "eve", "NONE", "two"),
        (third, "bob", "COLLABORATOR", "three"),
    ]
    assert later[0].issue == number
    assert later[0].url.endswith(f"#issuecomment-{second}")
    assert forge.comments(number, after_id=third) == []


def test_a_missing_issue_is_a_forge_error_naming_the_operation(forge: GitHubForge) -> None:
    with pytest.raises(ForgeError, match="listing comments of #99") as caught:
        forge.comments(99)
    assert caught.value.status == 404


def test_upsert_comment_edits_one_comment_in_place(gh: FakeGitHub, forge: GitHubForge) -> None:
    number = gh.add_issue("goal")
    gh.add_comment(number, "a human comment")

    created = forge.upsert_comment(number, MARKER, f"{MARKER}\nrunning")
    edited = forge.upsert_comment(number, MARKER, f"{MARKER}\nsucceeded")
    replayed = forge.upsert_comment(number, MARKER, f"{MARKER}\nsucceeded")

    assert created == edited == replayed
    ours = [c for c in gh.comments_on(number) if MARKER in c["body"]]
    assert len(ours) == 1
    assert ours[0]["body"] == f"{MARKER}\nsucceeded"
    # One look, then the comment made is remembered: the edit needs no second look, and
    # the replay knows the body is already written and does not write again.
    listed = gh.to(f"/repos/{gh.repo}/issues/{number}/comments")
    assert [r.method for r in listed] == ["GET", "POST"]
    assert len([r for r in gh.requests if r.method == "PATCH"]) == 1


def test_upsert_comment_never_takes_over_someone_elses_comment(gh: FakeGitHub) -> None:
    forge = GitHubForge(
        gh.repo, gh.token, gh.api_url, throttle=False, retries=0, comment_author=gh.bot
    )
    number = gh.add_issue("goal")
    planted = gh.add_comment(number, f"quoting {MARKER}", user="eve", association="NONE")

    ours = forge.upsert_comment(number, MARKER, f"{MARKER}\nrunning")

    assert ours != planted
    assert gh.comments[planted]["body"] == f"quoting {MARKER}"
    assert forge.upsert_comment(number, MARKER, f"{MARKER}\ndone") == ours


def test_a_lost_post_is_not_retried_but_a_failed_get_is(gh: FakeGitHub) -> None:
    forge = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=2)
    number = gh.add_issue("goal")
    gh.fail_next("POST", rf"/repos/{gh.repo}/issues/{number}/comments", 503)
    with pytest.raises(ForgeError, match="HTTP 503"):
        forge.upsert_comment(number, MARKER, f"{MARKER}\nrunning")
    assert gh.comments_on(number) == []

    gh.fail_next("GET", rf"/repos/{gh.repo}/issues/{number}/comments", 503)
    forge.upsert_comment(number, MARKER, f"{MARKER}\nrunning")
    assert len(gh.comments_on(number)) == 1


def test_checks_are_the_completed_ones_of_the_branch_after_the_watermark(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    branch = "rio/issue-7"
    sha = "a" * 40
    gh.set_branch(branch, sha)
    gh.set_branch("main", "b" * 40)
    old_run = gh.add_workflow_run(branch, "CI", "failure")
    gh.add_workflow_run("main", "CI", "success")
    gh.add_workflow_run(branch, "CI", None, status="in_progress")
    lint = gh.add_check_run(sha, "lint", "success", app="ci-app")
    gh.add_check_run(sha, "build (job)", "success", app="github-actions")
    gh.add_check_run(sha, "slow", None, status="queued")
    gh.add_check_run("b" * 40, "other-branch", "success")
    new_run = gh.add_workflow_run(branch, "Tests", "success")

    every = forge.checks(branch)
    assert [(c.kind, c.id, c.name, c.conclusion) for c in every] == [
        ("workflow_run", old_run, "CI", "failure"),
        ("check_run", lint, "lint", "success"),
        ("workflow_run", new_run, "Tests", "success"),
    ]
    assert all(c.head_branch == branch for c in every)
    assert every[0].url.endswith(f"/actions/runs/{old_run}")
    assert [c.id for c in forge.checks(branch, after_id=lint)] == [new_run]
    assert forge.checks("rio/issue-404") == []


def test_open_pull_request_reuses_the_open_one(gh: FakeGitHub, forge: GitHubForge) -> None:
    gh.set_branch("rio/issue-3", "c" * 40)
    first = forge.open_pull_request("rio/issue-3", "main", "Fix #3", "Fixes #3")
    second = forge.open_pull_request("rio/issue-3", "main", "Fix #3", "Fixes #3")

    assert first == second
    assert len(gh.pulls) == 1
    (pull,) = gh.pulls.values()
    assert (pull["head"]["ref"], pull["base"]["ref"], pull["body"]) == (
        "rio/issue-3",
        "main",
        "Fixes #3",
    )
    assert len([r for r in gh.to(f"/repos/{gh.repo}/pulls") if r.method == "POST"]) == 1
    listed = [r for r in gh.to(f"/repos/{gh.repo}/pulls") if r.method == "GET"]
    assert listed[0].query["head"] == "octo:rio/issue-3"


def test_dispatch_is_recorded_with_its_inputs(gh: FakeGitHub, forge: GitHubForge) -> None:
    gh.add_workflow("rio.yml")
    forge.dispatch("rio.yml", "main", {"issue": "7"})
    assert gh.dispatches == [{"workflow": "rio.yml", "ref": "main", "inputs": {"issue": "7"}}]
    with pytest.raises(ForgeError, match=r"dispatching missing\.yml") as caught:
        forge.dispatch("missing.yml", "main", {})
    assert caught.value.status == 404


def test_artifacts_are_listed_newest_first_by_exact_name(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    middle = gh.add_artifact("rio-session-7", b"2", "2024-03-02T10:00:00Z")
    newest = gh.add_artifact("rio-session-7", b"3", "2024-03-03T10:00:00Z", run_id=99)
    oldest = gh.add_artifact("rio-session-7", b"1", "2024-03-01T10:00:00Z", expired=True)
    gh.add_artifact("rio-session-70", b"x", "2024-03-04T10:00:00Z")

    listed = forge.artifacts("rio-session-7")

    assert [a.id for a in listed] == [newest, middle, oldest]
    assert listed[0].created_at == "2024-03-03T10:00:00Z"
    assert (listed[0].run_id, listed[0].size_in_bytes, listed[0].expired) == (99, 1, False)
    assert listed[2].expired


def test_an_artifacts_origin_and_its_run_are_read_and_a_missing_run_is_none(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    fork = gh.add_foreign_run("fork")
    gh.add_artifact("rio-session-7", b"1", run_id=fork)

    (listed,) = forge.artifacts("rio-session-7")
    run = forge.workflow_run(fork)

    assert forge.repository_id() == 1
    assert (listed.run_id, listed.repository_id, listed.head_repository_id) == (fork, 1, 2)
    assert run is not None
    assert (run.id, run.event, run.path) == (fork, "pull_request", ".github/workflows/rio.yml")
    assert (run.repository_id, run.head_repository_id) == (1, 2)
    assert forge.workflow_run(987_654) is None


def test_download_follows_the_redirect_without_the_token(
    gh: FakeGitHub, forge: GitHubForge, tmp_path: Path
) -> None:
    payload = bytes(range(256)) * 1000
    artifact_id = gh.add_artifact("rio-session-1", payload)

    dest = forge.download_artifact(artifact_id, tmp_path / "a.zip")

    assert dest.read_bytes() == payload
    (api_call,) = gh.to(f"/repos/{gh.repo}/actions/artifacts/{artifact_id}/zip")
    assert api_call.headers["authorization"] == f"Bearer {gh.token}"
    (blob_call,) = gh.to("/download/")
    assert "authorization" not in blob_call.headers
    assert gh.token not in repr(blob_call)


def test_download_over_the_size_limit_leaves_nothing(
    gh: FakeGitHub, forge: GitHubForge, tmp_path: Path
) -> None:
    artifact_id = gh.add_artifact("rio-session-1", b"z" * 5000)
    with pytest.raises(StorageError, match="limit"):
        forge.download_artifact(artifact_id, tmp_path / "a.zip", max_bytes=4096)
    assert list(tmp_path.iterdir()) == []


def test_an_expired_artifact_download_is_a_forge_error(
    gh: FakeGitHub, forge: GitHubForge, tmp_path: Path
) -> None:
    artifact_id = gh.add_artifact("rio-session-1", b"gone", expired=True)
    with pytest.raises(ForgeError, match=f"downloading artifact {artifact_id}") as caught:
        forge.download_artifact(artifact_id, tmp_path / "a.zip")
    assert caught.value.status == 410
    assert list(tmp_path.iterdir()) == []


def test_a_remembered_comment_deleted_meanwhile_is_looked_for_and_made_again(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    number = gh.add_issue("goal")
    first = forge.upsert_comment(number, MARKER, f"{MARKER}\nrunning")
    del gh.comments[first]  # someone deleted the progress comment

    again = forge.upsert_comment(number, MARKER, f"{MARKER}\nsucceeded")

    assert again != first
    assert [c["body"] for c in gh.comments_on(number)] == [f"{MARKER}\nsucceeded"]


def test_the_next_step_of_a_job_reads_what_changed_only(gh: FakeGitHub, tmp_path: Path) -> None:
    """Two forges sharing the kept answers (the run and finish steps of one job): the second
    asks conditionally, so an unchanged list costs a 304 and a changed one is read anew."""
    number = gh.add_issue("goal")
    gh.add_comment(number, "one", user="alice")
    kept = tmp_path / "github.json"
    run = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, kept=kept, repository_id=1)
    assert [c.body for c in run.comments(number)] == ["one"]
    finish = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, kept=kept, repository_id=1)

    assert [c.body for c in finish.comments(number)] == ["one"]
    gh.add_comment(number, "two", user="alice")
    assert [c.body for c in finish.comments(number)] == ["one", "two"]

    assert [str(c).split(" → ")[1] for c in gh.counted] == ["200", "200"]
    assert len(gh.not_modified) == 1


def test_a_look_at_an_issue_moves_with_a_new_comment_not_with_an_edit_of_ours(
    gh: FakeGitHub, forge: GitHubForge
) -> None:
    """The running job edits its progress comment every few rounds; its looks for news stay
    free (304s) through those edits and see a comment someone adds."""
    number = gh.add_issue("goal")
    forge.upsert_comment(number, MARKER, f"{MARKER}\none")
    assert forge.changed(number)  # the first look: nothing to compare with
    counted = len(gh.counted)

    forge.upsert_comment(number, MARKER, f"{MARKER}\ntwo")
    assert not forge.changed(number)
    gh.add_comment(number, "news", user="alice")
    assert forge.changed(number)

    assert [str(c).split(" ")[0] for c in gh.counted[counted:]] == ["PATCH", "GET"]
