"""The project's own checks run with the tests: ruff, mypy --strict, the public API."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed next to {sys.executable}: pip install -e '.[test]'")
    return found


def test_ruff_is_clean() -> None:
    done = subprocess.run(
        [_tool("ruff"), "check", "."], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:]


def test_ruff_format_is_applied() -> None:
    done = subprocess.run(
        [_tool("ruff"), "format", "--check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:]


@pytest.mark.slow
def test_mypy_strict_is_clean() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "rio_ci"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:]


def test_changelog_has_an_unreleased_section() -> None:
    assert "## Unreleased" in (ROOT / "CHANGELOG.md").read_text()


def test_readme_commands_match_ci() -> None:
    readme = (ROOT / "README.md").read_text().splitlines()
    commands = [line.strip("`") for line in readme[:8] if line.startswith("`")]
    assert len(commands) == 2 and "rio-ci demo" in commands[0]
    assert commands[1] in (ROOT / ".ci" / "run").read_text()
