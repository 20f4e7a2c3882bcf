"""The Forge seam: everything rio_ci asks of a code host."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Issue:
    number: int
    title: str
    body: str
    author: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Comment:
    id: int
    issue: int
    author: str
    association: str  # author_association as the host reports it (OWNER, MEMBER, COLLABORATOR, ...)
    body: str
    url: str


@dataclass(frozen=True)
class ReviewComment:
    """An inline comment on a line of a pull request's diff."""

    id: int
    review_id: int | None  # the review it was submitted with (GitHub makes one per comment)
    author: str
    association: str
    path: str
    line: int | None  # the line of the file it refers to (None: outdated, off the diff)
    side: str  # LEFT (the old file) | RIGHT (the new file)
    diff_hunk: str
    body: str
    url: str


@dataclass(frozen=True)
class Review:
    """A submitted review of a pull request with all its inline comments."""

    id: int
    author: str
    association: str
    state: str  # APPROVED | CHANGES_REQUESTED | COMMENTED | DISMISSED
    body: str
    url: str
    comments: tuple[ReviewComment, ...]


@dataclass(frozen=True)
class Check:
    """A finished workflow run or check run on a branch."""

    id: int
    kind: str  # "workflow_run" | "check_run"
    name: str
    conclusion: str
    url: str
    head_branch: str


@dataclass(frozen=True)
class IssueEvent:
    """One entry of an issue's timeline: a label or an assignee put on or taken off (who did
    it and when), or a comment (who wrote it, its body, when it last changed)."""

    id: int
    kind: str  # "labeled" | "unlabeled" | "assigned" | "unassigned" | "commented"
    actor: str  # who did it (an assignment: who assigned, not the assignee; a comment: its author)
    subject: str  # the label's name, the assignee's login, or the comment's body
    created_at: str  # ISO 8601, UTC
    updated_at: str = ""  # a comment: when it was last edited (else as created_at)


@dataclass(frozen=True)
class Artifact:
    id: int
    name: str
    created_at: str  # ISO 8601
    size_in_bytes: int
    expired: bool
    run_id: int | None
    # The ``workflow_run`` the listing names (ids of the run's repository and of the
    # repository its head commit came from); None when the listing did not say.
    repository_id: int | None = None
    head_repository_id: int | None = None


@dataclass(frozen=True)
class WorkflowRun:
    """What a workflow run says about where it came from (GET .../actions/runs/{id}):
    ``path`` is the workflow file (``.github/workflows/rio.yml``), ``event`` what started it,
    and the ids of the run's repository and of its head repository (a fork's for a pull
    request from a fork). Fields GitHub did not give are None/empty: never trusted."""

    id: int
    path: str
    event: str
    repository_id: int | None
    head_repository_id: int | None


class Forge(Protocol):
    def issue(self, number: int) -> Issue: ...

    def permission(self, user: str) -> str:
        """'admin' | 'maintain' | 'write' | 'triage' | 'read' | 'none'."""
        ...

    def issue_timeline(self, number: int) -> list[IssueEvent]:
        """Issue ``number``'s timeline, oldest first: who put labels and assignees on it and
        took them off, and its comments (the other kinds of entries are left out)."""
        ...

    def comments(self, number: int, after_id: int = 0) -> list[Comment]:
        """Comments on issue/PR ``number`` with id > after_id, oldest first."""
        ...

    def reviews(self, pull: int) -> list[Review]:
        """The submitted reviews of pull request ``pull``, oldest first, each with its inline
        comments (a pending review, visible only to its author, is not listed)."""
        ...

    def changed(self, number: int, *, pull: bool = False) -> bool:
        """Whether the comments of issue ``number`` (with ``pull``: of pull request
        ``number``, and its reviews and inline comments) may have changed since this forge
        last read them; True when it never did. Asked with conditional requests, so an
        unchanged answer costs no rate limit."""
        ...

    def upsert_comment(self, number: int, marker: str, body: str) -> int:
        """Edit the one comment whose body contains ``marker`` (an HTML comment), or create it.
        ``body`` must already contain ``marker``. Returns the comment id."""
        ...

    def checks(
        self,
        branch: str,
        after_id: int = 0,
        warn: Callable[[str], None] | None = None,
        head: str | None = None,
    ) -> list[Check]:
        """Completed workflow runs and check runs on ``branch`` with id > after_id. With
        ``warn``, a listing refused with 403 or 404 is reported there and skipped. ``head``:
        the branch's head commit when the caller knows it (the host need not be asked)."""
        ...

    def open_pull_request(self, branch: str, base: str, title: str, body: str) -> str:
        """Open a pull request from ``branch``, or return the URL of the open one."""
        ...

    def default_branch(self) -> str:
        """The repository's default branch (read when the repository was opened)."""
        ...

    def artifacts(self, name: str) -> list[Artifact]:
        """Artifacts with exactly this name, newest first."""
        ...

    def download_artifact(self, artifact_id: int, dest: Path) -> Path:
        """Download the artifact's zip to ``dest`` (a file path) and return it."""
        ...

    def delete_artifact(self, artifact_id: int) -> bool:
        """Delete the artifact; False when it was already gone."""
        ...

    def repository_id(self) -> int | None:
        """This repository's numeric id (read when the repository was opened); None when the
        host has none (then no artifact can be shown to be this repository's)."""
        ...

    def workflow_run(self, run_id: int) -> WorkflowRun | None:
        """The workflow run ``run_id`` of this repository, or None when there is none."""
        ...

    def issues_with_label(self, label: str) -> list[Issue]:
        """Open issues carrying ``label`` (pull requests excluded)."""
        ...

    def find_comment(self, number: int, marker: str) -> Comment | None:
        """The oldest comment on ``number`` whose body contains ``marker``, or None."""
        ...

    def pull_head(self, number: int) -> str | None:
        """The head branch of pull request ``number``, or None if it is not a pull request."""
        ...

    def dispatch(self, workflow: str, ref: str, inputs: dict[str, str]) -> None:
        """Start ``workflow`` (file name) with ``workflow_dispatch`` inputs."""
        ...

    def workflow_state(self, workflow: str) -> str | None:
        """``active``, ``disabled_manually``, ...; None when the workflow does not exist."""
        ...

    def repository_dispatch(self, event_type: str) -> None:
        """Send a ``repository_dispatch`` event of ``event_type``."""
        ...

    def add_label(self, number: int, label: str) -> None:
        """Put ``label`` on issue ``number``."""
        ...

    def react(self, number: int, comment_id: int, content: str) -> None:
        """Leave the reaction ``content`` (``eyes``) on comment ``comment_id`` of issue or pull
        request ``number``; leaving it twice leaves one."""
        ...
