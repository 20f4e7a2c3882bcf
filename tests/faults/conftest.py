"""The fault suite's report: every test adds its figures; the terminal summary prints them
and ``RIO_FAULT_REPORT=FILE`` also writes them as JSON (docs/durability.md quotes a run).
Under pytest-xdist each worker hands its part to the controller, which prints the whole.

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
    fstype = subprocess.run(
        ["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True, check=False
    ).stdout.strip()
    if fstype in ("tmpfs", "ramfs"):
        pytest.fail(f"{tmp_path} is on {fstype}; run the fault suite with --basetemp on a disk")
    return tmp_path


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker's part of the report goes back to the controller with the worker's output."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["fault_report"] = json.dumps(REPORT)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller gathers each worker's part (hook of pytest-xdist); a part that several
    tests fill (the I/O errors) may come from several workers."""
    part = json.loads(getattr(node, "workeroutput", {}).get("fault_report", "{}"))
    for name, figures in part.items():
        if isinstance(figures, dict) and isinstance(REPORT.get(name), dict):
            REPORT[name].update(figures)
        else:
            REPORT[name] = figures


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not REPORT:
        return
    terminalreporter.section("fault injection report")
    for name, figures in REPORT.items():
        terminalreporter.write_line(f"{name}: {json.dumps(figures, sort_keys=True)}")
    target = os.environ.get("RIO_FAULT_REPORT")
    if target:
        Path(target).write_text(json.dumps(REPORT, indent=2, sort_keys=True) + "\n")
