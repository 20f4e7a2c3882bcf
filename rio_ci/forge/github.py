"""The Forge on GitHub, through PyGithub (and plain ``urllib`` for artifact downloads).

Every PyGithub or network failure leaves this module as ``rio_ci.core.errors.ForgeError`` with a
message naming the operation that failed; an oversized artifact download raises
``StorageError``. Writes are made idempotent by reading first (a marker for comments, the head
branch for pull requests) and are never retried blindly: the retry policy below only repeats
GET requests, so a lost response to a POST cannot post twice. A rate-limit answer is another
matter: GitHub did nothing with the request, so the operation is asked again once the wait
its headers name is over, within the step's ``Patience`` (``github_limits``).

What a job reads is read once (docs/github.md "Requests, rate limits and storage"): issues,
comments, reviews, checks and artifacts go through ``github_pages.Pages``, whose conditional
GETs cost nothing when the answer is unchanged, and which the steps of one job share through
a file (``kept``). The repository itself is read only when asked for something of it (its
id, when not given; its default branch).
"""

from __future__ import annotations

import hashlib
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from github import Auth, Consts, Github
from github.GithubException import (
    BadAttributeException,
    GithubException,
    UnknownObjectException,
)
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
from rio_ci.forge.github_limits import Limited, Patience, refusal
from rio_ci.forge.github_pages import PER_PAGE, Pages, with_query
from rio_ci.forge.github_probe import Answer, fetch
from rio_ci.forge.github_reviews import submitted_reviews
from rio_ci.forge.github_runs import artifact_origin, int_or_none, run_of

DEFAULT_API_URL = "https://api.github.com"
DOWNLOAD_LIMIT_BYTES = 512 * 1024 * 1024
PERMISSIONS = frozenset({"admin", "maintain", "write", "triage", "read", "none"})

WRITERS = frozenset({"admin", "maintain", "write"})
OPTIONAL = frozenset({403, 404})  # an optional read answered so: a warning, not a failure
TIMELINE = frozenset({"labeled", "unlabeled", "assigned", "unassigned", "commented"})
T = TypeVar("T")


@contextmanager
def _failing(what: str) -> Iterator[None]:
    """Turn PyGithub and network failures inside the block into one ``ForgeError``."""
    try:
        yield
    except GithubException as exc:
        detail = exc.message or (exc.data.get("message") if isinstance(exc.data, dict) else None)
        limited = refusal(exc.status, exc.headers or {}, str(detail or ""))
        if limited is not None:
            raise Limited(f"GitHub: {what} failed: rate limited ({limited})", limited) from exc
        raise ForgeError(
            f"GitHub: {what} failed: HTTP {exc.status} {detail or ''}".rstrip(), status=exc.status
        ) from exc
    except BadAttributeException as exc:
        raise ForgeError(f"GitHub: {what} failed: unexpected response shape") from exc
    except OSError as exc:  # requests' and urllib's errors are OSErrors
        raise ForgeError(f"GitHub: {what} failed: {exc}") from exc


def _iso(text: Any) -> str:
    """A GitHub timestamp as ``YYYY-MM-DDTHH:MM:SSZ`` (UTC); anything unreadable as ``""``."""
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _login(raw: Any) -> str:
    return str((raw.get("user") or {}).get("login") or "") if isinstance(raw, dict) else ""


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


def _issue(raw: dict[str, Any]) -> Issue:
    return Issue(
        number=int(raw["number"]),
        title=str(raw.get("title") or ""),
        body=str(raw.get("body") or ""),
        author=_login(raw),
        labels=tuple(str(label.get("name")) for label in raw.get("labels") or []),
    )


def _digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()


class GitHubForge:
    """``rio_ci.forge.base.Forge`` for one GitHub repository ``owner/name``.

    Construction reads the repository once, so a wrong name or token fails here, unless
    ``repository_id`` (the runner's ``GITHUB_REPOSITORY_ID``) is given: then nothing is
    read before it is needed. ``retries`` bounds retries of idempotent GETs on connection
    errors and 5xx answers. ``throttle`` keeps PyGithub's spacing between requests (GitHub's
    advice against secondary rate limits); tests against a local fake turn it off.
    ``patience`` waits out rate-limit answers (default: none is waited for). ``kept`` is the
    file the answers are kept in for the job's next step (``github_pages``). A comment
    carrying a marker is taken as ours only when ``comment_author`` (if given) wrote it, or
    else when a bot or a user with write access (the collaborator-permission API, never
    ``author_association``) wrote it: no one else can have their comment taken over or plant
    metadata the sweep would read."""

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
        repository_id: int | None = None,
        patience: Patience | None = None,
        kept: Path | None = None,
    ) -> None:
        owner, _, name = repo.partition("/")
        if not owner or not name or "/" in name:
            raise ValueError(f"repository must be 'owner/name', got {repo!r}")
        self._full_name = repo
        self._owner = owner
        self._token = token
        self._api_url = api_url.rstrip("/")
        self._base = f"{self._api_url}/repos/{repo}"
        self._timeout = timeout
        self._comment_author = comment_author
        self._permissions: dict[str, str] = {}
        self._looked: dict[int, list[int]] = {}  # ``changed``: the lists' stamps last seen
        self._patience = patience or Patience(None)
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
            lazy=True,  # an object is read when something of it is used, not when named
            seconds_between_requests=Consts.DEFAULT_SECONDS_BETWEEN_REQUESTS if throttle else None,
            seconds_between_writes=Consts.DEFAULT_SECONDS_BETWEEN_WRITES if throttle else None,
        )
        self._repo = self._github.get_repo(repo)
        self._pages = Pages(self._github.requester, kept)
        self._repo_id = repository_id
        if repository_id is None:
            self._repo_id = int_or_none(self._repository().get("id"))

    def close(self) -> None:
        self._github.close()

    def _ask(self, what: str, read: Callable[[], T]) -> T:
        """``read()``, any failure a ``ForgeError`` naming ``what``; a rate-limit answer is
        waited out (``Patience``) and ``read`` asked again, or reported as given up."""
        repeat = 0
        while True:
            try:
                with _failing(what):
                    return read()
            except Limited as exc:
                why = self._patience.wait(exc.refusal, repeat, what)
                if why is not None:
                    message = (
                        f"{exc} ({why}; the next job for the issue writes what this one could not)"
                    )
                    self._patience.log(f"rio-ci: {message}")
                    raise ForgeError(message, status=exc.status) from exc
                repeat += 1

    def _url(self, path: str, params: dict[str, Any] | None = None) -> str:
        return with_query(f"{self._base}{path}", params)

    def _list(self, path: str, key: str | None = None, **params: Any) -> list[Any]:
        return self._pages.listing(self._url(path, {"per_page": PER_PAGE, **params}), key)

    def _write(self, verb: str, path: str, body: Any) -> Any:
        """A write (POST, PATCH, DELETE) through PyGithub's requester; its JSON answer."""
        _, data = self._github.requester.requestJsonAndCheck(verb, self._base + path, input=body)
        return data

    def _repository(self) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            data, _ = self._pages.get(self._base)
            return data if isinstance(data, dict) else {}

        return self._ask(f"opening repository {self._full_name}", read)

    # -- issues and comments -------------------------------------------------------------------

    def issue(self, number: int) -> Issue:
        def read() -> Issue:
            data, _ = self._pages.get(self._url(f"/issues/{number}"))
            return _issue(data)

        return self._ask(f"reading issue #{number}", read)

    def permission(self, user: str) -> str:
        """The user's permission on the repository (``admin``, ``write``, ``read`` or
        ``none``: GitHub reports ``maintain`` as ``write`` and ``triage`` as ``read``); an
        unknown user or an answer this module does not recognise is 'none', so an odd reply
        never grants access. Asked once per user and kept for this object's life (a job)."""
        if user not in self._permissions:

            def read() -> str:
                try:
                    level: str = self._repo.get_collaborator_permission(user)
                except UnknownObjectException:
                    level = "none"
                return level

            level = self._ask(f"reading the permission of {user}", read)
            self._permissions[user] = level if level in PERMISSIONS else "none"
        return self._permissions[user]

    def issue_timeline(self, number: int) -> list[IssueEvent]:
        """The issue's label, assignment and comment entries (``GET .../issues/{n}/timeline``,
        one request per 100 entries; the issue itself is not read). Each entry's ``actor`` is
        who made it (docs/github.md "A start that was lost"); a comment's is its ``user``."""
        url = f"{self._base}/issues/{number}/timeline"

        def read() -> list[IssueEvent]:
            listed = PaginatedList(TimelineEvent, self._github.requester, url, None)
            return [
                _entry(event.raw_data)
                for event in listed
                if event.raw_data.get("event") in TIMELINE
            ]

        return self._ask(f"reading the timeline of #{number}", read)

    def comments(self, number: int, after_id: int = 0) -> list[Comment]:
        def read() -> list[Comment]:
            listed = [self._comment(number, c) for c in self._list(f"/issues/{number}/comments")]
            return sorted((c for c in listed if c.id > after_id), key=lambda c: c.id)

        return self._ask(f"listing comments of #{number}", read)

    def reviews(self, pull: int) -> list[Review]:  # github_reviews.py
        def read() -> list[Review]:
            inline = self._list(f"/pulls/{pull}/comments")
            return submitted_reviews(self._list(f"/pulls/{pull}/reviews"), inline)

        return self._ask(f"listing the reviews of pull request #{pull}", read)

    def changed(self, number: int, *, pull: bool = False) -> bool:
        """Whether ``number`` changed since the last call for it (True the first time): an
        issue by its own answer (its comment count moves with each comment, and rio-ci's
        edits of its progress comment do not move it); a pull request by the lists a re-scan
        reads of it — its comments, reviews and inline comments. Each is asked with a
        conditional request, free when unchanged (``Pages``)."""

        def read() -> bool:
            if pull:
                lists = [f"/issues/{number}/comments", f"/pulls/{number}/reviews"]
                lists.append(f"/pulls/{number}/comments")
                urls = [self._url(p, {"per_page": PER_PAGE}) for p in lists]
                stamps = [self._pages.look(url) for url in urls]  # each: its ETag kept fresh
            else:
                url = self._url(f"/issues/{number}")
                self._pages.get(url)
                stamps = [self._pages.changed_at.get(url, 0)]
            changed = self._looked.get(number) != stamps
            self._looked[number] = stamps
            return changed

        return self._ask(f"looking for news on #{number}", read)

    def upsert_comment(self, number: int, marker: str, body: str) -> int:
        """Edit the oldest comment containing ``marker`` (skipping the write when its body is
        already ``body``), or create one. Replaying the same call therefore never posts twice.
        The comment found or made is remembered (with the digest of what was written) for
        the rest of the job, its later steps included: the next write needs no look."""
        if marker not in body:
            raise ValueError("the comment body must contain its marker")
        key = f"comment:{number}:{marker}"

        def write() -> int:
            known = self._pages.notes.get(key)
            if isinstance(known, dict) and int_or_none(known.get("id")) is not None:
                if known.get("sha") == _digest(body):
                    return int(known["id"])
                try:
                    self._write("PATCH", f"/issues/comments/{known['id']}", {"body": body})
                    return self._remember(key, int(known["id"]), body)
                except UnknownObjectException:
                    self._pages.note(key, None)  # deleted meanwhile: look for it again
            found = self._marked(number, marker)
            if found is not None and found.body == body:
                return self._remember(key, found.id, body)
            if found is not None:
                self._write("PATCH", f"/issues/comments/{found.id}", {"body": body})
                return self._remember(key, found.id, body)
            made = self._write("POST", f"/issues/{number}/comments", {"body": body})
            return self._remember(key, int(made["id"]), body)

        return self._ask(f"writing the comment {marker} on #{number}", write)

    def _remember(self, key: str, comment_id: int, body: str) -> int:
        self._pages.note(key, {"id": comment_id, "sha": _digest(body)})
        return comment_id

    def _marked(self, number: int, marker: str) -> Comment | None:
        for raw in self._list(f"/issues/{number}/comments"):
            if marker in str(raw.get("body") or "") and self._may_own(raw):
                return self._comment(number, raw)
        return None

    def find_comment(self, number: int, marker: str) -> Comment | None:
        """The oldest comment on ``number`` containing ``marker`` (and, with
        ``comment_author``, written by that login), or None. A read only: the sweep uses it to
        learn a Session's next wake without downloading its journal."""
        return self._ask(
            f"looking for the comment {marker} on #{number}", lambda: self._marked(number, marker)
        )

    def issues_with_label(self, label: str) -> list[Issue]:
        """Open issues carrying ``label``, lowest number first; pull requests (which the
        issues API lists too) are left out."""

        def read() -> list[Issue]:
            listed = self._list("/issues", state="open", labels=label)
            # a pull request is an issue with a ``pull_request`` object
            return [_issue(i) for i in listed if not i.get("pull_request")]

        found = self._ask(f"listing open issues labelled {label}", read)
        return sorted((i for i in found if label in i.labels), key=lambda i: i.number)

    def pull_head(self, number: int) -> str | None:
        """The head branch of pull request ``number``; None when ``number`` is no pull request
        or its head lives in another repository (a fork's ``rio/issue-7`` is not ours)."""

        def read() -> str | None:
            try:
                head = self._repo.get_pull(number).head  # read here (the object is lazy)
            except UnknownObjectException:
                return None
            if not self._is_ours(head.repo):
                return None
            ref: str = head.ref
            return ref

        return self._ask(f"reading pull request #{number}", read)

    def _may_own(self, raw: dict[str, Any]) -> bool:
        login = _login(raw)
        if self._comment_author:
            return login == self._comment_author
        # "[bot]" cannot appear in a user's login; only installed apps carry it. A person's
        # association says nothing about write access (a MEMBER may be read-only), so a
        # person's comment is ours only when the permission API says they may write.
        return login.endswith("[bot]") or self.permission(login) in WRITERS

    def _is_ours(self, repo: Repository | None) -> bool:
        return repo is not None and repo.full_name == self._full_name

    @staticmethod
    def _comment(number: int, raw: dict[str, Any]) -> Comment:
        return Comment(
            id=int(raw["id"]),
            issue=number,
            author=_login(raw),
            association=str(raw.get("author_association") or "NONE"),
            body=str(raw.get("body") or ""),
            url=str(raw.get("html_url") or ""),
        )

    # -- checks --------------------------------------------------------------------------------

    def checks(
        self,
        branch: str,
        after_id: int = 0,
        warn: Callable[[str], None] | None = None,
        head: str | None = None,
    ) -> list[Check]:
        """Completed workflow runs on ``branch`` plus completed check runs of its head commit,
        each with id > ``after_id``, sorted by id. Check runs made by GitHub Actions are left
        out: they are the jobs of the workflow runs already listed, and one observation per
        run is what the model needs. Workflow-run and check-run ids are separate sequences on
        GitHub, so one watermark covers both only approximately; callers de-duplicate by
        ``(kind, id)``. A branch that does not exist (yet) has no checks. ``head``: the
        branch's head commit when the caller knows it (the branch is then not read).

        These reads are optional: with ``warn``, a listing answered 403 (no ``checks: read``
        or ``actions: read``; fine-grained tokens) or 404 is reported through ``warn`` and
        left out, and the others still count. Without ``warn`` it raises ``ForgeError``."""
        if head is None:
            head = self._head(branch)
            if head is None:
                return []
        sha = head

        def runs() -> list[Check]:
            listed = self._list("/actions/runs", "workflow_runs", branch=branch, status="completed")
            # A fork may name its branch rio/issue-7 too; only our own branch counts.
            return [
                Check(
                    id=int(run["id"]),
                    kind="workflow_run",
                    name=str(run.get("name") or ""),
                    conclusion=str(run.get("conclusion") or ""),
                    url=str(run.get("html_url") or ""),
                    head_branch=branch,
                )
                for run in listed
                if int(run["id"]) > after_id
                and run.get("head_branch") == branch
                and (run.get("head_repository") or {}).get("full_name") == self._full_name
            ]

        def check_runs() -> list[Check]:
            path = f"/commits/{urllib.parse.quote(sha, safe='')}/check-runs"
            return [
                Check(
                    id=int(c["id"]),
                    kind="check_run",
                    name=str(c.get("name") or ""),
                    conclusion=str(c.get("conclusion") or ""),
                    url=str(c.get("html_url") or ""),
                    head_branch=branch,
                )
                for c in self._list(path, "check_runs", status="completed")
                if int(c["id"]) > after_id and (c.get("app") or {}).get("slug") != "github-actions"
            ]

        found = self._optional(f"listing workflow runs of {branch}", runs, warn) + self._optional(
            f"listing check runs of {branch}", check_runs, warn
        )
        return sorted(found, key=lambda c: c.id)

    def _head(self, branch: str) -> str | None:
        def read() -> str | None:
            try:
                data, _ = self._pages.get(self._url(f"/branches/{urllib.parse.quote(branch)}"))
            except UnknownObjectException:
                return None
            return str((data.get("commit") or {}).get("sha") or "") or None

        return self._ask(f"reading branch {branch}", read)

    def _optional(
        self, what: str, read: Callable[[], list[Check]], warn: Callable[[str], None] | None
    ) -> list[Check]:
        try:
            return self._ask(what, read)
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

        def write() -> str:
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

        return self._ask(f"opening a pull request from {branch}", write)

    def _open_pull(self, head: str) -> str | None:
        for pull in self._repo.get_pulls(state="open", head=head):
            return pull.html_url
        return None

    def probe(self, path: str, params: dict[str, Any] | None = None) -> Answer:
        """GET ``/repos/{owner}/{name}{path}`` as this token may (``github_probe``): the
        status is the answer; only a network failure raises."""
        return fetch(self._github.requester, f"{self._base}{path}", params)

    def default_branch(self) -> str:
        return str(self._repository().get("default_branch") or "main")

    def dispatch(self, workflow: str, ref: str, inputs: dict[str, str]) -> None:
        def write() -> None:
            self._repo.get_workflow(workflow).create_dispatch(ref, inputs, throw=True)

        self._ask(f"dispatching {workflow} on {ref}", write)

    def workflow_state(self, workflow: str) -> str | None:
        """The workflow's ``state`` (``active``, ``disabled_manually``,
        ``disabled_inactivity``, ...), or None when no workflow has that file name."""

        def read() -> str | None:
            try:
                state: str = self._repo.get_workflow(workflow).state
            except UnknownObjectException:
                return None
            return state

        return self._ask(f"reading the workflow {workflow}", read)

    def repository_dispatch(self, event_type: str) -> None:
        """Send ``repository_dispatch`` (needs only Contents write)."""

        def write() -> None:
            if not self._repo.create_repository_dispatch(event_type):
                raise ForgeError(f"GitHub: sending repository_dispatch {event_type} failed")

        self._ask(f"sending repository_dispatch {event_type}", write)

    def add_label(self, number: int, label: str) -> None:
        self._ask(
            f"labelling #{number} {label}",
            lambda: self._write("POST", f"/issues/{number}/labels", {"labels": [label]}),
        )

    def react(self, number: int, comment_id: int, content: str) -> None:
        """One request: the issue and the comment are lazy objects, named by their URLs."""
        self._ask(
            f"reacting to comment {comment_id}",
            lambda: self._repo.get_issue(number).get_comment(comment_id).create_reaction(content),
        )

    # -- artifacts -----------------------------------------------------------------------------

    def artifacts(self, name: str) -> list[Artifact]:
        def read() -> list[Artifact]:
            listed = [
                Artifact(
                    id=int(a["id"]),
                    name=str(a["name"]),
                    created_at=_iso(a.get("created_at")),
                    size_in_bytes=int(a.get("size_in_bytes") or 0),
                    expired=bool(a.get("expired")),
                    **artifact_origin(a.get("workflow_run")),
                )
                for a in self._list("/actions/artifacts", "artifacts", name=name)
                if a.get("name") == name
            ]
            return sorted(listed, key=lambda a: (a.created_at, a.id), reverse=True)

        return self._ask(f"listing artifacts named {name}", read)

    def delete_artifact(self, artifact_id: int) -> bool:
        """Delete the artifact (``actions: write``); False when it was already gone."""

        def write() -> bool:
            try:
                self._write("DELETE", f"/actions/artifacts/{artifact_id}", None)
            except UnknownObjectException:
                return False
            return True

        return self._ask(f"deleting artifact {artifact_id}", write)

    def repository_id(self) -> int | None:
        if self._repo_id is None:
            self._repo_id = int_or_none(self._repository().get("id"))
        return self._repo_id

    def workflow_run(self, run_id: int) -> WorkflowRun | None:
        def read() -> WorkflowRun | None:
            try:
                return run_of(self._repo.get_workflow_run(run_id).raw_data)
            except UnknownObjectException:
                return None

        return self._ask(f"reading workflow run {run_id}", read)

    def download_artifact(
        self, artifact_id: int, dest: Path, *, max_bytes: int = DOWNLOAD_LIMIT_BYTES
    ) -> Path:
        """Fetch the artifact's zip into ``dest`` (``github_download.fetch_zip``). The token
        goes only to the API endpoint; the redirect target (a pre-signed URL) is fetched
        without it. More than ``max_bytes`` raises ``StorageError`` and leaves no file."""
        url = f"{self._base}/actions/artifacts/{artifact_id}/zip"
        return self._ask(
            f"downloading artifact {artifact_id}",
            lambda: fetch_zip(
                url,
                self._token,
                dest,
                artifact_id=artifact_id,
                max_bytes=max_bytes,
                timeout=self._timeout,
            ),
        )


def _conforms(forge: GitHubForge) -> Forge:
    return forge  # mypy proves here that GitHubForge satisfies the Forge Protocol
