"""The fake GitHub models what real GitHub does (see docs/github.md and the facts behind it):
the real PyGithub client and real git against FakeGitHub and its bare origin."""

from __future__ import annotations

import datetime
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import github
import pytest
from fakes.git_origin import install_push_rules, make_origin, push
from fakes.github_api import FakeGitHub
from github.Repository import Repository

MiB = 1024 * 1024


@pytest.fixture
def client(gh: FakeGitHub) -> Iterator[github.Github]:
    with github.Github(
        auth=github.Auth.Token(gh.token),
        base_url=gh.api_url,
        retry=None,
        per_page=100,
        seconds_between_requests=0,
        seconds_between_writes=0,
    ) as made:
        yield made


@pytest.fixture
def repo(gh: FakeGitHub, client: github.Github) -> Repository:
    return client.get_repo(gh.repo)


def as_token(gh: FakeGitHub, token: str) -> Repository:
    return github.Github(
        auth=github.Auth.Token(token),
        base_url=gh.api_url,
        retry=None,
        lazy=True,
        seconds_between_requests=0,
        seconds_between_writes=0,
    ).get_repo(gh.repo)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


@pytest.fixture
def clone(tmp_path: Path, gh: FakeGitHub) -> Path:
    """A working repository whose first commit is already on a served origin."""
    origin = make_origin(tmp_path / "origin.git", max_file_bytes=MiB)
    gh.serve_git(origin)
    install_push_rules(origin, max_file_bytes=MiB)  # serve_git keeps the rules it finds
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "--quiet", "--initial-branch=main")
    (work / "README.md").write_text("# demo\n")
    git(work, "add", "--all")
    git(work, "commit", "--quiet", "-m", "initial")
    assert push(work, gh.git_url, "main", token=gh.token).returncode == 0
    return work


def commit(work: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_bytes(data)
    git(work, "add", "--all")
    git(work, "commit", "--quiet", "-m", "change")


# --- who may write -------------------------------------------------------------------------


def test_the_permission_api_maps_roles_to_legacy_levels_and_keeps_the_role(
    gh: FakeGitHub, repo: Repository
) -> None:
    for login, role in (
        ("ada", "admin"),
        ("max", "maintain"),
        ("wes", "write"),
        ("tia", "triage"),
        ("rae", "read"),
    ):
        gh.add_user(login, role)
    levels = {
        login: (repo.get_collaborator_permission(login), repo.get_collaborator_role_name(login))
        for login in ("ada", "max", "wes", "tia", "rae")
    }
    assert levels == {
        "ada": ("admin", "admin"),
        "max": ("write", "maintain"),
        "wes": ("write", "write"),
        "tia": ("read", "triage"),
        "rae": ("read", "read"),
    }
    with pytest.raises(github.UnknownObjectException):
        repo.get_collaborator_permission("stranger")


def test_a_read_only_org_member_comments_as_member_without_write_access(
    gh: FakeGitHub, repo: Repository
) -> None:
    gh.add_user("mo", "read", member=True)
    gh.add_user("teo", "write", association="CONTRIBUTOR")  # private membership, via a team
    gh.add_user("eve", None)
    issue = gh.add_issue("x")
    for login in ("mo", "teo", "eve"):
        gh.add_comment(issue, "hello", user=login)
    seen = [(c.user.login, c.author_association) for c in repo.get_issue(issue).get_comments()]
    assert seen == [("mo", "MEMBER"), ("teo", "CONTRIBUTOR"), ("eve", "NONE")]
    assert repo.get_collaborator_permission("mo") == "read"
    assert repo.get_collaborator_permission("teo") == "write"


# --- failures ------------------------------------------------------------------------------


def test_optional_listings_can_answer_403_or_404_while_the_rest_works(
    gh: FakeGitHub, repo: Repository
) -> None:
    gh.set_branch("rio/issue-1", "a" * 40)
    gh.add_check_run("a" * 40, "lint")
    gh.add_check_suite("a" * 40)
    gh.add_workflow_run("rio/issue-1")
    runs = gh.fail(r".*/check-runs", 403, message="Resource not accessible by integration")
    gh.fail(r".*/check-suites", 404)
    head = repo.get_branch("rio/issue-1").commit
    with pytest.raises(github.GithubException) as refused:
        list(head.get_check_runs())
    assert refused.value.status == 403
    assert refused.value.data["message"] == "Resource not accessible by integration"
    with pytest.raises(github.GithubException, match="404"):
        list(head.get_check_suites())
    assert [r.name for r in repo.get_workflow_runs(branch="rio/issue-1")] == ["CI"]
    assert runs.hits == 1


def test_an_outage_after_a_moment_and_times_limited_failures(
    gh: FakeGitHub, repo: Repository
) -> None:
    issue = gh.add_issue("x")
    gh.fail(r".*", 503, after=2)
    assert repo.get_issue(issue).title == "x"
    assert repo.get_issue(issue).title == "x"
    with pytest.raises(github.GithubException) as down:
        repo.get_issue(issue)
    assert down.value.status == 503
    gh.failures.clear()
    once = gh.fail(r".*/issues/\d+", 502, method="GET", times=1)
    with pytest.raises(github.GithubException):
        repo.get_issue(issue)
    assert repo.get_issue(issue).number == issue and once.hits == 1


def test_an_expired_token_gets_401_on_the_api_and_on_git(
    gh: FakeGitHub, repo: Repository, clone: Path
) -> None:
    issue = gh.add_issue("x")
    gh.expire_token()
    with pytest.raises(github.BadCredentialsException):
        repo.get_issue(issue)
    commit(clone, {"a.txt": b"a"})
    refused = push(clone, gh.git_url, "main", token=gh.token)
    assert refused.returncode != 0
    assert "fatal:" in refused.stderr


def test_a_job_token_without_checks_read_is_refused_like_githubs(gh: FakeGitHub) -> None:
    gh.add_token("job", permissions={"contents": "write", "issues": "write"})
    gh.set_branch("rio/issue-1", "b" * 40)
    issue = gh.add_issue("x")
    job = as_token(gh, "job")
    assert job.get_issue(issue).title == "x"
    with pytest.raises(github.GithubException) as refused:
        list(job.get_branch("rio/issue-1").commit.get_check_runs())
    assert refused.value.status == 403
    assert refused.value.data["message"] == "Resource not accessible by integration"
    gh.add_token("pat", permissions={"issues": "read"}, kind="pat")
    with pytest.raises(github.GithubException, match="personal access token"):
        as_token(gh, "pat").get_issue(issue).create_comment("no")


# --- workflows and dispatches --------------------------------------------------------------


def test_a_workflow_is_disabled_and_enabled_and_a_disabled_one_takes_no_dispatch(
    gh: FakeGitHub, repo: Repository
) -> None:
    gh.add_workflow("rio.yml")
    gh.add_workflow("rio-sweep.yml")
    sweep = repo.get_workflow("rio-sweep.yml")
    assert sweep.state == "active"
    assert sweep.disable()
    assert repo.get_workflow("rio-sweep.yml").state == "disabled_manually"
    assert repo.get_workflow(str(sweep.id)).name == "rio-sweep.yml"  # by id too
    with pytest.raises(github.GithubException) as refused:
        repo.get_workflow("rio-sweep.yml").create_dispatch("main", {}, throw=True)
    assert refused.value.status == 422
    assert "disabled workflow" in refused.value.data["message"]
    assert repo.get_workflow("rio-sweep.yml").enable()
    assert repo.get_workflow("rio-sweep.yml").create_dispatch("main", {}, throw=True)
    assert gh.workflow_changes == [("rio-sweep.yml", "disable"), ("rio-sweep.yml", "enable")]
    assert gh.dispatches == [{"workflow": "rio-sweep.yml", "ref": "main", "inputs": {}}]


def test_a_repository_dispatch_needs_contents_write(gh: FakeGitHub, repo: Repository) -> None:
    assert repo.create_repository_dispatch("rio-timer", {"issue": 7})
    gh.add_token("reader", permissions={"contents": "read", "actions": "write"})
    assert not as_token(gh, "reader").create_repository_dispatch("rio-timer")
    assert gh.requests[-1].path == f"/repos/{gh.repo}/dispatches"
    assert gh.repository_dispatches == [{"event_type": "rio-timer", "client_payload": {"issue": 7}}]


# --- artifacts and lists --------------------------------------------------------------------


def test_artifacts_expire_after_their_retention_days_cut_to_the_maximum(
    gh: FakeGitHub, repo: Repository, tmp_path: Path
) -> None:
    (tmp_path / "session.sqlite3").write_bytes(b"db")
    (tmp_path / "manifest.json").write_text("{}")
    created = "2024-05-01T10:00:00Z"
    ids = {
        days: gh.upload_artifact("rio-session-1", tmp_path, retention_days=days, created_at=created)
        for days in (7, None, 400)
    }
    start = datetime.datetime(2024, 5, 1, 10, tzinfo=datetime.UTC)
    expiry = {a.id: a.expires_at for a in repo.get_artifacts(name="rio-session-1")}
    assert expiry == {
        ids[7]: start + datetime.timedelta(days=7),
        ids[None]: start + datetime.timedelta(days=90),
        ids[400]: start + datetime.timedelta(days=90),
    }
    gh.max_retention_days = 400  # a private repository's setting
    longer = gh.upload_artifact("rio-session-1", tmp_path, retention_days=400, created_at=created)
    assert gh.artifacts[longer]["retention_days"] == 400


@pytest.mark.parametrize(
    "kind, event, head, path",
    [
        ("fork", "pull_request", "mallory/demo", ".github/workflows/rio.yml"),
        ("target", "pull_request_target", "octo/demo", ".github/workflows/rio.yml"),
        ("workflow", "push", "octo/demo", ".github/workflows/ci.yml"),
    ],
)
def test_an_artifact_names_the_run_that_uploaded_it_and_the_run_where_it_came_from(
    gh: FakeGitHub, repo: Repository, kind: str, event: str, head: str, path: str
) -> None:
    run_id = gh.add_foreign_run(kind)
    artifact_id = gh.add_artifact("rio-session-1", b"zip", run_id=run_id)
    (listed,) = repo.get_artifacts(name="rio-session-1")
    origin = listed.raw_data["workflow_run"]
    assert (origin["id"], origin["repository_id"]) == (run_id, repo.id)
    assert (origin["head_repository_id"] == repo.id) == (head == gh.repo)
    run = repo.get_workflow_run(run_id)
    assert (run.event, run.path, run.head_repository.full_name) == (event, path, head)
    assert run.repository.id == repo.id and listed.id == artifact_id


def test_an_expired_artifacts_download_is_410_even_while_the_listing_lags(
    gh: FakeGitHub, repo: Repository
) -> None:
    artifact_id = gh.add_artifact("rio-session-1", b"zip")
    gh.expire_artifact(artifact_id, listed=False)
    assert [a.expired for a in repo.get_artifacts(name="rio-session-1")] == [False]
    url = f"{gh.api_url}/repos/{gh.repo}/actions/artifacts/{artifact_id}/zip"
    request = urllib.request.Request(url, headers={"Authorization": f"token {gh.token}"})
    with pytest.raises(urllib.error.HTTPError) as gone:
        urllib.request.urlopen(request, timeout=10)
    assert gone.value.code == 410


def test_lists_are_paged_with_githubs_link_header(
    gh: FakeGitHub, client: github.Github, repo: Repository
) -> None:
    numbers = [gh.add_issue(f"issue {i}", labels=("rio",)) for i in range(130)]
    assert sorted(i.number for i in repo.get_issues(labels=["rio"])) == numbers
    url = f"{gh.api_url}/repos/{gh.repo}/issues?labels=rio&per_page=100&page=1"
    request = urllib.request.Request(url, headers={"Authorization": f"token {gh.token}"})
    with urllib.request.urlopen(request) as answer:
        assert len(json.load(answer)) == 100
        assert 'page=2>; rel="next"' in answer.headers["Link"]
    with urllib.request.urlopen(
        urllib.request.Request(url.replace("page=1", "page=2"), headers=request.headers)
    ) as answer:
        assert len(json.load(answer)) == 30
        assert answer.headers["Link"] is None


# --- pushes ------------------------------------------------------------------------------


def test_a_push_touching_workflows_is_refused_for_the_job_token_with_githubs_words(
    gh: FakeGitHub, clone: Path
) -> None:
    commit(clone, {".github/workflows/ci.yml": b"on: push\n", "src.py": b"print()\n"})
    refused = push(clone, gh.git_url, "HEAD:refs/heads/rio/issue-1", token=gh.token)
    assert refused.returncode == 1
    assert (
        "refusing to allow a GitHub App to create or update workflow "
        "`.github/workflows/ci.yml` without `workflows` permission"
    ) in refused.stderr
    assert "[remote rejected]" in refused.stderr
    gh.add_token("pat-token", kind="pat")
    as_pat = push(clone, gh.git_url, "HEAD:refs/heads/rio/issue-1", token="pat-token")
    assert "without `workflow` scope" in as_pat.stderr
    gh.add_token("app-token", workflows=True)
    accepted = push(clone, gh.git_url, "HEAD:refs/heads/rio/issue-1", token="app-token")
    assert accepted.returncode == 0, accepted.stderr
    assert git(clone, "ls-remote", str(gh.git_origin), "rio/issue-1").startswith(
        git(clone, "rev-parse", "HEAD")
    )


def test_a_file_over_the_limit_is_refused_with_gh001(gh: FakeGitHub, clone: Path) -> None:
    commit(clone, {"data/big.bin": b"x" * (MiB + 1), "small.txt": b"ok"})
    refused = push(clone, gh.git_url, "main", token=gh.token)
    assert refused.returncode == 1
    assert "GH001: Large files detected" in refused.stderr
    assert (
        "File data/big.bin is 1.00 MB; this exceeds GitHub's file size limit of 1.00 MB"
        in refused.stderr
    )
    assert "workflow" not in refused.stderr
    git(clone, "reset", "--quiet", "--hard", "HEAD~1")
    commit(clone, {"small.txt": b"ok"})
    assert push(clone, gh.git_url, "main", token=gh.token).returncode == 0


def test_local_pushes_follow_the_rules_file_and_read_only_tokens_cannot_push(
    gh: FakeGitHub, clone: Path
) -> None:
    assert gh.git_origin is not None
    commit(clone, {".github/workflows/x.yml": b"x"})
    assert push(clone, str(gh.git_origin), "main").returncode == 1
    install_push_rules(gh.git_origin, local_workflows=True)
    assert push(clone, str(gh.git_origin), "main").returncode == 0
    gh.add_token("reader", permissions={"contents": "read"})
    commit(clone, {"more.txt": b"x"})
    denied = push(clone, gh.git_url, "main", token="reader")
    assert denied.returncode != 0 and "403" in denied.stderr


# --- reviews and conditional requests ------------------------------------------------------


def test_reviews_list_with_their_inline_comments_as_pygithub_reads_them(
    gh: FakeGitHub, repo: Repository
) -> None:
    pull = gh.add_pull("rio/issue-1", "Fixes #1")
    review = gh.add_review(
        pull,
        "alice",
        "CHANGES_REQUESTED",
        "see inline",
        [
            {"path": "a.py", "line": 3, "body": "off by one"},
            {"path": "b.py", "line": 9, "body": "x"},
        ],
    )
    lone = gh.add_review_comment(pull, "a.py", 7, "typo", side="LEFT")
    gh.add_review(
        pull, "alice", "PENDING", "not submitted", [{"path": "c.py", "line": 1, "body": "p"}]
    )

    found = repo.get_pull(pull)
    reviews = list(found.get_reviews())
    comments = list(found.get_review_comments())
    legacy = list(found.get_single_review_comments(review))

    assert [(r.id, r.state, r.body) for r in reviews] == [
        (review, "CHANGES_REQUESTED", "see inline"),
        (reviews[1].id, "COMMENTED", ""),  # the lone comment's own review
    ]
    assert [(c.path, c.line, c.side, c.pull_request_review_id) for c in comments[:2]] == [
        ("a.py", 3, "RIGHT", review),
        ("b.py", 9, "RIGHT", review),
    ]
    assert (comments[2].id, comments[2].side, comments[2].pull_request_review_id) == (
        lone,
        "LEFT",
        reviews[1].id,
    )
    assert len(comments) == 3  # a pending review's comments are its author's alone
    assert [c.body for c in legacy] == ["off by one", "x"]
    url = f"{gh.api_url}/repos/{gh.repo}/pulls/{pull}/reviews/{review}/comments"
    _, raw = repo.requester.requestJsonAndCheck("GET", url)
    assert "line" not in raw[0] and "side" not in raw[0] and raw[0]["position"]


def test_an_unchanged_resource_is_answered_304_and_a_new_comment_changes_its_etag(
    gh: FakeGitHub, client: github.Github
) -> None:
    issue = gh.add_issue("Fix")
    url = f"{gh.api_url}/repos/{gh.repo}/issues/{issue}"
    status, headers, _ = client.requester.requestJson("GET", url)
    etag = headers["etag"]

    again = client.requester.requestJson("GET", url, headers={"If-None-Match": etag})
    gh.add_comment(issue, "new")
    changed = client.requester.requestJson("GET", url, headers={"If-None-Match": etag})

    assert status == 200 and again[0] == 304 and again[2] == ""
    assert changed[0] == 200 and changed[1]["etag"] != etag
    assert [r.path for r in gh.not_modified] == [f"/repos/{gh.repo}/issues/{issue}"]


# --- the rate limit ----------------------------------------------------------------------


def test_requests_count_as_github_counts_them(gh: FakeGitHub, client: github.Github) -> None:
    """Every API request counts but a conditional one answered 304; the API's 302 to an
    artifact's blob counts, the blob's download does not; every answer says where the
    budget stands."""
    issue = gh.add_issue("Fix")
    artifact_id = gh.add_artifact("rio-session-1", b"zip bytes")
    url = f"{gh.api_url}/repos/{gh.repo}/issues/{issue}"
    _, headers, _ = client.requester.requestJson("GET", url)
    client.requester.requestJson("GET", url, headers={"If-None-Match": headers["etag"]})
    zip_url = f"{gh.api_url}/repos/{gh.repo}/actions/artifacts/{artifact_id}/zip"
    request = urllib.request.Request(zip_url, headers={"Authorization": f"token {gh.token}"})
    with urllib.request.urlopen(request, timeout=10) as blob:  # follows the 302
        assert blob.read() == b"zip bytes"

    assert [str(c) for c in gh.counted] == [
        f"GET /repos/{gh.repo}/issues/{issue} → 200",
        f"GET /repos/{gh.repo}/actions/artifacts/{artifact_id}/zip → 302",
    ]
    assert headers["x-ratelimit-limit"] == "1000" and headers["x-ratelimit-remaining"] == "999"
    assert int(headers["x-ratelimit-reset"]) > datetime.datetime.now().timestamp()


def test_a_spent_budget_and_scripted_rate_limits_are_answered_as_github_does(
    gh: FakeGitHub, client: github.Github
) -> None:
    url = f"{gh.api_url}/repos/{gh.repo}"
    gh.limit_rate(rf"/repos/{gh.repo}", times=1, status=429, retry_after=7)
    gh.limit_rate(rf"/repos/{gh.repo}", times=1, reset_in=30)
    secondary = client.requester.requestJson("GET", url)
    primary = client.requester.requestJson("GET", url)
    gh.rate.limit = len(gh.counted)  # the budget is spent from here on
    spent = client.requester.requestJson("GET", url)

    assert secondary[0] == 429 and secondary[1]["retry-after"] == "7"
    assert "secondary rate limit" in json.loads(secondary[2])["message"]
    assert primary[0] == 403 and primary[1]["x-ratelimit-remaining"] == "0"
    reset = int(primary[1]["x-ratelimit-reset"]) - datetime.datetime.now().timestamp()
    assert 25 < reset <= 30
    assert spent[0] == 403 and spent[1]["x-ratelimit-remaining"] == "0"
    assert json.loads(spent[2])["message"].startswith("API rate limit exceeded")
