"""The bench's loopback GitHub: the REST endpoints one Session's jobs reach, counted as
GitHub counts them (``rate_limit``), for the real PyGithub client.

It serves on 127.0.0.1 (a free port, a thread of its own) what a label job, a comment
wake-up, a job that listens, and the step that deletes superseded generations ask for —
issues and their comments, the collaborator permission, workflow runs and check runs of a
branch, a pull request with its reviews, artifacts with their zip behind a ``302`` — in the
JSON shapes GitHub gives. Every ``200`` to a GET carries an ``ETag``, and a GET naming it
is answered ``304``. It accepts one token and checks nothing else: the tests' fake
(``tests/fakes/github``) is the strict one, and a test holds the two to the same count for
the bench's jobs. Its state is filled with the same calls as the tests' fake
(``add_issue``, ``add_comment``, ``add_user``, ``add_artifact``, ...).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any

from rio_ci.commands.bench.loopback import LoopbackServer
from rio_ci.commands.bench.rate_limit import Counted, RateLimit, etag_of, names

__all__ = ["LoopbackGitHub"]

Json = Any
Reply = tuple[int, Json, dict[str, str]]
NOT_FOUND: Reply = (404, {"message": "Not Found"}, {})
RIO_WORKFLOW = ".github/workflows/rio.yml"
STAMP = "2024-01-01T00:00:00Z"


@dataclass(frozen=True)
class Asked:
    """A request as a handler sees it: its path, query (first values) and body."""

    path: str
    query: dict[str, str]
    body: bytes


Handler = Callable[[re.Match[str], Asked], Reply]


class LoopbackGitHub:
    """Context manager; ``api_url`` is what the client should use."""

    def __init__(self, repo: str = "octo/bench", token: str = "bench-token") -> None:
        self.repo, self.token = repo, token
        self.rate = RateLimit()
        self.issues: dict[int, Json] = {}
        self.comments: dict[int, Json] = {}
        self.collaborators: dict[str, str] = {}
        self.runs: dict[int, Json] = {}
        self.branches: dict[str, str] = {}
        self.pulls: dict[int, Json] = {}
        self.artifacts: dict[int, Json] = {}
        self.blobs: dict[int, bytes] = {}
        self._numbers = itertools.count(1)
        self._ids = itertools.count(100_001)
        self._lock = threading.Lock()
        self._http = LoopbackServer(_handler_for(self))
        self.api_url = self._http.base_url

    def __enter__(self) -> LoopbackGitHub:
        self._http.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._http.close()

    @property
    def counted(self) -> list[Counted]:
        return list(self.rate.counted)

    # -- state -------------------------------------------------------------------------------

    @property
    def _base(self) -> str:
        return f"{self.api_url}/repos/{self.repo}"

    def _user(self, login: str) -> Json:
        kind = "Bot" if login.endswith("[bot]") else "User"
        return {"login": login, "id": len(login), "type": kind, "url": f"{self.api_url}/u"}

    def _repo_ref(self) -> Json:
        owner, name = self.repo.split("/")
        return {"id": 1, "name": name, "full_name": self.repo, "owner": self._user(owner)}

    def add_user(self, login: str, role: str | None) -> None:
        if role is not None:
            self.collaborators[login] = role

    def add_issue(self, title: str, body: str = "", user: str = "alice", labels: Any = ()) -> int:
        number = next(self._numbers)
        self.issues[number] = {
            "id": number + 500_000,
            "number": number,
            "title": title,
            "body": body,
            "user": self._user(user),
            "state": "open",
            "labels": [{"name": n} for n in labels],
            "assignees": [],
            "url": f"{self._base}/issues/{number}",
            "html_url": f"https://github.test/{self.repo}/issues/{number}",
        }
        return number

    def add_comment(self, number: int, body: str, user: str = "alice") -> int:
        comment_id = next(self._ids)
        self.comments[comment_id] = {
            "id": comment_id,
            "body": body,
            "user": self._user(user),
            "author_association": "NONE" if user.endswith("[bot]") else "COLLABORATOR",
            "issue_number": number,
            "url": f"{self._base}/issues/comments/{comment_id}",
            "html_url": f"https://github.test/{self.repo}/issues/{number}#c{comment_id}",
            "created_at": STAMP,
            "updated_at": STAMP,
        }
        return comment_id

    def comments_on(self, number: int) -> list[Json]:
        return [c for c in self.comments.values() if c["issue_number"] == number]

    def add_rio_run(self, run_id: int, event: str = "workflow_dispatch") -> int:
        self.runs[run_id] = {
            "id": run_id,
            "name": "rio",
            "path": RIO_WORKFLOW,
            "event": event,
            "head_branch": "main",
            "status": "completed",
            "conclusion": "success",
            "repository": self._repo_ref(),
            "head_repository": self._repo_ref(),
            "url": f"{self._base}/actions/runs/{run_id}",
            "html_url": f"https://github.test/{self.repo}/actions/runs/{run_id}",
        }
        return run_id

    def add_pull(self, head: str, title: str, body: str | None = None) -> int:
        """An open pull request from ``head``; like GitHub, it is an issue too."""
        number = self.add_issue(title, body or "", user="github-actions[bot]")
        self.pulls[number] = {
            "id": number + 700_000,
            "number": number,
            "state": "open",
            "title": title,
            "body": body,
            "user": self._user("github-actions[bot]"),
            "head": {"ref": head, "sha": self.branches.get(head), "repo": self._repo_ref()},
            "base": {"ref": "main", "repo": self._repo_ref()},
            "url": f"{self._base}/pulls/{number}",
            "html_url": f"https://github.test/{self.repo}/pull/{number}",
        }
        return number

    def add_artifact(
        self, name: str, zip_bytes: bytes, created_at: str = STAMP, *, run_id: int = 42, **_: Any
    ) -> int:
        if run_id not in self.runs:
            self.add_rio_run(run_id)
        artifact_id = next(self._ids)
        self.blobs[artifact_id] = zip_bytes
        self.artifacts[artifact_id] = {
            "id": artifact_id,
            "name": name,
            "size_in_bytes": len(zip_bytes),
            "expired": False,
            "url": f"{self._base}/actions/artifacts/{artifact_id}",
            "archive_download_url": f"{self._base}/actions/artifacts/{artifact_id}/zip",
            "created_at": created_at,
            "updated_at": created_at,
            "expires_at": "2099-01-01T00:00:00Z",
            "workflow_run": {
                "id": run_id,
                "repository_id": 1,
                "head_repository_id": 1,
                "head_branch": "main",
            },
        }
        return artifact_id

    # -- serving -------------------------------------------------------------------------------

    def answer(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes, dict[str, str]]:
        download = re.fullmatch(r"/download/(\d+)", path)
        with self._lock:
            if download:  # the blob store: not the API, not counted
                blob = self.blobs.get(int(download[1]))
                return (404, b"", {}) if blob is None else (200, blob, {})
            reply: Reply = (401, {"message": "Bad credentials"}, {})
            if headers.get("authorization", "").partition(" ")[2] == self.token:
                reply = self._route(method, Asked(path, query, body))
            status, data, extra = reply
            raw = b"" if data is None else json.dumps(data).encode()
            if method == "GET" and status == 200:
                extra = {**extra, "ETag": etag_of(raw)}
                if names(headers.get("if-none-match"), extra["ETag"]):
                    status, raw = 304, b""
            counted = self.rate.answer(method, path, urllib.parse.urlencode(query), status)
            return status, raw, {**counted, **extra}

    def _route(self, method: str, asked: Asked) -> Reply:
        prefix = f"/repos/{self.repo}"
        if not asked.path.startswith(prefix):
            return NOT_FOUND
        rest = asked.path[len(prefix) :]
        for verb, pattern, handler in self._routes():
            match = re.fullmatch(pattern, rest)
            if match and verb == method:
                return handler(match, asked)
        return NOT_FOUND

    def _routes(self) -> list[tuple[str, str, Handler]]:
        return [
            ("GET", r"", lambda m, a: (200, {**self._repo_ref(), "default_branch": "main"}, {})),
            ("GET", r"/collaborators/([^/]+)/permission", self._permission),
            ("GET", r"/issues/(\d+)", self._issue),
            ("GET", r"/issues/(\d+)/comments", self._list_comments),
            ("POST", r"/issues/(\d+)/comments", self._create_comment),
            ("PATCH", r"/issues/comments/(\d+)", self._edit_comment),
            ("POST", r"/issues/comments/(\d+)/reactions", self._react),
            ("GET", r"/branches/(.+)", self._branch),
            ("GET", r"/actions/runs", self._list_runs),
            ("GET", r"/actions/runs/(\d+)", self._run),
            ("GET", r"/commits/([^/]+)/check-runs", lambda m, a: self._paged(a, [], "check_runs")),
            ("GET", r"/pulls", self._list_pulls),
            ("GET", r"/pulls/(\d+)", self._pull),
            ("GET", r"/pulls/(\d+)/reviews", lambda m, a: self._paged(a, [])),
            ("GET", r"/pulls/(\d+)/comments", lambda m, a: self._paged(a, [])),
            ("GET", r"/actions/artifacts", self._list_artifacts),
            ("GET", r"/actions/artifacts/(\d+)", self._artifact),
            ("DELETE", r"/actions/artifacts/(\d+)", self._delete_artifact),
            ("GET", r"/actions/artifacts/(\d+)/zip", self._zip),
        ]

    def _paged(self, asked: Asked, items: list[Json], key: str | None = None) -> Reply:
        """One page of ``items`` with GitHub's Link header when the query names ``per_page``
        or ``page``; ``key`` wraps them as ``{"total_count", key: [...]}``."""
        page_items, headers, query = items, {}, asked.query
        if "per_page" in query or "page" in query:
            size = max(1, min(int(query.get("per_page", 30)), 100))
            page = max(1, int(query.get("page", 1)))
            page_items = items[(page - 1) * size : page * size]
            if page * size < len(items):
                following = urllib.parse.urlencode({**query, "page": page + 1})
                headers["Link"] = f'<{self.api_url}{asked.path}?{following}>; rel="next"'
        body: Json = {"total_count": len(items), key: page_items} if key else page_items
        return 200, body, headers

    def _permission(self, m: re.Match[str], a: Asked) -> Reply:
        role = self.collaborators.get(urllib.parse.unquote(m[1]))
        if role is None:
            return NOT_FOUND
        return 200, {"permission": role, "role_name": role, "user": self._user(m[1])}, {}

    def _issue(self, m: re.Match[str], a: Asked) -> Reply:
        issue = self.issues.get(int(m[1]))
        if issue is None:
            return NOT_FOUND
        return 200, {**issue, "comments": len(self.comments_on(int(m[1])))}, {}

    def _list_comments(self, m: re.Match[str], a: Asked) -> Reply:
        return self._paged(a, sorted(self.comments_on(int(m[1])), key=lambda c: c["id"]))

    def _create_comment(self, m: re.Match[str], a: Asked) -> Reply:
        made = self.add_comment(int(m[1]), json.loads(a.body)["body"], "github-actions[bot]")
        return 201, self.comments[made], {}

    def _edit_comment(self, m: re.Match[str], a: Asked) -> Reply:
        comment = self.comments.get(int(m[1]))
        if comment is None:
            return NOT_FOUND
        comment["body"] = json.loads(a.body)["body"]
        return 200, comment, {}

    def _react(self, m: re.Match[str], a: Asked) -> Reply:
        """An eyes reaction on a comment the job took in: 201 with the reaction."""
        if int(m[1]) not in self.comments:
            return NOT_FOUND
        content = json.loads(a.body).get("content")
        return 201, {"id": int(m[1]), "content": content, "user": self._user("rio[bot]")}, {}

    def _branch(self, m: re.Match[str], a: Asked) -> Reply:
        sha = self.branches.get(urllib.parse.unquote(m[1]))
        if sha is None:
            return 404, {"message": "Branch not found"}, {}
        return 200, {"name": m[1], "commit": {"sha": sha, "url": f"{self._base}/commits/{sha}"}}, {}

    def _list_runs(self, m: re.Match[str], a: Asked) -> Reply:
        runs = [
            r
            for r in self.runs.values()
            if a.query.get("branch", r["head_branch"]) == r["head_branch"]
        ]
        return self._paged(a, sorted(runs, key=lambda r: -r["id"]), "workflow_runs")

    def _run(self, m: re.Match[str], a: Asked) -> Reply:
        run = self.runs.get(int(m[1]))
        return (200, run, {}) if run else NOT_FOUND

    def _list_pulls(self, m: re.Match[str], a: Asked) -> Reply:
        owner = self.repo.split("/")[0]
        pulls = [
            p
            for p in self.pulls.values()
            if a.query.get("head", f"{owner}:{p['head']['ref']}") == f"{owner}:{p['head']['ref']}"
        ]
        return self._paged(a, pulls)

    def _pull(self, m: re.Match[str], a: Asked) -> Reply:
        pull = self.pulls.get(int(m[1]))
        if pull is None:
            return NOT_FOUND
        counts = {"comments": len(self.comments_on(int(m[1]))), "review_comments": 0}
        return 200, {**pull, **counts}, {}

    def _list_artifacts(self, m: re.Match[str], a: Asked) -> Reply:
        wanted = a.query.get("name")
        found = [x for x in self.artifacts.values() if wanted in (None, x["name"])]
        return self._paged(a, found, "artifacts")

    def _artifact(self, m: re.Match[str], a: Asked) -> Reply:
        artifact = self.artifacts.get(int(m[1]))
        return (200, artifact, {}) if artifact else NOT_FOUND

    def _delete_artifact(self, m: re.Match[str], a: Asked) -> Reply:
        if self.artifacts.pop(int(m[1]), None) is None:
            return NOT_FOUND
        self.blobs.pop(int(m[1]), None)
        return 204, None, {}

    def _zip(self, m: re.Match[str], a: Asked) -> Reply:
        if int(m[1]) not in self.artifacts:
            return NOT_FOUND
        return 302, None, {"Location": f"{self.api_url}/download/{m[1]}"}


def _handler_for(github: LoopbackGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16

        def _serve(self) -> None:
            split = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            query = {k: v[0] for k, v in urllib.parse.parse_qs(split.query).items()}
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, payload, extra = github.answer(self.command, split.path, query, headers, body)
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            if payload:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
