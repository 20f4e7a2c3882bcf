"""The environment block: where the model is, told with every request (docs/models.md).

The date and the current Unix time (a Timer is set by Unix time, and the model has no clock),
the OS, the Python version, the working directory and the head of the working tree's
``git status --short``. It changes every request, so a Turn is read with it after the State
(rio_ci/model/turn.py), past the prefix a provider caches.

The tree is writable by the Cells, ``.git/config`` included, so git runs as if that were
hostile (``rio_ci.untrusted.gitenv``: no system or global configuration, no fsmonitor, no untracked
cache, no hooks, none of the process's secrets, the harness's own ``PATH``; git itself as
``rio_ci.untrusted.programs`` found it, never a ``git`` of the tree's), and here also with no
optional locks, no submodules and a timeout; and when the tree's configuration declares filter
drivers (a program git would run to read a file), status is not run at all. Any failure becomes one
line, "git status unavailable: why", never an error of the run.
"""

from __future__ import annotations

import platform
import subprocess
import time
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path

from rio_ci.untrusted import programs
from rio_ci.untrusted.gitenv import HARDENED, git_environment

__all__ = ["ENVIRONMENT_HEADER", "STATUS_BYTES", "STATUS_LINES", "environment_block", "git_status"]

ENVIRONMENT_HEADER = "ENVIRONMENT (as of this request)"
STATUS_LINES = 40
STATUS_BYTES = 4096
GIT_TIMEOUT = 5.0


def environment_block(cwd: Path, now: float | None = None, *, secrets: Collection[str] = ()) -> str:
    """The block's text for a request made at ``now`` (default: the current time).
    ``secrets``: the Session's ``--secret`` names, which git is not given either."""
    when = time.time() if now is None else now
    stamp = datetime.fromtimestamp(when, UTC)
    lines = [
        ENVIRONMENT_HEADER,
        f"date: {stamp.date().isoformat()} (UTC; {stamp.strftime('%Y-%m-%dT%H:%M:%SZ')})",
        f"unix time: {int(when)}",
        f"os: {platform.platform()}",
        f"python: {platform.python_version()} ({platform.python_implementation()})",
        f"working directory: {cwd}",
        "git status --short:",
        git_status(cwd, secrets=secrets),
    ]
    return "\n".join(lines)


def git_status(cwd: Path, *, secrets: Collection[str] = ()) -> str:
    """The head of ``git status --short`` in ``cwd`` (clipped at ``STATUS_LINES`` lines and
    ``STATUS_BYTES`` bytes, with a marker), "(clean)" when empty, else why it is unavailable."""
    git = programs.find("git")
    if git is None:
        return f"git status unavailable: {programs.missing('git')}"
    try:
        filters = _git(git, cwd, secrets, "config", "--includes", "--get-regexp", r"^filter\.")
        if filters.stdout.strip():
            return (
                "git status unavailable: the tree's git configuration declares filter drivers, "
                "which the harness does not run"
            )
        done = _git(git, cwd, secrets, "status", "--short", "--ignore-submodules=all")
    except subprocess.TimeoutExpired:
        return f"git status unavailable: timed out after {GIT_TIMEOUT:g} s"
    except OSError as exc:
        return f"git status unavailable: {exc.strerror or exc}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return f"git status unavailable: {last[:300]}"
    return _clipped(done.stdout)


def _git(
    git: str, cwd: Path, secrets: Collection[str], *args: str
) -> subprocess.CompletedProcess[str]:
    # No optional locks: status, run for the model's eyes only, must never write the index.
    # HARDENED goes on the command line too, which every git honours (GIT_CONFIG_COUNT
    # needs git 2.31).
    hardened = [arg for key, value in HARDENED for arg in ("-c", f"{key}={value}")]
    return subprocess.run(
        [git, *hardened, *args],
        cwd=cwd,
        env=git_environment(dropped=secrets, GIT_OPTIONAL_LOCKS="0"),
        capture_output=True,
        text=True,
        errors="replace",
        timeout=GIT_TIMEOUT,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _clipped(text: str) -> str:
    lines = text.rstrip("\n").splitlines()
    if not lines:
        return "(clean)"
    shown: list[str] = []
    size = 0
    for line in lines[:STATUS_LINES]:
        size += len(line.encode()) + 1
        if size > STATUS_BYTES:
            break
        shown.append(line)
    more = len(lines) - len(shown)
    if more:
        shown.append(f"[… {more} more lines not shown]")
    return "\n".join(shown)
