"""A small stateful fake of the GitHub REST API, served over real HTTP on 127.0.0.1.

It answers the endpoints rio_ci's GitHubForge reaches through PyGithub, in the JSON shapes
PyGithub parses (every object carries its ``url`` so PyGithub never has to "complete" it with a
second request). State lives in plain dicts that tests fill through ``add_*`` helpers and read
back directly. Every request is recorded in ``requests`` (method, path, query, lower-cased
headers, body) so a test can check where the token went.

API paths require ``Authorization: token <token>``, ``Bearer <token>`` or HTTP basic with the
token as password (401 ``Bad credentials`` otherwise, or once the token is expired);
``/download/<id>`` stands for GitHub's pre-signed blob URL and requires nothing. A token made
with ``add_token(permissions=...)`` is held to them as a job token is (403 ``Resource not
accessible by integration``). Lists come back as one page without a Link header unless the
request names ``per_page`` or ``page``; then they are paged with GitHub's Link header.

What real GitHub does that tests can switch on (see tests/test_fake_github.py):
- ``fail(pattern, status, method=, times=, after=)``: answer matching requests with an error
  (a 403 for check runs, a 5xx outage, a 401 from some moment on); ``expire_token()``;
- ``add_user(login, role, member=)``: the collaborator-permission table, where the legacy
  ``permission`` maps ``maintain`` to ``write`` and ``triage`` to ``read`` and ``role_name``
  keeps the role, and comments carry the ``author_association`` GitHub would give;
- workflows with a state: ``PUT .../enable|disable``, and a dispatch to a disabled workflow is
  refused (422); ``POST /repos/{o}/{r}/dispatches`` records a ``repository_dispatch``;
- artifacts with ``retention_days`` and ``expires_at`` (``upload_artifact`` zips a directory
  as actions/upload-artifact does);
- ``serve_git(origin)``: the bare repository over smart HTTP at ``git_url``, with GitHub's
  push refusals (tests/fakes/git_origin.py).
"""

from __future__ import annotations

import base64
import datetime
import io
import itertools
import json
import re
import threading
import urllib.parse
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from fakes import git_origin

Json = Any
Reply = tuple[int, Json, dict[str, str]]


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    body: bytes


@dataclass
class Token:
    """What a token may do. ``permissions`` None means everything (the fake's default token);
    otherwise a GITHUB_TOKEN-style map such as ``{"contents": "write", "checks": "read"}``.
    ``workflows`` lets its pushes change ``.github/workflows/``; ``kind`` is ``app`` (the job
    token or an installation token) or ``pat`` and picks GitHub's wording of refusals."""

    permissions: dict[str, str] | None = None
    workflows: bool = False
    kind: str = "app"
    expired: bool = False


@dataclass
class Failure:
    """Injected answers: every request matching ``method`` (``*`` = any) and ``pattern``,
    after the first ``after`` of them, gets ``status`` — ``times`` times, or forever."""

    method: str
    pattern: re.Pattern[str]
    status: int
    times: int | None = None
    after: int = 0
    message: str = ""
    seen: int = 0
    hits: int = 0

    def take(self, method: str, path: str) -> bool:
        if self.method not in ("*", method) or not self.pattern.fullmatch(path):
            return False
        self.seen += 1
        if self.seen <= self.after or (self.times is not None and self.hits >= self.times):
            return False
        self.hits += 1
        return True


# The permission a job token needs for a REST path (after /repos/{owner}/{repo}); reads need
# `read`, anything else `write`. Paths not listed need only metadata, which every token has.
SCOPES = [(re.compile(p), scope) for p, scope in (
    (r"/issues.*", "issues"), (r"/pulls.*", "pull-requests"), (r"/actions/.*", "actions"),
    (r"/commits/[^/]+/check-(runs|suites)|/check-(runs|suites).*", "checks"),
    (r"/dispatches", "contents"), (r"/git/.*|/contents/.*", "contents"))]
REFUSALS = {"app": "Resource not accessible by integration",
            "pat": "Resource not accessible by personal access token"}
WORKFLOW_STATES = ("active", "disabled_manually", "disabled_inactivity")


class FakeGitHub:
    """Use as a context manager: ``with FakeGitHub() as gh: GitHubForge(gh.repo, gh.token,
    gh.api_url, throttle=False)``."""

    def __init__(self, repo: str = "octo/demo", *, token: str = "fake-token",
                 default_branch: str = "main", bot: str = "github-actions[bot]") -> None:
        self.repo = repo
        self.owner, self.name = repo.split("/")
        self.token = token
        self.default_branch = default_branch
        self.bot = bot
        self.api_url = ""
        self.requests: list[Recorded] = []
        self.collaborators: dict[str, str] = {}
        self.associations: dict[str, str] = {}  # login → author_association of new comments
        self.tokens: dict[str, Token] = {token: Token()}
        self.issues: dict[int, dict[str, Json]] = {}
        self.comments: dict[int, dict[str, Json]] = {}
        self.pulls: dict[int, dict[str, Json]] = {}
        self.runs: dict[int, dict[str, Json]] = {}
        self.branches: dict[str, str] = {}
        self.check_runs: dict[int, dict[str, Json]] = {}
        self.check_suites: dict[int, dict[str, Json]] = {}
        self.workflows: dict[str, str] = {}  # file name → state
        self.workflow_changes: list[tuple[str, str]] = []  # (file name, enable | disable)
        self.dispatches: list[dict[str, Json]] = []
        self.repository_dispatches: list[dict[str, Json]] = []
        self.artifacts: dict[int, dict[str, Json]] = {}
        self.blobs: dict[int, bytes] = {}
        self.default_retention_days = 90
        self.max_retention_days = 90  # public repositories: 1 to 90 days
        self.git_origin: Path | None = None
        self.failures: list[Failure] = []
        self._numbers = itertools.count(1)
        self._ids = itertools.count(1001)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> FakeGitHub:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self.api_url = f"http://127.0.0.1:{server.server_address[1]}"
        # A short poll interval keeps shutdown (and so each test's teardown) fast.
        self._thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- state helpers -------------------------------------------------------------------------

    def _user(self, login: str) -> Json:
        kind = "Bot" if login.endswith("[bot]") else "User"
        return {"login": login, "id": abs(hash(login)) % 10**6, "type": kind,
                "url": f"{self.api_url}/users/{login}", "html_url": f"https://github.test/{login}"}

    @property
    def _base(self) -> str:
        return f"{self.api_url}/repos/{self.repo}"

    def add_collaborator(self, user: str, permission: str) -> None:
        self.collaborators[user] = permission

    def add_user(self, login: str, role: str | None, *, member: bool = False,
                 association: str | None = None) -> None:
        """A person as GitHub sees them: ``role`` on this repository (``admin``, ``maintain``,
        ``write``, ``triage``, ``read`` or a custom role; None: no access), and whether they
        are a member of the owning organization. Their comments carry ``association`` or
        what GitHub derives (MEMBER for members, COLLABORATOR for collaborators, else NONE);
        neither says whether they may write."""
        if role is not None:
            self.collaborators[login] = role
        self.associations[login] = association or (
            "MEMBER" if member else "COLLABORATOR" if role is not None else "NONE")

    def add_token(self, token: str, *, permissions: dict[str, str] | None = None,
                  workflows: bool = False, kind: str = "app") -> Token:
        """Another accepted token (an app installation token, a fine-grained PAT, a job
        token with limited ``permissions``)."""
        self.tokens[token] = Token(permissions, workflows, kind)
        return self.tokens[token]

    def expire_token(self, token: str | None = None) -> None:
        """From now on ``token`` (default: the main one) gets 401, on the API and over git."""
        self.tokens[token or self.token].expired = True

    def add_issue(self, title: str, body: str = "", user: str = "alice",
                  labels: tuple[str, ...] = (), state: str = "open") -> int:
        number = next(self._numbers)
        self.issues[number] = {
            "id": number + 500_000, "number": number, "title": title, "body": body,
            "user": self._user(user), "state": state,
            "labels": [{"name": n, "url": f"{self._base}/labels/{n}"} for n in labels],
            "url": f"{self._base}/issues/{number}",
            "html_url": f"https://github.test/{self.repo}/issues/{number}",
            "comments_url": f"{self._base}/issues/{number}/comments",
        }
        return number

    def add_label(self, number: int, name: str) -> None:
        labels = self.issues[number]["labels"]
        if all(label["name"] != name for label in labels):
            labels.append({"name": name, "url": f"{self._base}/labels/{name}"})

    def add_comment(self, number: int, body: str, user: str = "alice",
                    association: str | None = None) -> int:
        """A comment by ``user``; its association defaults to the one ``add_user`` gave
        them, else COLLABORATOR."""
        association = association or self.associations.get(user, "COLLABORATOR")
        comment_id = next(self._ids)
        self.comments[comment_id] = {
            "id": comment_id, "body": body, "user": self._user(user),
            "author_association": association, "issue_number": number,
            "url": f"{self._base}/issues/comments/{comment_id}",
            "html_url": f"https://github.test/{self.repo}/issues/{number}#issuecomment-{comment_id}",
            "issue_url": f"{self._base}/issues/{number}",
            "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
        }
        return comment_id

    def set_branch(self, branch: str, sha: str) -> None:
        self.branches[branch] = sha

    def add_workflow_run(self, branch: str, name: str = "CI", conclusion: str | None = "success",
                         status: str = "completed", head_repo: str | None = None) -> int:
        """A workflow run on ``branch``; ``head_repo`` names a fork it came from (default:
        this repository)."""
        run_id = next(self._ids)
        self.runs[run_id] = {
            "id": run_id, "name": name, "head_branch": branch,
            "head_repository": self._repo_ref(head_repo or self.repo),
            "head_sha": self.branches.get(branch, "0" * 40), "status": status,
            "conclusion": conclusion, "event": "push", "run_number": run_id,
            "url": f"{self._base}/actions/runs/{run_id}",
            "html_url": f"https://github.test/{self.repo}/actions/runs/{run_id}",
            "created_at": "2024-01-01T00:00:00Z", "updated_at": "2024-01-01T00:00:00Z",
        }
        return run_id

    def add_check_run(self, sha: str, name: str, conclusion: str | None = "success",
                      status: str = "completed", app: str = "ci-app") -> int:
        check_id = next(self._ids)
        self.check_runs[check_id] = {
            "id": check_id, "name": name, "head_sha": sha, "status": status,
            "conclusion": conclusion, "app": {"id": 1, "slug": app, "name": app},
            "url": f"{self._base}/check-runs/{check_id}",
            "html_url": f"https://github.test/{self.repo}/runs/{check_id}",
        }
        return check_id

    def add_check_suite(self, sha: str, conclusion: str | None = "success",
                        status: str = "completed", app: str = "ci-app") -> int:
        suite_id = next(self._ids)
        self.check_suites[suite_id] = {
            "id": suite_id, "head_sha": sha, "status": status, "conclusion": conclusion,
            "app": {"id": 1, "slug": app, "name": app},
            "url": f"{self._base}/check-suites/{suite_id}"}
        return suite_id

    def add_workflow(self, file_name: str, state: str = "active") -> None:
        assert state in WORKFLOW_STATES, state
        self.workflows[file_name] = state

    def add_artifact(self, name: str, zip_bytes: bytes, created_at: str = "2024-01-01T00:00:00Z",
                     *, expired: bool = False, run_id: int = 42,
                     retention_days: int | None = None) -> int:
        """An artifact as the upload left it. ``retention_days`` as the ``retention-days``
        input: empty or 0 means the repository default, more than the maximum is cut to it
        (as actions/upload-artifact documents); ``expires_at`` follows from it."""
        days = retention_days or self.default_retention_days
        days = max(1, min(days, self.max_retention_days))
        created = datetime.datetime.fromisoformat(created_at.replace("Z", "+00:00"))
        expires_at = (created + datetime.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")
        artifact_id = next(self._ids)
        self.blobs[artifact_id] = zip_bytes
        self.artifacts[artifact_id] = {
            "id": artifact_id, "node_id": f"A_{artifact_id}", "name": name,
            "size_in_bytes": len(zip_bytes), "expired": expired, "retention_days": days,
            "url": f"{self._base}/actions/artifacts/{artifact_id}",
            "archive_download_url": f"{self._base}/actions/artifacts/{artifact_id}/zip",
            "created_at": created_at, "updated_at": created_at, "expires_at": expires_at,
            "workflow_run": {"id": run_id, "repository_id": 1, "head_repository_id": 1,
                             "head_branch": self.default_branch, "head_sha": "0" * 40},
        }
        return artifact_id

    def upload_artifact(self, name: str, directory: Path, *, retention_days: int | None = None,
                        run_id: int = 42, created_at: str = "2024-01-01T00:00:00Z") -> int:
        """What actions/upload-artifact does with a directory: its files, zipped."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(directory.iterdir()):
                bundle.write(path, arcname=path.name)
        return self.add_artifact(name, buffer.getvalue(), created_at, run_id=run_id,
                                 retention_days=retention_days)

    def serve_git(self, origin: Path) -> str:
        """Serve the bare repository ``origin`` over smart HTTP; returns its URL. Pushes need
        a token with ``contents: write`` and meet GitHub's refusals (git_origin)."""
        git_origin.install_push_rules(origin)
        self.git_origin = origin
        return self.git_url

    @property
    def git_url(self) -> str:
        return f"{self.api_url}/{self.repo}.git"

    def fail(self, path_pattern: str, status: int, *, method: str = "*",
             times: int | None = None, after: int = 0, message: str = "") -> Failure:
        """Answer requests whose path fully matches the regex ``path_pattern`` with
        ``status``: ``times`` of them (None: all), after letting ``after`` through."""
        failure = Failure(method, re.compile(path_pattern), status, times, after,
                          message or f"injected failure {status}")
        self.failures.append(failure)
        return failure

    def fail_next(self, method: str, path_pattern: str, status: int) -> None:
        """Answer the next request matching ``method`` and the regex ``path_pattern`` with
        ``status`` (a JSON error body)."""
        self.fail(path_pattern, status, method=method, times=1)

    def to(self, path_prefix: str) -> list[Recorded]:
        """The recorded requests whose path starts with ``path_prefix``."""
        return [r for r in self.requests if r.path.startswith(path_prefix)]

    def comments_on(self, number: int) -> list[dict[str, Json]]:
        return [c for c in self.comments.values() if c["issue_number"] == number]

    # -- endpoints -----------------------------------------------------------------------------

    def _repo_ref(self, full_name: str) -> Json:
        owner, name = full_name.split("/")
        return {"id": 1 if full_name == self.repo else 2, "name": name, "full_name": full_name,
                "owner": self._user(owner), "url": f"{self.api_url}/repos/{full_name}"}

    def _repo_json(self, _: Recorded, __: re.Match[str]) -> Reply:
        return 200, {
            "id": 1, "name": self.name, "full_name": self.repo, "owner": self._user(self.owner),
            "private": False, "default_branch": self.default_branch, "url": self._base,
            "html_url": f"https://github.test/{self.repo}",
        }, {}

    def _issue(self, _: Recorded, m: re.Match[str]) -> Reply:
        issue = self.issues.get(int(m[1]))
        return (200, issue, {}) if issue else _not_found()

    def _list_comments(self, req: Recorded, m: re.Match[str]) -> Reply:
        if int(m[1]) not in self.issues:
            return _not_found()
        return self._paged(req, sorted(self.comments_on(int(m[1])), key=lambda c: c["id"]))

    def _paged(self, req: Recorded, items: list[Json], key: str | None = None) -> Reply:
        """One page of ``items`` when the request names ``per_page`` or ``page`` (with the
        Link header GitHub sends), else all of them; ``key`` wraps them as
        ``{"total_count", key: [...]}``."""
        headers: dict[str, str] = {}
        page_items = items
        if "per_page" in req.query or "page" in req.query:
            size = max(1, min(int(req.query.get("per_page", 30)), 100))
            page = max(1, int(req.query.get("page", 1)))
            page_items = items[(page - 1) * size:page * size]
            last = max(1, -(-len(items) // size))
            links = []
            for rel, number in (("next", page + 1), ("last", last)):
                if page < last:
                    query = urllib.parse.urlencode({**req.query, "page": number})
                    links.append(f'<{self.api_url}{req.path}?{query}>; rel="{rel}"')
            if links:
                headers["Link"] = ", ".join(links)
        body: Json = {"total_count": len(items), key: page_items} if key else page_items
        return 200, body, headers

    def _create_comment(self, req: Recorded, m: re.Match[str]) -> Reply:
        number = int(m[1])
        if number not in self.issues:
            return _not_found()
        body = json.loads(req.body)["body"]
        return 201, self.comments[self.add_comment(number, body, self.bot, "NONE")], {}

    def _edit_comment(self, req: Recorded, m: re.Match[str]) -> Reply:
        comment = self.comments.get(int(m[1]))
        if comment is None:
            return _not_found()
        comment["body"] = json.loads(req.body)["body"]
        comment["updated_at"] = "2024-01-02T00:00:00Z"
        return 200, comment, {}

    def _permission(self, _: Recorded, m: re.Match[str]) -> Reply:
        user = urllib.parse.unquote(m[1])
        if user not in self.collaborators:
            return _not_found()
        role = self.collaborators[user]
        # `permission` is the legacy base role (maintain → write, triage → read);
        # `role_name` the role itself, custom roles included.
        legacy = {"maintain": "write", "triage": "read"}.get(role, role)
        return 200, {"permission": legacy, "role_name": role, "user": self._user(user)}, {}

    def _list_runs(self, req: Recorded, _: re.Match[str]) -> Reply:
        runs = [r for r in self.runs.values()
                if req.query.get("branch", r["head_branch"]) == r["head_branch"]
                and req.query.get("status", r["status"]) == r["status"]]
        runs.sort(key=lambda r: -r["id"])  # GitHub lists the newest run first
        return self._paged(req, runs, "workflow_runs")

    def _branch(self, _: Recorded, m: re.Match[str]) -> Reply:
        branch = urllib.parse.unquote(m[1])
        sha = self.branches.get(branch)
        if sha is None:
            return _not_found()
        commit = {"sha": sha, "url": f"{self._base}/commits/{sha}"}
        return 200, {"name": branch, "commit": commit, "protected": False}, {}

    def _sha(self, ref: str) -> str:
        """A ref as GitHub takes it in /commits/{ref}/...: a branch name or a SHA."""
        return self.branches.get(urllib.parse.unquote(ref), ref)

    def _check_runs(self, req: Recorded, m: re.Match[str]) -> Reply:
        runs = [c for c in self.check_runs.values() if c["head_sha"] == self._sha(m[1])
                and req.query.get("status", c["status"]) == c["status"]]
        return self._paged(req, runs, "check_runs")

    def _check_suites(self, req: Recorded, m: re.Match[str]) -> Reply:
        suites = [s for s in self.check_suites.values() if s["head_sha"] == self._sha(m[1])]
        return self._paged(req, suites, "check_suites")

    def _list_pulls(self, req: Recorded, _: re.Match[str]) -> Reply:
        pulls = [p for p in self.pulls.values()
                 if req.query.get("state", "open") in (p["state"], "all")
                 and req.query.get("head", p["head"]["label"]) == p["head"]["label"]]
        return self._paged(req, pulls)

    def _create_pull(self, req: Recorded, _: re.Match[str]) -> Reply:
        data = json.loads(req.body)
        label = f"{self.owner}:{data['head']}"
        if any(p["head"]["label"] == label and p["state"] == "open" for p in self.pulls.values()):
            return 422, {"message": "Validation Failed", "errors": [
                {"message": f"A pull request already exists for {label}."}]}, {}
        return 201, self.pulls[self.add_pull(data["head"], data["title"], data.get("body"),
                                             base=data["base"], user=self.bot)], {}

    def add_pull(self, head: str, title: str, body: str | None = None, *, base: str = "main",
                 user: str = "alice", head_repo: str | None = None) -> int:
        """An open pull request from ``head`` (of ``head_repo``, default this repository).
        Like GitHub, it is an issue too: its number is shared and comments go to the issue."""
        number = next(self._numbers)
        owner = (head_repo or self.repo).split("/")[0]
        self.pulls[number] = {
            "id": number + 700_000, "number": number, "state": "open", "title": title,
            "body": body, "user": self._user(user),
            "head": {"ref": head, "label": f"{owner}:{head}", "sha": self.branches.get(head),
                     "repo": self._repo_ref(head_repo or self.repo)},
            "base": {"ref": base, "label": f"{self.owner}:{base}",
                     "repo": self._repo_ref(self.repo)},
            "url": f"{self._base}/pulls/{number}",
            "html_url": f"https://github.test/{self.repo}/pull/{number}",
        }
        self.issues[number] = {
            "id": number + 500_000, "number": number, "title": title, "body": body or "",
            "user": self._user(user), "state": "open", "labels": [],
            "url": f"{self._base}/issues/{number}",
            "html_url": f"https://github.test/{self.repo}/pull/{number}",
            "comments_url": f"{self._base}/issues/{number}/comments",
            "pull_request": {"url": f"{self._base}/pulls/{number}",
                             "html_url": f"https://github.test/{self.repo}/pull/{number}"},
        }
        return number

    def _pull(self, _: Recorded, m: re.Match[str]) -> Reply:
        pull = self.pulls.get(int(m[1]))
        return (200, pull, {}) if pull else _not_found()

    def _list_issues(self, req: Recorded, _: re.Match[str]) -> Reply:
        """Issues *and pull requests*, as GitHub lists them; ``labels`` is a comma-separated
        list that must all be present."""
        wanted = [n for n in req.query.get("labels", "").split(",") if n]
        state = req.query.get("state", "open")
        found = [i for i in self.issues.values()
                 if state in (i["state"], "all")
                 and all(n in {label["name"] for label in i["labels"]} for n in wanted)]
        return self._paged(req, sorted(found, key=lambda i: -i["number"]))

    def _workflow_name(self, key: str) -> str | None:
        """A workflow by file name or by id, as the API takes either."""
        for name in self.workflows:
            if key in (name, str(self._workflow_id(name))):
                return name
        return None

    @staticmethod
    def _workflow_id(name: str) -> int:
        return sum(ord(c) * 31**i for i, c in enumerate(name)) % 10**6

    def _workflow(self, _: Recorded, m: re.Match[str]) -> Reply:
        name = self._workflow_name(m[1])
        if name is None:
            return _not_found()
        return 200, {
            "id": self._workflow_id(name), "name": name, "path": f".github/workflows/{name}",
            "state": self.workflows[name], "url": f"{self._base}/actions/workflows/{name}",
            "html_url": f"https://github.test/{self.repo}/actions/workflows/{name}",
        }, {}

    def _switch_workflow(self, _: Recorded, m: re.Match[str]) -> Reply:
        name = self._workflow_name(m[1])
        if name is None:
            return _not_found()
        self.workflows[name] = "active" if m[2] == "enable" else "disabled_manually"
        self.workflow_changes.append((name, m[2]))
        return 204, None, {}

    def _dispatch(self, req: Recorded, m: re.Match[str]) -> Reply:
        name = self._workflow_name(m[1])
        if name is None:
            return _not_found()
        if self.workflows[name] != "active":
            return 422, {"message": "Cannot trigger a 'workflow_dispatch' on a disabled "
                                    "workflow"}, {}
        data = json.loads(req.body)
        self.dispatches.append({"workflow": name, "ref": data["ref"],
                                "inputs": data.get("inputs", {})})
        return 204, None, {}

    def _repository_dispatch(self, req: Recorded, _: re.Match[str]) -> Reply:
        data = json.loads(req.body or b"{}")
        if not isinstance(data.get("event_type"), str) or not data["event_type"]:
            return 422, {"message": "Invalid request.\n\nNo event_type provided."}, {}
        self.repository_dispatches.append({"event_type": data["event_type"],
                                           "client_payload": data.get("client_payload", {})})
        return 204, None, {}

    def _list_artifacts(self, req: Recorded, _: re.Match[str]) -> Reply:
        # Insertion order, not newest first: the client must not rely on the server's order.
        found = [a for a in self.artifacts.values()
                 if req.query.get("name", a["name"]) == a["name"]]
        return self._paged(req, found, "artifacts")

    def _artifact_zip(self, _: Recorded, m: re.Match[str]) -> Reply:
        artifact = self.artifacts.get(int(m[1]))
        if artifact is None:
            return _not_found()
        if artifact["expired"]:
            return 410, {"message": "Artifact has expired"}, {}
        return 302, None, {"Location": f"{self.api_url}/download/{m[1]}?sig=presigned"}

    def _routes(self) -> list[tuple[str, str, Callable[[Recorded, re.Match[str]], Reply]]]:
        r = "/repos/" + re.escape(self.repo)
        return [
            ("GET", rf"{r}", self._repo_json),
            ("GET", rf"{r}/issues", self._list_issues),
            ("GET", rf"{r}/issues/(\d+)", self._issue),
            ("GET", rf"{r}/issues/(\d+)/comments", self._list_comments),
            ("POST", rf"{r}/issues/(\d+)/comments", self._create_comment),
            ("PATCH", rf"{r}/issues/comments/(\d+)", self._edit_comment),
            ("GET", rf"{r}/collaborators/([^/]+)/permission", self._permission),
            ("GET", rf"{r}/actions/runs", self._list_runs),
            ("GET", rf"{r}/branches/(.+)", self._branch),
            ("GET", rf"{r}/commits/([^/]+)/check-runs", self._check_runs),
            ("GET", rf"{r}/commits/([^/]+)/check-suites", self._check_suites),
            ("GET", rf"{r}/pulls", self._list_pulls),
            ("POST", rf"{r}/pulls", self._create_pull),
            ("GET", rf"{r}/pulls/(\d+)", self._pull),
            ("GET", rf"{r}/actions/workflows/([^/]+)", self._workflow),
            ("POST", rf"{r}/actions/workflows/([^/]+)/dispatches", self._dispatch),
            ("PUT", rf"{r}/actions/workflows/([^/]+)/(enable|disable)", self._switch_workflow),
            ("POST", rf"{r}/dispatches", self._repository_dispatch),
            ("GET", rf"{r}/actions/artifacts", self._list_artifacts),
            ("GET", rf"{r}/actions/artifacts/(\d+)/zip", self._artifact_zip),
        ]

    def token_of(self, req: Recorded) -> Token | None:
        """The valid token a request carries, or None."""
        kind, _, value = req.headers.get("authorization", "").partition(" ")
        if kind.lower() == "basic":
            try:
                value = base64.b64decode(value).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                return None
        elif kind.lower() not in ("token", "bearer"):
            return None
        token = self.tokens.get(value)
        return token if token is not None and not token.expired else None

    def _refused(self, token: Token, req: Recorded) -> bool:
        """Whether a token with limited permissions lacks the one this request needs."""
        if token.permissions is None:
            return False
        rest = req.path.removeprefix(f"/repos/{self.repo}")
        for pattern, scope in SCOPES:
            if pattern.fullmatch(rest):
                have = token.permissions.get(scope, "none")
                return have == "none" or (req.method != "GET" and have != "write")
        return False

    def answer(self, req: Recorded) -> tuple[int, bytes, dict[str, str]]:
        """Route one recorded request; returns (status, body, extra headers)."""
        if self.git_origin is not None and req.path.startswith(f"/{self.repo}.git/"):
            with self._lock:
                self.requests.append(req)
                token = self.token_of(req)
            return git_origin.serve(self.git_origin, req, token, f"/{self.repo}.git")
        with self._lock:
            self.requests.append(req)
            download = re.fullmatch(r"/download/(\d+)", req.path)
            if download:  # the pre-signed blob URL: no token needed, none expected
                blob = self.blobs.get(int(download[1]))
                if blob is None:
                    return 404, b"", {}
                return 200, blob, {"Content-Type": "application/zip"}
            token = self.token_of(req)
            if token is None:
                return _encode(401, {"message": "Bad credentials"}, {})
            for failure in self.failures:
                if failure.take(req.method, req.path):
                    return _encode(failure.status, {"message": failure.message}, {})
            if self._refused(token, req):
                return _encode(403, {"message": REFUSALS[token.kind]}, {})
            for method, route, handler in self._routes():
                match = re.fullmatch(route, req.path)
                if match and method == req.method:
                    return _encode(*handler(req, match))
            return _encode(*_not_found())


def _not_found() -> Reply:
    return 404, {"message": "Not Found"}, {}


def _encode(status: int, data: Json, headers: dict[str, str]) -> tuple[int, bytes, dict[str, str]]:
    if data is None:
        return status, b"", headers
    return status, json.dumps(data).encode(), {"Content-Type": "application/json", **headers}


def _handler_for(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16  # one write per response: avoids Nagle + delayed-ACK stalls

        def _serve(self) -> None:
            split = urllib.parse.urlsplit(self.path)
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = self._chunked()  # git sends large pushes this way
            else:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
            query = {k: v[0] for k, v in urllib.parse.parse_qs(split.query).items()}
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, payload, extra = fake.answer(
                Recorded(self.command, split.path, query, headers, body))
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _chunked(self) -> bytes:
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
