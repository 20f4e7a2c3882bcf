"""A small stateful fake of the GitHub REST API, served over real HTTP on 127.0.0.1.

It answers the endpoints rio_ci's GitHubForge reaches through PyGithub, in the JSON shapes
PyGithub parses (every object carries its ``url`` so PyGithub never has to "complete" it with a
second request). State lives in plain dicts that tests fill through ``add_*`` helpers and read
back directly. Every request is recorded in ``requests`` (method, path, query, lower-cased
headers, body) so a test can check where the token went.

API paths require ``Authorization: token <token>`` or ``Bearer <token>`` (401 otherwise);
``/download/<id>`` stands for GitHub's pre-signed blob URL and requires nothing.
Lists come back as one page without a Link header.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Json = Any
Reply = tuple[int, Json, dict[str, str]]


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    body: bytes


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
        self.issues: dict[int, dict[str, Json]] = {}
        self.comments: dict[int, dict[str, Json]] = {}
        self.pulls: dict[int, dict[str, Json]] = {}
        self.runs: dict[int, dict[str, Json]] = {}
        self.branches: dict[str, str] = {}
        self.check_runs: dict[int, dict[str, Json]] = {}
        self.workflows: set[str] = set()
        self.dispatches: list[dict[str, Json]] = []
        self.artifacts: dict[int, dict[str, Json]] = {}
        self.blobs: dict[int, bytes] = {}
        self._failures: list[tuple[str, re.Pattern[str], int]] = []
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
                    association: str = "COLLABORATOR") -> int:
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

    def add_workflow(self, file_name: str) -> None:
        self.workflows.add(file_name)

    def add_artifact(self, name: str, zip_bytes: bytes, created_at: str = "2024-01-01T00:00:00Z",
                     *, expired: bool = False, run_id: int = 42) -> int:
        artifact_id = next(self._ids)
        self.blobs[artifact_id] = zip_bytes
        self.artifacts[artifact_id] = {
            "id": artifact_id, "node_id": f"A_{artifact_id}", "name": name,
            "size_in_bytes": len(zip_bytes), "expired": expired,
            "url": f"{self._base}/actions/artifacts/{artifact_id}",
            "archive_download_url": f"{self._base}/actions/artifacts/{artifact_id}/zip",
            "created_at": created_at, "updated_at": created_at, "expires_at": created_at,
            "workflow_run": {"id": run_id, "repository_id": 1, "head_repository_id": 1,
                             "head_branch": self.default_branch, "head_sha": "0" * 40},
        }
        return artifact_id

    def fail_next(self, method: str, path_pattern: str, status: int) -> None:
        """Answer the next request matching ``method`` and the regex ``path_pattern`` with
        ``status`` (a JSON error body)."""
        self._failures.append((method, re.compile(path_pattern), status))

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

    def _list_comments(self, _: Recorded, m: re.Match[str]) -> Reply:
        if int(m[1]) not in self.issues:
            return _not_found()
        return 200, sorted(self.comments_on(int(m[1])), key=lambda c: c["id"]), {}

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
        level = self.collaborators[user]
        return 200, {"permission": level, "role_name": level, "user": self._user(user)}, {}

    def _list_runs(self, req: Recorded, _: re.Match[str]) -> Reply:
        runs = [r for r in self.runs.values()
                if req.query.get("branch", r["head_branch"]) == r["head_branch"]
                and req.query.get("status", r["status"]) == r["status"]]
        runs.sort(key=lambda r: -r["id"])  # GitHub lists the newest run first
        return 200, {"total_count": len(runs), "workflow_runs": runs}, {}

    def _branch(self, _: Recorded, m: re.Match[str]) -> Reply:
        branch = urllib.parse.unquote(m[1])
        sha = self.branches.get(branch)
        if sha is None:
            return _not_found()
        commit = {"sha": sha, "url": f"{self._base}/commits/{sha}"}
        return 200, {"name": branch, "commit": commit, "protected": False}, {}

    def _check_runs(self, req: Recorded, m: re.Match[str]) -> Reply:
        runs = [c for c in self.check_runs.values() if c["head_sha"] == m[1]
                and req.query.get("status", c["status"]) == c["status"]]
        return 200, {"total_count": len(runs), "check_runs": runs}, {}

    def _list_pulls(self, req: Recorded, _: re.Match[str]) -> Reply:
        pulls = [p for p in self.pulls.values()
                 if req.query.get("state", "open") in (p["state"], "all")
                 and req.query.get("head", p["head"]["label"]) == p["head"]["label"]]
        return 200, pulls, {}

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
        return 200, sorted(found, key=lambda i: -i["number"]), {}

    def _workflow(self, _: Recorded, m: re.Match[str]) -> Reply:
        if m[1] not in self.workflows:
            return _not_found()
        return 200, {
            "id": abs(hash(m[1])) % 10**6, "name": m[1], "path": f".github/workflows/{m[1]}",
            "state": "active", "url": f"{self._base}/actions/workflows/{m[1]}",
            "html_url": f"https://github.test/{self.repo}/actions/workflows/{m[1]}",
        }, {}

    def _dispatch(self, req: Recorded, m: re.Match[str]) -> Reply:
        if m[1] not in self.workflows:
            return _not_found()
        data = json.loads(req.body)
        self.dispatches.append({"workflow": m[1], "ref": data["ref"],
                                "inputs": data.get("inputs", {})})
        return 204, None, {}

    def _list_artifacts(self, req: Recorded, _: re.Match[str]) -> Reply:
        # Insertion order, not newest first: the client must not rely on the server's order.
        found = [a for a in self.artifacts.values()
                 if req.query.get("name", a["name"]) == a["name"]]
        return 200, {"total_count": len(found), "artifacts": found}, {}

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
            ("GET", rf"{r}/commits/([0-9a-f]+)/check-runs", self._check_runs),
            ("GET", rf"{r}/pulls", self._list_pulls),
            ("POST", rf"{r}/pulls", self._create_pull),
            ("GET", rf"{r}/pulls/(\d+)", self._pull),
            ("GET", rf"{r}/actions/workflows/([^/]+)", self._workflow),
            ("POST", rf"{r}/actions/workflows/([^/]+)/dispatches", self._dispatch),
            ("GET", rf"{r}/actions/artifacts", self._list_artifacts),
            ("GET", rf"{r}/actions/artifacts/(\d+)/zip", self._artifact_zip),
        ]

    def answer(self, req: Recorded) -> tuple[int, bytes, dict[str, str]]:
        """Route one recorded request; returns (status, body, extra headers)."""
        with self._lock:
            self.requests.append(req)
            download = re.fullmatch(r"/download/(\d+)", req.path)
            if download:  # the pre-signed blob URL: no token needed, none expected
                blob = self.blobs.get(int(download[1]))
                if blob is None:
                    return 404, b"", {}
                return 200, blob, {"Content-Type": "application/zip"}
            auth = req.headers.get("authorization", "")
            if auth not in (f"token {self.token}", f"Bearer {self.token}"):
                return _encode(401, {"message": "Bad credentials"}, {})
            for index, (method, pattern, status) in enumerate(self._failures):
                if method == req.method and pattern.fullmatch(req.path):
                    del self._failures[index]
                    return _encode(status, {"message": f"injected failure {status}"}, {})
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

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
