"""The job's state, ``job.json`` in the state directory: what the run step hands the finish and
prune steps (docs/github.md), as a typed value. It is written whole (aside, then swapped in)
and read back checked: a file that is not what the run step wrote is refused with one line.

It is a ``TypedDict``, so the file keeps its JSON shape and mypy checks every reader. The
early ends of the run step are values too: ``Restored`` or ``RestoreFailed`` from
``rio_ci.github.generations.restore``, and ``Exit`` (the step's result) where the step stops
before it runs anything.
"""

from __future__ import annotations

import json
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict, Union, get_args, get_origin, get_type_hints

from rio_ci.core.errors import RioError
from rio_ci.github.contract import JOB_FILE


class Restored(TypedDict):
    """The newest valid generation, put in place and merged with the launch record
    (``generation`` None: no Session; ``saved_at``: when the newest artifact of the issue's
    name, valid or not, was made, or None when none is listed)."""

    generation: int | None
    artifact_id: int | None
    seen: list[int]  # every generation that existed when the job began
    saved_at: str | None
    rejected: list[str]  # generations refused, each with its reason
    record_after: int
    notes: list[str]
    record_imported: int | bool  # events taken from a lost job's launch record (or adopted)


@dataclass(frozen=True)
class RestoreFailed:
    """Nothing may run (``problem`` says why); ``passing``: the cause may pass (the
    launch record could not be read), so the progress comment is left as it is."""

    problem: str
    passing: bool = False


class JobState(TypedDict):
    """What the run step knows once it has a Session: ``Restored``'s fields, then its own."""

    generation: int  # the restored one (0: none), which finish's new generation follows
    artifact_id: int | None
    seen: list[int]
    saved_at: str | None
    rejected: list[str]
    record_after: int
    notes: list[str]
    record_imported: int | bool
    issue: int
    db: str
    started: float
    artifact_name: str
    retention_days: int
    ci_workflow: str | None  # read from the default branch before any Cell ran
    keep_generations: int  # likewise (prune)
    fresh: bool  # a new Session, or one that took in a lost job's events
    start: NotRequired[str]  # the branch's commit when the working tree was checked out
    branch_head: NotRequired[str]  # "" when the branch is not on GitHub yet
    fenced: NotRequired[bool]  # another job wrote the launch record: publish nothing
    outcome: NotRequired[str | None]  # how the rounds ended, for finish's status
    problem: NotRequired[str]  # an error between rounds, for finish's comment
    todo: NotRequired[str]  # what to do about it


@dataclass(frozen=True)
class Exit:
    """The run step's result when it stops early (``ignored`` events, a run that ended and
    that nothing asks to follow up): written as the step's outputs."""

    status: str
    reason: str
    issue: int | None = None
    session: str | None = None

    def to_dict(self) -> dict[str, Any]:
        shown = {"status": self.status, "session": self.session, "issue": self.issue}
        return {**{k: v for k, v in shown.items() if v is not None}, "reason": self.reason}


def write_job(state_dir: Path, job: JobState) -> None:
    path = state_dir / JOB_FILE
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(job))
    partial.replace(path)


def read_job(state_dir: Path) -> JobState:
    """``job.json`` as the run step wrote it; RioError, in one line, when it is not."""
    path = state_dir / JOB_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise RioError(f"{path} cannot be read as the job's state: {exc}") from None
    problem = shape_problem(data, JobState)
    if problem is not None:
        raise RioError(f"{path} is not the job's state the run step writes: {problem}")
    job: JobState = data
    return job


def shape_problem(value: Any, hint: Any, where: str = "") -> str | None:
    """The first place where JSON ``value`` is not of type ``hint`` (a TypedDict of
    scalars, unions and lists), or None."""
    if isinstance(hint, type) and issubclass(hint, dict):  # a TypedDict
        return _object_problem(value, hint, where)
    if get_origin(hint) in (Union, types.UnionType):
        found = [shape_problem(value, member, where) for member in get_args(hint)]
        return None if None in found else found[0]
    if get_origin(hint) is list:
        if not isinstance(value, list):
            return f"{where} is not a list"
        return next(
            (p for item in value if (p := shape_problem(item, get_args(hint)[0], where))), None
        )
    return None if _is(value, hint) else f"{where} is not {getattr(hint, '__name__', hint)}"


def _object_problem(value: Any, hint: type, where: str) -> str | None:
    if not isinstance(value, dict):
        return f"{where or 'the file'} is not a JSON object"
    # Read from the annotations: with postponed annotations Python 3.11 counts a NotRequired
    # key as required in __required_keys__.
    for key, field in get_type_hints(hint, include_extras=True).items():
        optional = get_origin(field) is NotRequired
        if key not in value:
            if not optional:
                return f"{where}{key} is missing"
            continue
        problem = shape_problem(value[key], get_args(field)[0] if optional else field, key)
        if problem is not None:
            return problem
    return None


def _is(value: Any, hint: Any) -> bool:
    if hint is type(None):
        return value is None
    if hint in (int, float) and isinstance(value, bool):
        return False
    return isinstance(value, int | float) if hint is float else isinstance(value, hint)
