"""Where an artifact came from, read from GitHub's JSON: the ``workflow_run`` an artifact
listing names, and the run itself (GET .../actions/runs/{id}). Parsed from the raw data, so
a field that is missing or of the wrong type reads as None (or empty) and never matches."""

from __future__ import annotations

from rio_ci.core.json_value import is_int
from rio_ci.forge.base import WorkflowRun


def int_or_none(value: object) -> int | None:
    return value if is_int(value) else None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _nested_id(value: object) -> int | None:
    return int_or_none(value.get("id") if isinstance(value, dict) else None)


def artifact_origin(run: object) -> dict[str, int | None]:
    """An artifact's ``workflow_run`` as ``Artifact`` fields (``run_id``, ``repository_id``,
    ``head_repository_id``)."""
    data = run if isinstance(run, dict) else {}
    return {
        "run_id": int_or_none(data.get("id")),
        "repository_id": int_or_none(data.get("repository_id")),
        "head_repository_id": int_or_none(data.get("head_repository_id")),
    }


def run_of(data: dict[str, object]) -> WorkflowRun:
    """A workflow run's JSON as a ``WorkflowRun`` (an id that is not an integer is -1)."""
    return WorkflowRun(
        id=int_or_none(data.get("id")) or -1,
        path=_text(data.get("path")),
        event=_text(data.get("event")),
        repository_id=_nested_id(data.get("repository")),
        head_repository_id=_nested_id(data.get("head_repository")),
    )
