"""What every part of the bench shares: the trivial Cells, sampling and waiting."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil

from rio_ci.commands.bench.drive import NOTE, accept, patch_for
from rio_ci.run.survivors import TOKEN_VAR

__all__ = [
    "CMD",
    "CODE",
    "NOTE",
    "SCRIPT",
    "accept",
    "cli",
    "ms",
    "patch_for",
    "pct",
    "token_holders",
    "wait_for",
]

SCRIPT = "# /// script\n# dependencies = []\n# ///\nprint('hello from a trivial Cell')\n"
CODE: dict[str, Any] = {"kind": "code", "runtime": "python", "source": SCRIPT}  # trivial
CMD: dict[str, Any] = {"kind": "cmd", "argv": ["true"]}


def pct(samples: list[float], q: int) -> float:
    ordered = sorted(samples)
    return ordered[round(q / 100 * (len(ordered) - 1))]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench: timed out waiting for {what}")
        time.sleep(0.02)


def cli(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-I", "-m", "rio_ci", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def token_holders(prefix: str) -> int:
    """Live processes whose RIO_WORKER_TOKEN starts with ``prefix`` (one Session's)."""
    count = 0
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            count += (
                proc.environ().get(TOKEN_VAR, "").startswith(prefix)
                and proc.status() != psutil.STATUS_ZOMBIE
            )
    return count
