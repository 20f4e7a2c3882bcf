"""The tests that once raced the clock, run again with every core kept busy.

A busy loop per core stands in for a shared CI machine. The default suite runs the two short
ones once that way (the bounded form: the hogs hold every core of the suite's machine for as
long as they run); ``--long`` runs all three ``LONG_REPEATS`` times in a row.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kit import cli_env

ROOT = Path(__file__).resolve().parents[2]
SHORT = (
    "tests/run/test_owner.py::test_output_is_committed_while_the_script_runs",
    "tests/session/test_controls.py::test_cancel_while_another_cell_occupies_the_slot_is_handled_at_once",
)
LOAD_SENSITIVE = (
    *SHORT,
    "tests/github/test_action_sweep.py::"
    "test_a_timer_set_in_one_job_is_swept_when_due_and_resumes_the_session",
)
LONG_REPEATS = 20

pytestmark = pytest.mark.slow


@pytest.fixture
def busy_cores() -> Iterator[int]:
    count = os.cpu_count() or 1
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield count
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _run(tests: tuple[str, ...] = LOAD_SENSITIVE) -> subprocess.CompletedProcess[str]:
    """One pytest run of ``tests``. A repeat is a run of its own: pytest collapses a node id
    given twice on its command line, even with ``--keep-duplicates``."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", *tests],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=600,
        check=False,
    )


def test_the_short_load_sensitive_tests_pass_with_every_core_busy(busy_cores: int) -> None:
    done = _run(SHORT)
    assert done.returncode == 0, done.stdout[-4000:]
    assert f"{len(SHORT)} passed" in done.stdout


@pytest.mark.long
def test_the_load_sensitive_tests_pass_many_times_in_a_row_with_every_core_busy(
    busy_cores: int,
) -> None:
    for repeat in range(1, LONG_REPEATS + 1):
        done = _run()
        assert done.returncode == 0, f"repeat {repeat}:\n{done.stdout[-4000:]}"
        assert f"{len(LOAD_SENSITIVE)} passed" in done.stdout, f"repeat {repeat}: {done.stdout}"
