"""Whose artifacts rio restores (docs/github.md, "Whose artifacts are restored").

Any workflow run of a repository can upload an artifact under any name, a fork's pull-request
run included, so the name ``rio-session-<n>`` proves nothing. An artifact is rio's own only
when the workflow run that uploaded it

- belongs to this repository and so does its head (``repository_id`` and
  ``head_repository_id`` in the artifact listing, ``repository`` and ``head_repository`` in
  the run: both this repository's id);
- ran the workflow file that is running now (the path in ``GITHUB_WORKFLOW_REF``);
- was not started by ``pull_request`` or ``pull_request_target`` (code under review, or a
  fork's, may run there);

and, once downloaded, its manifest's ``run_id`` is that run's id (checked by
``newest.restore_newest``). Everything GitHub answers is read defensively: a field that is
missing or of the wrong type never matches.
"""

from __future__ import annotations

from rio_ci.forge.base import Artifact, Forge, WorkflowRun

PULL_REQUEST_EVENTS = frozenset({"pull_request", "pull_request_target"})
WORKFLOWS_DIR = ".github/workflows/"


def workflow_path(workflow_ref: str, repository: str) -> str | None:
    """The workflow file in ``GITHUB_WORKFLOW_REF``
    (``owner/repo/.github/workflows/rio.yml@refs/heads/main`` → ``.github/workflows/rio.yml``),
    or None when it is unset or does not name a workflow of ``repository``."""
    path = workflow_ref.partition("@")[0]
    if not path.lower().startswith(f"{repository}/".lower()):
        return None
    rest = _run_path(path, repository)
    name = rest[len(WORKFLOWS_DIR) :]
    if not rest.startswith(WORKFLOWS_DIR) or not name or "/" in name:
        return None
    return rest


def _run_path(path: str, repository: str) -> str:
    """A run's ``path`` as a workflow file: GitHub gives ``.github/workflows/rio.yml``; a
    ``@ref`` suffix or an ``owner/repo/`` prefix (as in GITHUB_WORKFLOW_REF) is dropped."""
    path = path.partition("@")[0]
    prefix = f"{repository}/"
    return path[len(prefix) :] if path.lower().startswith(prefix.lower()) else path


class Provenance:
    """Decides, artifact by artifact, whether it came from one of rio's own runs. Each run is
    read once (GET .../actions/runs/{id}); a run that does not exist makes its artifacts
    foreign. A ForgeError reading a run propagates: skipping an artifact because its run
    could not be *read* would silently drop history."""

    def __init__(self, forge: Forge, repository: str, workflow_ref: str) -> None:
        self._forge = forge
        self._repository = repository
        self.path = workflow_path(workflow_ref, repository)
        self._repo_id = forge.repository_id()
        self._runs: dict[int, WorkflowRun | None] = {}

    def problem(self, candidate: Artifact) -> str | None:
        """Why ``candidate`` is not rio's own (one line), or None."""
        if self.path is None:
            return "GITHUB_WORKFLOW_REF does not name a workflow of this repository"
        if self._repo_id is None:
            return "this repository's id is unknown"
        run_id = candidate.run_id
        if run_id is None:
            return "the listing names no workflow run for it"
        ours = self._repo_id
        if candidate.repository_id != ours or candidate.head_repository_id != ours:
            return (
                f"its workflow run {run_id} is not this repository's own (repository "
                f"{candidate.repository_id}, head repository {candidate.head_repository_id})"
            )
        if run_id not in self._runs:
            self._runs[run_id] = self._forge.workflow_run(run_id)
        run = self._runs[run_id]
        if run is None or run.id != run_id:
            return f"its workflow run {run_id} cannot be found"
        return self._run_problem(run)

    def _run_problem(self, run: WorkflowRun) -> str | None:
        ours = self._repo_id
        if run.repository_id != ours or run.head_repository_id != ours:
            return (
                f"its workflow run {run.id} ran for another repository (repository "
                f"{run.repository_id}, head repository {run.head_repository_id})"
            )
        if not run.event or run.event in PULL_REQUEST_EVENTS:
            return f"its workflow run {run.id} was started by {run.event or 'an unknown event'!r}"
        if _run_path(run.path, self._repository) != self.path:
            return f"its workflow run {run.id} ran {run.path!r}, not {self.path!r}"
        return None
