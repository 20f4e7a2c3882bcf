"""The runner the run step finds itself on, reported before anything else (docs/github.md,
"The runner"): the image (``ImageOS`` and ``ImageVersion``, which GitHub's images set), the
sudo on PATH, whether Cells run as their own user, and git's version. A git older than the
features rio-ci's own git calls use is refused with one line.

What rio-ci assumes of each image is data, ``runners.json``, each fact with its source.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from rio_ci.core.errors import UsageError
from rio_ci.core.text import escape_control
from rio_ci.egress import netns
from rio_ci.github.contract import ActionInputs, log
from rio_ci.run.confinement.sudo import SudoFound, find_sudo
from rio_ci.run.confinement.user import separation_problem
from rio_ci.untrusted import programs
from rio_ci.untrusted.gitenv import git_environment

__all__ = [
    "Runner",
    "image_of",
    "minimum_git",
    "report",
    "runners",
    "sudo_line",
    "version_of_git",
]

Version = tuple[int, ...]
_GIT_VERSION = re.compile(r"git version (\d+)\.(\d+)(?:\.(\d+))?")


@cache
def runners() -> dict[str, Any]:
    """``runners.json``: what rio-ci assumes of each GitHub-hosted image, with sources."""
    text = resources.files("rio_ci.github").joinpath("runners.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def minimum_git() -> Version:
    return _version(runners()["git"]["minimum"])


def _version(text: str) -> Version:
    return tuple(int(part) for part in text.split("."))


def _dotted(version: Version) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class Runner:
    """One line each: the image, the sudo found, where Cells run, git."""

    image: str
    sudo: str
    cells: str
    git: str

    def rows(self) -> list[tuple[str, str]]:
        """(name, value) pairs, each value one line with control characters escaped (an
        image's variables are the runner's to set)."""
        values = [("image", self.image), ("sudo", self.sudo), ("Cells", self.cells)]
        return [(k, escape_control(" ".join(v.split()))) for k, v in [*values, ("git", self.git)]]


def image_of(environ: Mapping[str, str]) -> tuple[str, dict[str, Any] | None]:
    """The image in words, and what ``runners.json`` says of it (None: not one it lists)."""
    name = environ.get("ImageOS", "").strip()
    version = environ.get("ImageVersion", "").strip()
    if not name:
        return "self-hosted (no ImageOS)", None
    known = runners()["images"].get(name)
    label = known["label"] if known else f"{name}, an image rio-ci does not list"
    return (f"{label} (image {version})" if version else label), known


def version_of_git() -> Version | None:
    """The version of the ``git`` rio-ci runs, None when there is none or it says nothing
    rio-ci can read."""
    git = programs.find("git")  # the git the harness runs, never one of the checkout's
    if git is None:
        return None
    try:
        done = subprocess.run(
            [git, "--version"],
            env=git_environment(),  # no GIT_* of the job's, as every git rio-ci runs
            capture_output=True,
            text=True,
            errors="replace",
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    matched = _GIT_VERSION.search(done.stdout)
    if done.returncode != 0 or matched is None:
        return None
    return tuple(int(part or 0) for part in matched.groups())


def sudo_line(found: SudoFound, image: dict[str, Any] | None) -> str:
    """The sudo found, and the image's own when it is another implementation."""
    text = found.describe()
    if image is not None and found.kind is not None:
        expected = image["sudo"]["implementation"]
        if found.kind != expected:
            text += f" (the image's sudo is {'classic sudo' if expected == 'sudo' else expected})"
    return text


def _cells(env: ActionInputs) -> str:
    """As whom Cells run, and in whose network (docs/network.md)."""
    cell_user = env.confinement.cell_user
    if cell_user is None:
        return "run as the harness's user (cell-user: none), on the host's network"
    problem = separation_problem()
    if problem is not None:
        return f"share the harness's user ({problem}), on the host's network"
    problem = netns.problem()
    if problem is not None:
        return f"run as their own user, {cell_user}, on the host's network ({problem})"
    return f"run as their own user, {cell_user}, in a network of their own (the egress proxy)"


def _cell(value: str) -> str:
    return value.replace("|", "\\|")  # a table cell of the step summary


def report(env: ActionInputs, environ: Mapping[str, str]) -> Runner:
    """Find the runner, say it in the log and the step summary, and refuse a git older
    than ``minimum_git()`` (a UsageError: the run step ends with that one line)."""
    image, known = image_of(environ)
    git = version_of_git()
    runner = Runner(
        image=image,
        sudo=sudo_line(find_sudo(), known),
        cells=_cells(env),
        git=_dotted(git) if git else "none found",
    )
    log("rio-ci: runner: " + "; ".join(f"{name} {value}" for name, value in runner.rows()))
    if env.summary is not None:
        lines = ["| runner | |", "| --- | --- |"]
        lines += [f"| {name} | {_cell(value)} |" for name, value in runner.rows()]
        with env.summary.open("a") as stream:
            stream.write("\n".join(lines) + "\n\n")
    needed = minimum_git()
    if git is None or git < needed:
        raise UsageError(
            f"git {runner.git} on this runner: rio-ci needs git {_dotted(needed)} or later "
            "(its own git takes its settings from GIT_CONFIG_COUNT and GIT_CONFIG_GLOBAL and "
            "turns fsmonitor off as a boolean); install a newer git"
        )
    return runner
