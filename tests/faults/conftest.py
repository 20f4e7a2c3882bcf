"""The fault suite's report: every test adds its figures; the terminal summary prints them
and ``RIO_FAULT_REPORT=FILE`` also writes them as JSON (docs/durability.md quotes a run).

``--long`` (defined in tests/conftest.py) switches the suite to its long form.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPORT: dict[str, Any] = {}


@pytest.fixture(scope="session")
def fault_report() -> dict[str, Any]:
    return REPORT


@pytest.fixture
def long_run(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--long", default=False))


@pytest.fixture
def disk_path(tmp_path: Path) -> Path:
    """``tmp_path``, after checking it is a real disk: fsync means nothing on tmpfs."""
    fstype = subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True,
                            text=True, check=False).stdout.strip()
    if fstype in ("tmpfs", "ramfs"):
        pytest.fail(f"{tmp_path} is on {fstype}; run the fault suite with --basetemp on a disk")
    return tmp_path


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not REPORT:
        return
    terminalreporter.section("fault injection report")
    for name, figures in REPORT.items():
        terminalreporter.write_line(f"{name}: {json.dumps(figures, sort_keys=True)}")
    target = os.environ.get("RIO_FAULT_REPORT")
    if target:
        Path(target).write_text(json.dumps(REPORT, indent=2, sort_keys=True) + "\n")
