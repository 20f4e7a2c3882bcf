"""The fake's state and the helpers tests use to fill it (issues, comments, users, tokens,
runs, checks, workflows, artifacts, pull requests) and to switch on what GitHub does."""

from __future__ import annotations

import datetime
import io
import itertools
import re
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

from fakes import git_origin
from fakes.github.base import WORKFLOW_STATES, Failure, Json, Recorded, Token
from rio_ci.commands.bench.rate_limit import PRIMARY, SECONDARY, Counted, RateLimit

RIO_WORKFLOW = ".github/workflows/rio.yml"


class GitHubData:
    """What the fake knows; ``FakeGitHub`` serves it."""

    def __init__(
        self,
        repo: str = "octo/demo",
        *,
        token: str = "fake-token",
        default_branch: str = "main",
        bot: str = "github-actions[bot]",
    ) -> None:
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
        self.reactions: dict[int, list[dict[str, Json]]] = {}  # comment id → its reactions
        # each issue's labels and assignees put on and taken off, oldest first, in the shape
        # of GET .../issues/{n}/timeline (which adds the issue's comments)
        self.issue_events: dict[int, list[dict[str, Json]]] = {}
        self.pulls: dict[int, dict[str, Json]] = {}
        self.reviews: dict[int, dict[str, Json]] = {}
        self.review_comments: dict[int, dict[str, Json]] = {}
        self.not_modified: list[Recorded] = []  # GETs answered 304 (free of rate limit)
        self.rate = RateLimit()  # what counts against the token's budget, as GitHub counts
        self.runs: dict[int, dict[str, Json]] = {}
        self.branches: dict[str, str] = {}
        self.check_runs: dict[int, dict[str, Json]] = {}
        self.check_suites: dict[int, dict[str, Json]] = {}
        self.workflows: dict[str, str] = {}  # file name → state
        self.no_dispatch: set[str] = set()  # workflows whose file has no workflow_dispatch
        self.workflow_names: dict[str, str] = {}  # file name → the workflow's `name:`
        self.labels: set[str] = set()  # the repository's labels (Issues → Labels)
        # Settings → Actions → General: "Allow GitHub Actions to create and approve pull
        # requests" (the workflow permissions API's can_approve_pull_request_reviews)
        self.actions_open_pulls = True
        self.workflow_changes: list[tuple[str, str]] = []  # (file name, enable | disable)
        self.dispatches: list[dict[str, Json]] = []
        self.repository_dispatches: list[dict[str, Json]] = []
        self.artifacts: dict[int, dict[str, Json]] = {}
        self.blobs: dict[int, bytes] = {}
        self.gone: set[int] = set()  # artifacts whose download answers 410 Gone
        self.deleted: list[int] = []  # artifacts deleted through the API, in order
        # user attachments (issue / comment pictures) at /user-attachments/assets/<id>:
        # (bytes, the Content-Type it claims); or a redirect to a Location
        self.attachments: dict[str, tuple[bytes, str]] = {}
        self.attachment_redirects: dict[str, str] = {}
        self.default_retention_days = 90
        self.max_retention_days = 90  # public repositories: 1 to 90 days
        self.git_origin: Path | None = None
        self.failures: list[Failure] = []
        # Called with every request before it is answered (API and git alike): a test's
        # way to look at the world at the moment of a client's first call.
        self.observers: list[Callable[[Recorded], None]] = []
        self._numbers = itertools.count(1)
        # Far above the run ids tests give jobs (1000 + n), so no object takes a job's id.
        self._ids = itertools.count(100_001)
        self._lock = threading.Lock()

    # -- state helpers -------------------------------------------------------------------------

    def _user(self, login: str) -> Json:
        kind = "Bot" if login.endswith("[bot]") else "User"
        return {
            "login": login,
            "id": abs(hash(login)) % 10**6,
            "type": kind,
            "url": f"{self.api_url}/users/{login}",
            "html_url": f"https://github.test/{login}",
        }

    @property
    def _base(self) -> str:
        return f"{self.api_url}/repos/{self.repo}"

    def add_collaborator(self, user: str, permission: str) -> None:
        self.collaborators[user] = permission

    def add_user(
        self, login: str, role: str | None, *, member: bool = False, association: str | None = None
    ) -> None:
        """A person as GitHub sees them: ``role`` on this repository (``admin``, ``maintain``,
        ``write``, ``triage``, ``read`` or a custom role; None: no access), and whether they
        are a member of the owning organization. Their comments carry ``association`` or
        what GitHub derives (MEMBER for members, COLLABORATOR for collaborators, else NONE);
        neither says whether they may write."""
        if role is not None:
            self.collaborators[login] = role
        self.associations[login] = association or (
            "MEMBER" if member else "COLLABORATOR" if role is not None else "NONE"
        )

    def add_token(
        self,
        token: str,
        *,
        permissions: dict[str, str] | None = None,
        workflows: bool = False,
        kind: str = "app",
    ) -> Token:
        """Another accepted token (an app installation token, a fine-grained PAT, a job
        token with limited ``permissions``)."""
        self.tokens[token] = Token(permissions, workflows, kind)
        return self.tokens[token]

    def expire_token(self, token: str | None = None) -> None:
        """From now on ``token`` (default: the main one) gets 401, on the API and over git."""
        self.tokens[token or self.token].expired = True

    def add_issue(
        self,
        title: str,
        body: str = "",
        user: str = "alice",
        labels: tuple[str, ...] = (),
        state: str = "open",
    ) -> int:
        number = next(self._numbers)
        self.issues[number] = {
            "id": number + 500_000,
            "number": number,
            "title": title,
            "body": body,
            "user": self._user(user),
            "state": state,
            "labels": [{"name": n, "url": f"{self._base}/labels/{n}"} for n in labels],
            "url": f"{self._base}/issues/{number}",
            "html_url": f"https://github.test/{self.repo}/issues/{number}",
            "comments_url": f"{self._base}/issues/{number}/comments",
            "assignees": [],
        }
        for name in labels:  # GitHub records labels given at creation as its author's
            self._record(number, "labeled", user, label=name)
        return number

    def add_label(
        self, number: int, name: str, by: str | None = None, at: str = "2024-01-01T00:00:00Z"
    ) -> None:
        """``by`` (default: the bot, as when rio-ci labels through the API) puts the label on
        issue ``number``; a ``labeled`` event in its history says who and when."""
        labels = self.issues[number]["labels"]
        if all(label["name"] != name for label in labels):
            labels.append({"name": name, "url": f"{self._base}/labels/{name}"})
            self._record(number, "labeled", by or self.bot, at, label=name)

    def remove_label(self, number: int, name: str, by: str = "alice") -> None:
        labels = self.issues[number]["labels"]
        if any(label["name"] == name for label in labels):
            labels[:] = [label for label in labels if label["name"] != name]
            self._record(number, "unlabeled", by, label=name)

    def assign(self, number: int, login: str, by: str, *, undo: bool = False) -> None:
        """``by`` assigns issue ``number`` to ``login`` (``undo``: unassigns); the timeline
        entry names ``by`` as its ``actor`` and ``login`` as its ``assignee``."""
        assignees = self.issues[number].setdefault("assignees", [])
        if undo:
            assignees[:] = [a for a in assignees if a["login"] != login]
        elif all(a["login"] != login for a in assignees):
            assignees.append(self._user(login))
        self._record(number, "unassigned" if undo else "assigned", by, assignee=login)

    def _record(
        self,
        number: int,
        kind: str,
        actor: str,
        at: str = "2024-01-01T00:00:00Z",
        *,
        label: str | None = None,
        assignee: str | None = None,
    ) -> None:
        """One entry of the issue's timeline in the shape GitHub gives (docs.github.com
        "Issue event types"): ``label`` {name, color} for label events, ``assignee`` for
        assignment events (the timeline carries no ``assigner``: ``actor`` made it)."""
        event_id = next(self._ids)
        event: dict[str, Json] = {
            "id": event_id,
            "node_id": f"IE_{event_id}",
            "url": f"{self._base}/issues/events/{event_id}",
            "actor": self._user(actor),
            "event": kind,
            "commit_id": None,
            "commit_url": None,
            "created_at": at,
            "performed_via_github_app": None,
        }
        if label is not None:
            event["label"] = {"name": label, "color": "ededed"}
        if assignee is not None:
            event["assignee"] = self._user(assignee)
        self.issue_events.setdefault(number, []).append(event)

    def add_comment(
        self, number: int, body: str, user: str = "alice", association: str | None = None
    ) -> int:
        """A comment by ``user``; its association defaults to the one ``add_user`` gave
        them, else COLLABORATOR."""
        association = association or self.associations.get(user, "COLLABORATOR")
        comment_id = next(self._ids)
        self.comments[comment_id] = {
            "id": comment_id,
            "body": body,
            "user": self._user(user),
            "author_association": association,
            "issue_number": number,
            "url": f"{self._base}/issues/comments/{comment_id}",
            "html_url": f"https://github.test/{self.repo}/issues/{number}#issuecomment-{comment_id}",
            "issue_url": f"{self._base}/issues/{number}",
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
        }
        return comment_id

    def add_review(
        self,
        pull: int,
        user: str = "alice",
        state: str = "COMMENTED",
        body: str = "",
        comments: list[dict[str, Json]] | tuple[dict[str, Json], ...] = (),
    ) -> int:
        """A review submitted on pull request ``pull`` with its inline ``comments`` (each
        ``{"path", "line", "body"}`` and optionally ``"side"``); ``state`` PENDING is a review
        not submitted yet, which GitHub shows its author only (so never listed here)."""
        review_id = next(self._ids)
        self.reviews[review_id] = {
            "id": review_id,
            "node_id": f"PRR_{review_id}",
            "user": self._user(user),
            "body": body,
            "state": state,
            "author_association": self.associations.get(user, "COLLABORATOR"),
            "commit_id": self.pulls[pull]["head"]["sha"] or "0" * 40,
            "pull_request_number": pull,
            "html_url": f"https://github.test/{self.repo}/pull/{pull}#pullrequestreview-{review_id}",
            "pull_request_url": f"{self._base}/pulls/{pull}",
            "submitted_at": None if state == "PENDING" else "2024-01-01T00:00:00Z",
        }
        for comment in comments:
            self._add_review_comment(pull, review_id, user, comment)
        return review_id

    def add_review_comment(
        self, pull: int, path: str, line: int, body: str, user: str = "alice", side: str = "RIGHT"
    ) -> int:
        """A lone inline comment ("Add single comment"): GitHub wraps it in a review of its
        own, COMMENTED with an empty body. Returns the comment's id."""
        review_id = self.add_review(pull, user)
        return self._add_review_comment(
            pull, review_id, user, {"path": path, "line": line, "body": body, "side": side}
        )

    def _add_review_comment(
        self, pull: int, review_id: int, user: str, comment: dict[str, Json]
    ) -> int:
        comment_id = next(self._ids)
        line = comment.get("line")
        self.review_comments[comment_id] = {
            "id": comment_id,
            "node_id": f"PRRC_{comment_id}",
            "pull_request_review_id": review_id,
            "pull_request_number": pull,
            "path": comment["path"],
            "line": line,
            "original_line": line,
            "side": comment.get("side", "RIGHT"),
            "position": 1,
            "original_position": 1,
            "diff_hunk": comment.get("diff_hunk", f"@@ -1,3 +1,4 @@ {comment['path']}"),
            "body": comment["body"],
            "user": self._user(user),
            "author_association": self.associations.get(user, "COLLABORATOR"),
            "commit_id": "0" * 40,
            "original_commit_id": "0" * 40,
            "url": f"{self._base}/pulls/comments/{comment_id}",
            "html_url": f"https://github.test/{self.repo}/pull/{pull}#discussion_r{comment_id}",
            "pull_request_url": f"{self._base}/pulls/{pull}",
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
        }
        return comment_id

    def set_branch(self, branch: str, sha: str) -> None:
        self.branches[branch] = sha

    def add_workflow_run(
        self,
        branch: str,
        name: str = "CI",
        conclusion: str | None = "success",
        status: str = "completed",
        head_repo: str | None = None,
        *,
        path: str = ".github/workflows/ci.yml",
        event: str = "push",
        run_id: int | None = None,
    ) -> int:
        """A workflow run on ``branch`` of the workflow file ``path``, started by ``event``;
        ``head_repo`` names a fork it came from (default: this repository; a fork's
        ``pull_request`` run still runs in this repository, as on GitHub)."""
        run_id = next(self._ids) if run_id is None else run_id
        self.runs[run_id] = {
            "id": run_id,
            "name": name,
            "path": path,
            "head_branch": branch,
            "repository": self._repo_ref(self.repo),
            "head_repository": self._repo_ref(head_repo or self.repo),
            "head_repository_id": self._repo_ref(head_repo or self.repo)["id"],
            "head_sha": self.branches.get(branch, "0" * 40),
            "status": status,
            "conclusion": conclusion,
            "event": event,
            "run_number": run_id,
            "url": f"{self._base}/actions/runs/{run_id}",
            "html_url": f"https://github.test/{self.repo}/actions/runs/{run_id}",
            "created_at": "2024-01-01T00:00:00Z",
            "updated_at": "2024-01-01T00:00:00Z",
        }
        return run_id

    def add_rio_run(self, run_id: int, event: str = "workflow_dispatch") -> int:
        """A run of this repository's ``.github/workflows/rio.yml`` (rio's own job)."""
        return self.add_workflow_run(
            self.default_branch,
            "rio",
            path=RIO_WORKFLOW,
            event=event,
            run_id=run_id,
        )

    def add_foreign_run(self, kind: str) -> int:
        """A run whose artifacts rio must never restore: ``fork`` (a ``pull_request`` run
        of a fork's head, of rio.yml as the fork changed it), ``target`` (a
        ``pull_request_target`` run), or ``workflow`` (another workflow of this
        repository, on a push)."""
        if kind == "fork":
            return self.add_workflow_run(
                "patch-1", "rio", head_repo="mallory/demo", path=RIO_WORKFLOW, event="pull_request"
            )
        if kind == "target":
            return self.add_workflow_run(
                self.default_branch, "rio", path=RIO_WORKFLOW, event="pull_request_target"
            )
        assert kind == "workflow", kind
        return self.add_workflow_run(self.default_branch, "CI", path=".github/workflows/ci.yml")

    def add_check_run(
        self,
        sha: str,
        name: str,
        conclusion: str | None = "success",
        status: str = "completed",
        app: str = "ci-app",
    ) -> int:
        check_id = next(self._ids)
        self.check_runs[check_id] = {
            "id": check_id,
            "name": name,
            "head_sha": sha,
            "status": status,
            "conclusion": conclusion,
            "app": {"id": 1, "slug": app, "name": app},
            "url": f"{self._base}/check-runs/{check_id}",
            "html_url": f"https://github.test/{self.repo}/runs/{check_id}",
        }
        return check_id

    def add_check_suite(
        self,
        sha: str,
        conclusion: str | None = "success",
        status: str = "completed",
        app: str = "ci-app",
    ) -> int:
        suite_id = next(self._ids)
        self.check_suites[suite_id] = {
            "id": suite_id,
            "head_sha": sha,
            "status": status,
            "conclusion": conclusion,
            "app": {"id": 1, "slug": app, "name": app},
            "url": f"{self._base}/check-suites/{suite_id}",
        }
        return suite_id

    def add_workflow(
        self,
        file_name: str,
        state: str = "active",
        *,
        dispatch: bool = True,
        name: str | None = None,
    ) -> None:
        """A workflow file in ``.github/workflows/`` whose ``name:`` is ``name`` (default: the
        file name); ``dispatch=False``: its ``on:`` has no ``workflow_dispatch`` (GitHub then
        refuses to dispatch it)."""
        assert state in WORKFLOW_STATES, state
        self.workflows[file_name] = state
        self.workflow_names[file_name] = name or file_name
        if not dispatch:
            self.no_dispatch.add(file_name)

    def add_repo_label(self, name: str) -> None:
        """A label of the repository (an issue's labels need not be among them)."""
        self.labels.add(name)

    def set_retention(self, days: int) -> None:
        """The repository's artifact retention setting: the default retention of an upload and
        the most ``retention-days`` may ask for (what the runner reports as
        ``GITHUB_RETENTION_DAYS``)."""
        self.default_retention_days = self.max_retention_days = days

    def add_artifact(
        self,
        name: str,
        zip_bytes: bytes,
        created_at: str = "2024-01-01T00:00:00Z",
        *,
        expired: bool = False,
        run_id: int = 42,
        retention_days: int | None = None,
    ) -> int:
        """An artifact as the upload left it. ``retention_days`` as the ``retention-days``
        input: empty or 0 means the repository default, more than the maximum is cut to it
        (as actions/upload-artifact documents); ``expires_at`` follows from it."""
        days = retention_days or self.default_retention_days
        days = max(1, min(days, self.max_retention_days))
        created = datetime.datetime.fromisoformat(created_at.replace("Z", "+00:00"))
        expires_at = (created + datetime.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")
        if run_id not in self.runs:  # an upload without a named run: rio's own job's
            self.add_rio_run(run_id)
        run = self.runs[run_id]
        artifact_id = next(self._ids)
        self.blobs[artifact_id] = zip_bytes
        self.artifacts[artifact_id] = {
            "id": artifact_id,
            "node_id": f"A_{artifact_id}",
            "name": name,
            "size_in_bytes": len(zip_bytes),
            "expired": expired,
            "retention_days": days,
            "url": f"{self._base}/actions/artifacts/{artifact_id}",
            "archive_download_url": f"{self._base}/actions/artifacts/{artifact_id}/zip",
            "created_at": created_at,
            "updated_at": created_at,
            "expires_at": expires_at,
            "workflow_run": {
                "id": run_id,
                "repository_id": run["repository"]["id"],
                "head_repository_id": run["head_repository"]["id"],
                "head_branch": run["head_branch"],
                "head_sha": run["head_sha"],
            },
        }
        return artifact_id

    def expire_artifact(self, artifact_id: int, *, listed: bool = True) -> None:
        """The artifact passes its retention: its download answers 410 Gone. With
        ``listed=False`` the listing still shows it unexpired (it lags the storage)."""
        self.gone.add(artifact_id)
        if listed:
            self.artifacts[artifact_id]["expired"] = True

    def upload_artifact(
        self,
        name: str,
        directory: Path,
        *,
        retention_days: int | None = None,
        run_id: int = 42,
        created_at: str = "2024-01-01T00:00:00Z",
    ) -> int:
        """What actions/upload-artifact does with a directory: its files, zipped."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(directory.iterdir()):
                bundle.write(path, arcname=path.name)
        return self.add_artifact(
            name, buffer.getvalue(), created_at, run_id=run_id, retention_days=retention_days
        )

    def serve_git(self, origin: Path) -> str:
        """Serve the bare repository ``origin`` over smart HTTP; returns its URL. Pushes need
        a token with ``contents: write`` and meet GitHub's refusals (git_origin)."""
        git_origin.install_push_rules(origin)
        self.git_origin = origin
        return self.git_url

    @property
    def git_url(self) -> str:
        return f"{self.api_url}/{self.repo}.git"

    def fail(
        self,
        path_pattern: str,
        status: int,
        *,
        method: str = "*",
        times: int | None = None,
        after: int = 0,
        message: str = "",
    ) -> Failure:
        """Answer requests whose path fully matches the regex ``path_pattern`` with
        ``status``: ``times`` of them (None: all), after letting ``after`` through."""
        failure = Failure(
            method,
            re.compile(path_pattern),
            status,
            times,
            after,
            message or f"injected failure {status}",
        )
        self.failures.append(failure)
        return failure

    def limit_rate(
        self,
        path_pattern: str,
        *,
        times: int,
        status: int = 403,
        method: str = "*",
        retry_after: int | None = None,
        reset_in: float | None = None,
    ) -> Failure:
        """Answer the next ``times`` requests matching ``path_pattern`` as GitHub answers a
        rate limit: ``status`` (403 or 429) with ``retry-after`` (a secondary limit) or with
        ``x-ratelimit-remaining: 0`` and an ``x-ratelimit-reset`` ``reset_in`` seconds from
        now (the primary limit), or neither (a secondary limit that names no time)."""
        failure = self.fail(
            path_pattern,
            status,
            method=method,
            times=times,
            message=PRIMARY if reset_in is not None and retry_after is None else SECONDARY,
        )
        failure.retry_after, failure.reset_in = retry_after, reset_in
        return failure

    @property
    def counted(self) -> list[Counted]:
        """The requests that counted against the rate limit, in order."""
        return list(self.rate.counted)

    def fail_next(self, method: str, path_pattern: str, status: int) -> None:
        """Answer the next request matching ``method`` and the regex ``path_pattern`` with
        ``status`` (a JSON error body)."""
        self.fail(path_pattern, status, method=method, times=1)

    def to(self, path_prefix: str) -> list[Recorded]:
        """The recorded requests whose path starts with ``path_prefix``."""
        return [r for r in self.requests if r.path.startswith(path_prefix)]

    def comments_on(self, number: int) -> list[dict[str, Json]]:
        return [c for c in self.comments.values() if c["issue_number"] == number]

    def _repo_ref(self, full_name: str) -> Json:
        owner, name = full_name.split("/")
        return {
            "id": 1 if full_name == self.repo else 2,
            "name": name,
            "full_name": full_name,
            "owner": self._user(owner),
            "url": f"{self.api_url}/repos/{full_name}",
        }

    def merge_pull(self, number: int) -> None:
        """The pull request is merged and closed (delete its branch in the origin with git,
        as GitHub's "delete branch after merge" does)."""
        self.pulls[number].update(state="closed", merged=True)
        self.issues[number]["state"] = "closed"

    def add_pull(
        self,
        head: str,
        title: str,
        body: str | None = None,
        *,
        base: str = "main",
        user: str = "alice",
        head_repo: str | None = None,
    ) -> int:
        """An open pull request from ``head`` (of ``head_repo``, default this repository).
        Like GitHub, it is an issue too: its number is shared and comments go to the issue."""
        number = next(self._numbers)
        owner = (head_repo or self.repo).split("/")[0]
        self.pulls[number] = {
            "id": number + 700_000,
            "number": number,
            "state": "open",
            "title": title,
            "body": body,
            "user": self._user(user),
            "head": {
                "ref": head,
                "label": f"{owner}:{head}",
                "sha": self.branches.get(head),
                "repo": self._repo_ref(head_repo or self.repo),
            },
            "base": {
                "ref": base,
                "label": f"{self.owner}:{base}",
                "repo": self._repo_ref(self.repo),
            },
            "url": f"{self._base}/pulls/{number}",
            "html_url": f"https://github.test/{self.repo}/pull/{number}",
        }
        self.issues[number] = {
            "id": number + 500_000,
            "number": number,
            "title": title,
            "body": body or "",
            "user": self._user(user),
            "state": "open",
            "labels": [],
            "url": f"{self._base}/issues/{number}",
            "html_url": f"https://github.test/{self.repo}/pull/{number}",
            "comments_url": f"{self._base}/issues/{number}/comments",
            "pull_request": {
                "url": f"{self._base}/pulls/{number}",
                "html_url": f"https://github.test/{self.repo}/pull/{number}",
            },
        }
        return number
