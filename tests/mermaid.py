"""The real Mermaid parser, for tests: the npm packages ``mermaid`` and ``jsdom`` installed into
a cache directory outside the repository (``~/.cache/rio-ci-tests/mermaid``, or
``$RIO_CI_MERMAID_DIR``), never into it. Where node or npm is missing, or the packages cannot
be installed, the test that asks is skipped with the reason."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

PACKAGES = ("mermaid@11.17.2", "jsdom@29.1.1")
CHECKER = Path(__file__).with_name("mermaid_check.mjs")


def _home() -> Path:
    given = os.environ.get("RIO_CI_MERMAID_DIR")
    return Path(given) if given else Path.home() / ".cache" / "rio-ci-tests" / "mermaid"


def parser_dir() -> Path:
    """The cache directory with the packages installed (installed on first use), or skip."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to check Mermaid text with the real parser")
    home = _home()
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".lock").open("w") as lock:  # xdist workers install it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        _install(home)
    shutil.copyfile(CHECKER, home / CHECKER.name)
    return home


def _install(home: Path) -> None:
    if not (home / "node_modules" / "mermaid" / "package.json").is_file():
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(home), *PACKAGES],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            pytest.skip(f"npm could not install {PACKAGES}: {done.stderr.strip()[-300:]}")


def parse(text: str) -> dict[str, Any]:
    """What the real parser understood of ``text``: ``{"type", "tasks"}`` or ``{"error"}``."""
    home = parser_dir()
    done = subprocess.run(
        ["node", str(home / CHECKER.name)],
        input=text,
        capture_output=True,
        text=True,
        cwd=home,
        timeout=120,
        check=False,
    )
    try:
        parsed: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise AssertionError(f"the Mermaid checker failed: {done.stderr[-2000:]}") from None
    return parsed


def blocks(markdown: str) -> list[str]:
    """The text of every fenced ``mermaid`` block in ``markdown``."""
    found, inside, lines = [], False, []
    for line in markdown.splitlines():
        if not inside and line.strip() == "```mermaid":
            inside, lines = True, []
        elif inside and line.strip() == "```":
            found.append("\n".join(lines) + "\n")
            inside = False
        elif inside:
            lines.append(line)
    return found
