"""``rio-ci bench``: one quick run as a real subprocess; every figure is present, measured and
plausible; no Worker survives an idle Owner; a memory-backed file system is refused."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import ROOT, run_cli

from rio_ci.commands.bench import GOALS, MEMORY_FILE_SYSTEMS, file_system

# Durations, sizes and ratios: a zero or negative value could only be a figure not measured.
POSITIVE = [
    "step_commit_ms_p50", "step_commit_ms_p95", "bare_commit_ms_p50", "bare_commit_ms_p95",
    "ratio_step_commit",
    "open_ms_1k", "open_ms_10k", "open_ms_100k", "ratio_open_100k_1k",
    "owner_open_ms_1k", "owner_open_ms_100k", "state_bytes_1k", "state_bytes_100k",
    "code_cell_ms_owner", "code_cell_ms_uv", "ratio_code_cell_vs_uv",
    "cmd_cell_ms_owner", "cmd_cell_ms_bare", "overhead_ms_cmd_cell",
    "inbox_to_turn_ms_p50", "inbox_to_turn_ms_p95", "recovery_ms", "idle_owner_rss_mib",
    "launch_record_ms",
]


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    where = tmp_path_factory.mktemp("bench")
    if file_system(where)["type"] in MEMORY_FILE_SYSTEMS:
        where = ROOT  # the bench measures in a folder of its own and removes it
    if file_system(where)["type"] in MEMORY_FILE_SYSTEMS:
        pytest.skip("no disk-backed folder to measure durability in")
    done = run_cli("bench", "--json", "--quick", "--dir", where, timeout=60)
    assert done.code == 0, (done.stdout[-2000:], done.err[-2000:])
    assert isinstance(done.out, dict), done.stdout[-2000:]
    return done.out


def test_every_figure_is_a_measured_number(figures: dict[str, Any]) -> None:
    missing = [key for key in POSITIVE if key not in figures]
    assert missing == []
    not_measured = {key: figures[key] for key in POSITIVE
                    if isinstance(figures[key], bool) or not isinstance(figures[key], int | float)
                    or not figures[key] > 0}
    assert not_measured == {}
    assert 0 <= figures["idle_owner_cpu_percent"] <= 100


def test_goals_name_measured_figures(figures: dict[str, Any]) -> None:
    assert set(figures["goals"]) == {name for name, _, _ in GOALS}
    for name, goal in figures["goals"].items():
        assert name in figures and isinstance(goal["met"], bool)


def test_no_worker_outlives_an_idle_owner(figures: dict[str, Any]) -> None:
    assert figures["idle_worker_processes"] == 0


def test_long_sessions_are_full_size_with_a_bounded_context(figures: dict[str, Any]) -> None:
    assert figures["events_1k"] >= 1_000 and figures["events_100k"] >= 100_000
    # The State shown to the model does not grow with the Journal.
    assert figures["state_bytes_100k"] <= 2 * figures["state_bytes_1k"]
    assert figures["session_bytes_100k"] > figures["session_bytes_1k"]


def test_the_file_system_is_named(figures: dict[str, Any]) -> None:
    assert figures["filesystem"]["type"] not in MEMORY_FILE_SYSTEMS
    assert figures["filesystem"]["type"] != "unknown"


def _writable_tmpfs() -> Path | None:
    mounts = [Path(p.mountpoint) for p in psutil.disk_partitions(all=True)
              if p.fstype == "tmpfs" and os.access(p.mountpoint, os.W_OK)]
    return Path("/dev/shm") if Path("/dev/shm") in mounts else next(iter(mounts), None)


def test_durability_is_not_measured_on_tmpfs(tmp_path: Path) -> None:
    tmpfs = _writable_tmpfs()
    if tmpfs is None:
        pytest.skip("no writable tmpfs on this machine")
    before = set(tmpfs.iterdir())
    done = run_cli("bench", "--json", "--quick", "--dir", tmpfs, timeout=60)
    assert done.code != 0
    assert "tmpfs" in done.out["error"] and "refusing" in done.out["error"]
    assert set(tmpfs.iterdir()) == before  # refused before writing anything
