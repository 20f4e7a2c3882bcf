"""The Forge on GitHub, through PyGithub (and plain ``urllib`` for artifact downloads).

Every PyGithub or network failure leaves this module as ``rio_ci.core.errors.ForgeError`` with a
message naming the operation that failed; an oversized artifact download raises
``StorageError``. Writes are made idempotent by reading first (a marker for comments, the head
branch for pull requests) and are never retried blindly: the retry policy below only repeats
GET requests, so a lost response to a POST cannot post twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from github import Auth, Consts, Github
from github.GithubException import (
    BadAttributeException,
    GithubException,
    UnknownObjectException,
)
from github.IssueComment import IssueComment
from github.PaginatedList import PaginatedList
from github.Repository import Repository
from github.TimelineEvent import TimelineEvent
from urllib3.util.retry import Retry

from rio_ci.core.errors import ForgeError
from rio_ci.forge.base import (
    Artifact,
    Check,
    Comment,
    Forge,
    Issue,
    IssueEvent,
    Review,
    WorkflowRun,
)
from rio_ci.forge.github_download import fetch_zip
from rio_ci.forge.github_probe import Answer, fetch
from rio_ci.forge.github_reviews import News, submitted_reviews
from rio_ci.forge.github_runs import artifact_origin, int_or_none, run_of

DEFAULT_API_URL = "https://api.github.com"
DOWNLOAD_LIMIT_BYTES = 512 * 1024 * 1024
PERMISSIONS = frozenset({"admin", "maintain", "write", "triage", "read", "none"})

WRITERS = frozenset({"admin", "maintain", "write"})
OPTIONAL = frozenset({403, 404})  # an optional read answered so: a warning, not a failure
TIMELINE = frozenset({"labeled", "unlabeled", "assigned", "unassigned", "commented"})


@contextmanager
def _failing(what: str) -> Iterator[None]:
    """Turn PyGithub and network failures inside the block into one ``ForgeError``."""
    try:
        yield
    except GithubException as exc:
        detail = exc.message or (exc.data.get("message") if isinstance(exc.data, dict) else None)
        raise ForgeError(
            f"GitHub: {what} failed: HTTP {exc.status} {detail or ''}".rstrip(), status=exc.status
        ) from exc
    except BadAttributeException as exc:
        raise ForgeError(f"GitHub: {what} failed: unexpected response shape") from exc
    except OSError as exc:  # requests' and urllib's errors are OSErrors
        raise ForgeError(f"GitHub: {what} failed: {exc}") from exc


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entry(raw: dict[str, Any]) -> IssueEvent:
    """One timeline entry, read from its JSON (a timeline entry is never fetched again)."""
    kind = str(raw["event"])
    if kind == "commented":
        who, subject = raw.get("user"), raw.get("body")
    elif kind in ("assigned", "unassigned"):
        who, subject = raw.get("actor"), (raw.get("assignee") or {}).get("login")
    else:
        who, subject = raw.get("actor"), (raw.get("label") or {}).get("name")
    created = str(raw.get("created_at") or "")
    return IssueEvent(
        id=int_or_none(raw.get("id")) or 0,
        kind=kind,
        actor=str((who or {}).get("login") or ""),
        subject=str(subject or ""),
        created_at=created,
        updated_at=str(raw.get("updated_at") or created),
    )


class GitHubForge:
    """``rio_ci.forge.base.Forge`` for one GitHub repository ``owner/name``.

    Construction reads the repository once, so a wrong name or token fails here. ``retries``
    bounds retries of idempotent GETs on connection errors and 5xx answers. ``throttle`` keeps
    PyGithub's spacing between requests (GitHub's advice against secondary rate limits); tests
    against a local fake turn it off. A comment carrying a marker is taken as ours only when
    ``comment_author`` (if given) wrote it, or else when a bot or a user with write access
    (the collaborator-permission API, never ``author_association``) wrote it: no one else
    can have their comment taken over or plant metadata the sweep would read."""

    def __init__(
        self,
        repo: str,
        token: str,
        api_url: str = DEFAULT_API_URL,
        *,
        retries: int = 2,
        timeout: int = 30,
        throttle: bool = True,
        comment_author: str | None = None,
    ) -> None:
        owner, _, name = repo.partition("/")
        if not owner or not name or "/" in name:
            raise ValueError(f"repository must be 'owner/name', got {repo!r}")
        self._full_name = repo
        self._owner = owner
        self._token = token
        self._api_url = api_url.rstrip("/")
        self._timeout = timeout
        self._comment_author = comment_author
        self._permissions: dict[str, str] = {}
        retry = Retry(
            total=retries,
            backoff_factor=0.5,
            status_forcelist=(500, 502, 503, 504),
            allowed_methods=frozenset({"GET", "HEAD"}),
            raise_on_status=False,
        )
        self._github = Github(
            auth=Auth.Token(token),
            base_url=self._api_url,
            retry=retry,
            timeout=timeout,
            per_page=100,
            seconds_between_requests=Consts.DEFAULT_SECONDS_BETWEEN_REQUESTS if throttle else None,
            seconds_between_writes=Consts.DEFAULT_SECONDS_BETWEEN_WRITES if throttle else None,
        )
        with _failing(f"opening repository {repo}"):
            self._repo = self._github.get_repo(repo)
        self._news = News(self._github.requester, f"{self._api_url}/repos/{repo}")

    def close(self) -> None:
        self._github.close()

    # -- issues and comments -------------------------------------------------------------------

    def issue(self, number: int) -> Issue:
        with _failing(f"reading issue #{number}"):
            found = self._repo.get_issue(number)
            return Issue(
                number=found.number,
                title=found.title,
                body=found.body or "",
                author=found.user.login if found.user else "",
                labels=tuple(label.name for label in found.labels),
            )

    def permission(self, user: str) -> str:
        """The user's permission on the repository (``admin``, ``write``, ``read`` or
        ``none``: GitHub reports ``maintain`` as ``write`` and ``triage`` as ``read``); an
        unknown user or an answer this module does not recognise is 'none', so an odd reply
        never grants access. Asked once per user and kept for this object's life (a job)."""
        if user not in self._permissions:
            with _failing(f"reading the permission of {user}"):
                try:
                    level = self._repo.get_collaborator_permission(user)
                except UnknownObjectException:
                    level = "none"
            self._permissions[user] = level if level in PERMISSIONS else "none"
        return self._permissions[user]

    def issue_timeline(self, number: int) -> list[IssueEvent]:
        """The issue's label, assignment and comment entries (``GET .../issues/{n}/timeline``,
        one request per 100 entries; the issue itself is not read). Each entry's ``actor`` is
        who made it (docs/github.md "A start that was lost"); a comment's is its ``user``."""
        url = f"{self._api_url}/repos/{self._full_name}/issues/{number}/timeline"
        listed = PaginatedList(TimelineEvent, self._github.requester, url, None)
        with _failing(f"reading the timeline of #{number}"):
            return [
                _entry(event.raw_data)
                for event in listed
                if event.raw_data.get("event") in TIMELINE
            ]

    def comments(self, number: int, after_id: int = 0) -> list[Comment]:
        with _failing(f"listing comments of #{number}"):
            found = [
                self._comment(number, c)
                for c in self._repo.get_issue(number).get_comments()
                if c.id > after_id
            ]
        return sorted(found, key=lambda c: c.id)

    def reviews(self, pull: int) -> list[Review]:  # review.py
        with _failing(f"listing the reviews of pull request #{pull}"):
            return submitted_reviews(self._repo.get_pull(pull))

    def changed(self, number: int, *, pull: bool = False) -> bool:  # review.py: News
        with _failing(f"looking for news on #{number}"):
            return self._news.changed(number, pull=pull)

    def upsert_comment(self, number: int, marker: str, body: str) -> int:
        """Edit the oldest comment containing ``marker`` (skipping the write when its body is
        already ``body``), or create one. Replaying the same call therefore never posts twice."""
        if marker not in body:
            raise ValueError("the comment body must contain its marker")
        with _failing(f"writing the comment {marker} on #{number}"):
            issue = self._repo.get_issue(number)
            for existing in issue.get_comments():
                if marker not in (existing.body or "") or not self._may_own(existing):
                    continue
                if existing.body != body:
                    existing.edit(body)
                return existing.id
            return issue.create_comment(body).id

    def find_comment(self, number: int, marker: str) -> Comment | None:
        """The oldest comment on ``number`` containing ``marker`` (and, with
        ``comment_author``, written by that login), or None. A read only: the sweep uses it to
        learn a Session's next wake without downloading its journal."""
        with _failing(f"looking for the comment {marker} on #{number}"):
            for existing in self._repo.get_issue(number).get_comments():
                if marker in (existing.body or "") and self._may_own(existing):
                    return self._comment(number, existing)
        return None

    def issues_with_label(self, label: str) -> list[Issue]:
        """Open issues carrying ``label``, lowest number first; pull requests (which the
        issues API lists too) are left out."""
        with _failing(f"listing open issues labelled {label}"):
            found = [
                Issue(
                    number=item.number,
                    title=item.title,
                    body=item.body or "",
                    author=item.user.login if item.user else "",
                    labels=tuple(each.name for each in item.labels),
                )
                for item in self._repo.get_issues(state="open", labels=[label])
                # ``item.pull_request`` would cost a request per issue (PyGithub completes an
                # absent attribute); a pull request's page is /pull/N.
                if "/pull/" not in item.html_url
            ]
        return sorted((i for i in found if label in i.labels), key=lambda i: i.number)

    def pull_head(self, number: int) -> str | None:
        """The head branch of pull request ``number``; None when ``number`` is no pull request
        or its head lives in another repository (a fork's ``rio/issue-7`` is not ours)."""
        with _failing(f"reading pull request #{number}"):
            try:
                pull = self._repo.get_pull(number)
            except UnknownObjectException:
                return None
            if not self._is_ours(pull.head.repo):
                return None
            ref: str = pull.head.ref
            return ref

    def _may_own(self, comment: IssueComment) -> bool:
        login = self._login(comment)
        if self._comment_author:
            return login == self._comment_author
        # "[bot]" cannot appear in a user's login; only installed apps carry it. A person's
        # association says nothing about write access (a MEMBER may be read-only), so a
        # person's comment is ours only when the permission API says they may write.
        return login.endswith("[bot]") or self.permission(login) in WRITERS

    def _is_ours(self, repo: Repository | None) -> bool:
        return repo is not None and repo.full_name == self._full_name

    @staticmethod
    def _login(comment: IssueComment) -> str:
        return comment.user.login if comment.user else ""

    def _comment(self, number: int, comment: IssueComment) -> Comment:
        return Comment(
            id=comment.id,
            issue=number,
            author=self._login(comment),
            association=comment.author_association or "NONE",
            body=comment.body or "",
            url=comment.html_url,
        )

    # -- checks --------------------------------------------------------------------------------

    def checks(
        self, branch: str, after_id: int = 0, warn: Callable[[str], None] | None = None
    ) -> list[Check]:
        """Completed workflow runs on ``branch`` plus completed check runs of its head commit,
        each with id > ``after_id``, sorted by id. Check runs made by GitHub Actions are left
        out: they are the jobs of the workflow runs already listed, and one observation per
        run is what the model needs. Workflow-run and check-run ids are separate sequences on
        GitHub, so one watermark covers both only approximately; callers de-duplicate by
        ``(kind, id)``. A branch that does not exist (yet) has no checks.

        These reads are optional: with ``warn``, a listing answered 403 (no ``checks: read``
        or ``actions: read``; fine-grained tokens) or 404 is reported through ``warn`` and
        left out, and the others still count. Without ``warn`` it raises ``ForgeError``."""
        with _failing(f"reading branch {branch}"):
            try:
                head = self._repo.get_branch(branch)
            except UnknownObjectException:
                return []

        def runs() -> list[Check]:
            # A fork may name its branch rio/issue-7 too; only our own branch counts.
            return [
                Check(
                    id=run.id,
                    kind="workflow_run",
                    name=run.name or "",
                    conclusion=run.conclusion or "",
                    url=run.html_url,
                    head_branch=branch,
                )
                for run in self._repo.get_workflow_runs(branch=head, status="completed")
                if run.id > after_id
                and run.head_branch == branch
                and self._is_ours(run.head_repository)
            ]

        def check_runs() -> list[Check]:
            return [
                Check(
                    id=c.id,
                    kind="check_run",
                    name=c.name,
                    conclusion=c.conclusion or "",
                    url=c.html_url,
                    head_branch=branch,
                )
                for c in head.commit.get_check_runs(status="completed")
                if c.id > after_id and (c.app is None or c.app.slug != "github-actions")
            ]

        found = self._optional(f"listing workflow runs of {branch}", runs, warn) + self._optional(
            f"listing check runs of {branch}", check_runs, warn
        )
        return sorted(found, key=lambda c: c.id)

    @staticmethod
    def _optional(
        what: str, read: Callable[[], list[Check]], warn: Callable[[str], None] | None
    ) -> list[Check]:
        try:
            with _failing(what):
                return read()
        except ForgeError as exc:
            if warn is None or exc.status not in OPTIONAL:
                raise
            warn(f"{exc}; an optional read, skipped this time")
            return []

    # -- pull requests and workflows -----------------------------------------------------------

    def open_pull_request(self, branch: str, base: str, title: str, body: str) -> str:
        """Reuse the open pull request whose head is ``owner:branch``, or open one. If another
        job opened it between our look and our create (GitHub answers 422), that one is used."""
        head = f"{self._owner}:{branch}"
        with _failing(f"opening a pull request from {branch}"):
            existing = self._open_pull(head)
            if existing is not None:
                return existing
            try:
                return self._repo.create_pull(
                    base=base, head=branch, title=title, body=body
                ).html_url
            except GithubException as exc:
                again = self._open_pull(head) if exc.status == 422 else None
                if again is None:
                    raise
                return again

    def _open_pull(self, head: str) -> str | None:
        for pull in self._repo.get_pulls(state="open", head=head):
            return pull.html_url
        return None

    def probe(self, path: str, params: dict[str, Any] | None = None) -> Answer:
        """GET ``/repos/{owner}/{name}{path}`` as this token may (``github_probe``): the
        status is the answer; only a network failure raises."""
        return fetch(
            self._github.requester, f"{self._api_url}/repos/{self._full_name}{path}", params
        )

    def default_branch(self) -> str:
        return str(self._repo.default_branch or "main")

    def dispatch(self, workflow: str, ref: str, inputs: dict[str, str]) -> None:
        with _failing(f"dispatching {workflow} on {ref}"):
            self._repo.get_workflow(workflow).create_dispatch(ref, inputs, throw=True)

    def workflow_state(self, workflow: str) -> str | None:
        """The workflow's ``state`` (``active``, ``disabled_manually``,
        ``disabled_inactivity``, ...), or None when no workflow has that file name."""
        with _failing(f"reading the workflow {workflow}"):
            try:
                state: str = self._repo.get_workflow(workflow).state
            except UnknownObjectException:
                return None
        return state

    def repository_dispatch(self, event_type: str) -> None:
        """Send ``repository_dispatch`` (needs only Contents write)."""
        with _failing(f"sending repository_dispatch {event_type}"):
            if not self._repo.create_repository_dispatch(event_type):
                raise ForgeError(f"GitHub: sending repository_dispatch {event_type} failed")

    def add_label(self, number: int, label: str) -> None:
        with _failing(f"labelling #{number} {label}"):
            self._repo.get_issue(number).add_to_labels(label)

    # -- artifacts -----------------------------------------------------------------------------

    def artifacts(self, name: str) -> list[Artifact]:
        with _failing(f"listing artifacts named {name}"):
            listed = [a for a in self._repo.get_artifacts(name=name) if a.name == name]
            listed.sort(key=lambda a: (a.created_at, a.id), reverse=True)
            return [
                Artifact(
                    id=a.id,
                    name=a.name,
                    created_at=_iso(a.created_at),
                    size_in_bytes=a.size_in_bytes,
                    expired=a.expired,
                    **artifact_origin(a.raw_data.get("workflow_run")),
                )
                for a in listed
            ]

    def repository_id(self) -> int | None:  # read when the repository was opened
        return int_or_none(self._repo.raw_data.get("id"))

    def workflow_run(self, run_id: int) -> WorkflowRun | None:
        with _failing(f"reading workflow run {run_id}"):
            try:
                return run_of(self._repo.get_workflow_run(run_id).raw_data)
            except UnknownObjectException:
                return None

    def download_artifact(
        self, artifact_id: int, dest: Path, *, max_bytes: int = DOWNLOAD_LIMIT_BYTES
    ) -> Path:
        """Fetch the artifact's zip into ``dest`` (``github_download.fetch_zip``). The token
        goes only to the API endpoint; the redirect target (a pre-signed URL) is fetched
        without it. More than ``max_bytes`` raises ``StorageError`` and leaves no file."""
        url = f"{self._api_url}/repos/{self._full_name}/actions/artifacts/{artifact_id}/zip"
        return fetch_zip(
            url,
            self._token,
            dest,
            artifact_id=artifact_id,
            max_bytes=max_bytes,
            timeout=self._timeout,
        )


def _conforms(forge: GitHubForge) -> Forge:
    return forge  # mypy proves here that GitHubForge satisfies the Forge Protocol
