"""Evaluation cases: a directory with ``case.yml``, ``repo/`` and whatever its hidden check
needs (docs/eval.md).

``case.yml``::

    goal: TEXT                      # the Session's goal (what the model is asked)
    validators: [[argv...], ...]    # the Session's validators (the model sees them)
    check: [argv...]                # hidden acceptance test, run in the working copy after
                                    # the Session ends; "{case_dir}" -> the case directory
    limits: {NAME: VALUE}           # optional: any limit of docs/sessions.md
    oracle: FILE                    # optional: a scripted model that solves the case

Every problem is a ``UsageError`` (exit 2) that names the case and the field, raised before
any trial runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rio_ci.core.errors import UsageError
from rio_ci.core.limits import Limits

CASE_FILE = "case.yml"
FIELDS = ("goal", "validators", "check", "limits", "oracle")
CASE_DIR = "{case_dir}"


@dataclass(frozen=True)
class Case:
    name: str  # the directory's name; unique within one run
    directory: Path  # absolute
    goal: str
    validators: list[list[str]]
    check: list[str]
    limits: dict[str, Any]
    oracle: Path | None  # absolute, when the case names one

    def check_argv(self) -> list[str]:
        """The hidden check's argv with ``{case_dir}`` replaced in every element."""
        return [part.replace(CASE_DIR, str(self.directory)) for part in self.check]

    def model_spec(self, spec: str) -> str:
        """``scripted:oracle`` means this case's own oracle; any other spec is used as is."""
        if spec != "scripted:oracle":
            return spec
        if self.oracle is None:
            raise UsageError(
                f"case {self.name}: --model scripted:oracle needs an oracle file "
                f"in {self.directory / CASE_FILE}"
            )
        return f"scripted:{self.oracle}"


def find_cases(paths: list[str]) -> list[Case]:
    """Each path is a case directory, or a directory whose subdirectories are cases (every
    subdirectory holding a ``case.yml``, in name order)."""
    cases: list[Case] = []
    for text in paths:
        path = Path(text).resolve()
        if (path / CASE_FILE).is_file():
            cases.append(load_case(path))
            continue
        if not path.is_dir():
            raise UsageError(f"{text}: not a directory")
        found = sorted(p for p in path.iterdir() if (p / CASE_FILE).is_file())
        if not found:
            raise UsageError(f"{text}: no {CASE_FILE} in it or in its subdirectories")
        cases.extend(load_case(p) for p in found)
    names = [c.name for c in cases]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(
            f"two cases are named {', '.join(twice)}: case directory names must "
            "be unique within one run"
        )
    return cases


def _read_case_file(directory: Path, fail: Callable[[str], UsageError]) -> dict[str, Any]:
    try:
        data = yaml.safe_load((directory / CASE_FILE).read_text())
    except OSError as exc:
        raise fail(f"cannot read it: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise fail(f"not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise fail(f"must be a mapping with {', '.join(FIELDS)}")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise fail(f"unknown field(s) {', '.join(map(str, unknown))}; known: {', '.join(FIELDS)}")
    return data


def _goal_and_commands(
    data: dict[str, Any], fail: Callable[[str], UsageError]
) -> tuple[str, list[list[str]], list[str]]:
    goal = data.get("goal")
    if not isinstance(goal, str) or not goal.strip():
        raise fail("goal must be a non-blank string")
    validators = data.get("validators", [])
    if not isinstance(validators, list) or not all(_is_argv(v) for v in validators):
        raise fail("validators must be a list of argv lists (non-empty lists of strings)")
    check = data.get("check")
    if not isinstance(check, list) or not _is_argv(check):
        raise fail("check must be an argv list (a non-empty list of strings)")
    return goal, validators, check


def load_case(directory: Path) -> Case:
    directory = directory.resolve()
    where = f"case {directory.name} ({directory / CASE_FILE})"

    def fail(problem: str) -> UsageError:
        return UsageError(f"{where}: {problem}")

    data = _read_case_file(directory, fail)
    goal, validators, check = _goal_and_commands(data, fail)
    limits = data.get("limits") or {}
    if not isinstance(limits, dict):
        raise fail("limits must be a mapping NAME: VALUE")
    try:
        Limits.from_dict(limits)
    except ValueError as exc:
        raise fail(str(exc)) from None
    oracle = data.get("oracle")
    if oracle is not None:
        if not isinstance(oracle, str) or not (directory / oracle).is_file():
            raise fail(f"oracle {oracle!r} is not a file beside {CASE_FILE}")
        oracle = (directory / oracle).resolve()
    if not (directory / "repo").is_dir():
        raise fail("a case needs a repo/ directory (the working tree)")
    return Case(
        name=directory.name,
        directory=directory,
        goal=goal,
        validators=validators,
        check=check,
        limits=limits,
        oracle=oracle,
    )


def _is_argv(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(part, str) and part for part in value)
    )
