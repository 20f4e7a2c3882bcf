"""``rio-ci bench``: one quick run as a real subprocess; every figure is present and a finite
measured number (its value is not checked: that is the bench's job, not the test's); the
storage chart is drawn; no Worker survives an idle Owner; a memory-backed file system is
refused."""

from __future__ import annotations

import itertools
import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import run_cli

from rio_ci.commands.bench import GOALS, MEMORY_FILE_SYSTEMS, file_system
from tests.kit import ROOT

# Every figure the bench reports, by the part that measures it.
FIGURES = [
    # commits
    "step_commit_ms_p50",
    "step_commit_ms_p95",
    "bare_commit_ms_p50",
    "bare_commit_ms_p95",
    "ratio_step_commit",
    "ratio_step_commit_p95",
    "step_sql_ms_p50",
    "ratio_step_sql_commit",
    "step_samples",
    "round_bookkeeping_ms_p50",
    "round_bookkeeping_ms_p95",
    "round_bookkeeping_commits",
    "ratio_round_bookkeeping",
    "round_samples",
    "unsynced_commit_ms_after_fold",
    "unsynced_commit_ms",
    # storage
    "session_bytes_per_round",
    "content_bytes_per_round",
    "wal_bytes_per_round",
    "ratio_bytes_per_round",
    "storage_rounds",
    "open_build_seconds",
    "open_ms_1k",
    "open_ms_10k",
    "open_ms_100k",
    "owner_open_ms_1k",
    "owner_open_ms_10k",
    "owner_open_ms_100k",
    "owner_open_ms_100k_in_doubt",
    "ratio_open_100k_1k",
    "ratio_owner_open_100k_1k",
    "events_1k",
    "events_10k",
    "events_100k",
    "state_bytes_1k",
    "state_bytes_10k",
    "state_bytes_100k",
    "session_bytes_1k",
    "session_bytes_10k",
    "session_bytes_100k",
    "finish_seconds_300_rounds",
    "restore_seconds_300_rounds",
    "session_bytes_300_rounds",
    "artifact_bytes_300_rounds",
    # cells
    "code_cell_ms_owner_first",
    "code_cell_ms_uv_first",
    "code_cell_ms_owner",
    "code_cell_ms_uv",
    "cmd_cell_ms_owner",
    "cmd_cell_ms_bare",
    "ratio_code_cell_vs_uv",
    "overhead_ms_cmd_cell",
    "overhead_ms_cmd_cell_floor",
    "write_transactions_silent_cell",
    "inbox_to_turn_ms_p50",
    "inbox_to_turn_ms_p95",
    "recovery_ms",
    "recovery_samples",
    "idle_owner_rss_mib",
    "idle_owner_cpu_percent",
    "idle_worker_processes",
    # the GitHub layer
    "launch_record_ms",
]
# A figure that may be zero when nothing is wrong (an overhead can measure as negative).
MAY_BE_ZERO = {"idle_owner_cpu_percent", "idle_worker_processes", "overhead_ms_cmd_cell"}


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    where = tmp_path_factory.mktemp("bench")
    if file_system(where)["type"] in MEMORY_FILE_SYSTEMS:
        where = ROOT  # the bench measures in a folder of its own and removes it
    if file_system(where)["type"] in MEMORY_FILE_SYSTEMS:
        pytest.skip("no disk-backed folder to measure durability in")
    chart = tmp_path_factory.mktemp("chart") / "size.svg"
    done = run_cli("bench", "--json", "--quick", "--dir", where, "--chart", chart, timeout=240)
    assert done.code == 0, (done.stdout[-2000:], done.err[-2000:])
    assert isinstance(done.out, dict), done.stdout[-2000:]
    return done.out, chart


@pytest.fixture(scope="module")
def figures(bench: tuple[dict[str, Any], Path]) -> dict[str, Any]:
    return bench[0]


@pytest.mark.slow
def test_every_figure_is_a_finite_number(figures: dict[str, Any]) -> None:
    assert [key for key in FIGURES if key not in figures] == []
    assert {key: figures[key] for key in FIGURES if not finite(figures[key])} == {}
    # A duration, size or ratio of zero or less could only be a figure not measured.
    assert {
        key: figures[key] for key in FIGURES if key not in MAY_BE_ZERO and not figures[key] > 0
    } == {}
    assert 0 <= figures["idle_owner_cpu_percent"] <= 100


@pytest.mark.slow
def test_goals_name_measured_figures(figures: dict[str, Any]) -> None:
    assert set(figures["goals"]) == {name for name, _, _ in GOALS}
    for name, goal in figures["goals"].items():
        assert name in FIGURES and isinstance(goal["met"], bool)


@pytest.mark.slow
def test_the_chart_draws_this_tree_from_measured_points(bench: tuple[dict[str, Any], Path]) -> None:
    figures, chart = bench
    svg = ET.parse(chart).getroot()
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    # this tree's Session size, and the rounds' new content for comparison
    assert len(lines) == len(figures["chart"]["bytes_per_round"]) == 2
    for line in lines:
        points = [tuple(map(float, p.split(","))) for p in line.attrib["points"].split()]
        assert len(points) > 2
        assert all(b[0] > a[0] and b[1] < a[1] for a, b in itertools.pairwise(points))  # grows
    assert all(size > 0 for size in figures["chart"]["bytes_per_round"].values())


@pytest.mark.slow
def test_no_worker_outlives_an_idle_owner(figures: dict[str, Any]) -> None:
    assert figures["idle_worker_processes"] == 0


@pytest.mark.slow
def test_long_sessions_are_full_size_with_a_bounded_context(figures: dict[str, Any]) -> None:
    assert figures["events_1k"] >= 1_000 and figures["events_100k"] >= 100_000
    # The State shown to the model does not grow with the Journal.
    assert figures["state_bytes_100k"] <= 2 * figures["state_bytes_1k"]
    assert figures["session_bytes_100k"] > figures["session_bytes_1k"]


@pytest.mark.slow
def test_the_file_system_is_named(figures: dict[str, Any]) -> None:
    assert figures["filesystem"]["type"] not in MEMORY_FILE_SYSTEMS
    assert figures["filesystem"]["type"] != "unknown"


def test_a_chart_line_needs_a_source_tree(tmp_path: Path) -> None:
    done = run_cli(
        "bench",
        "--json",
        "--quick",
        "--dir",
        tmp_path,
        "--chart",
        tmp_path / "c.svg",
        "--before",
        f"old={tmp_path}",
    )
    assert done.code == 2 and "--before expects LABEL=DIR" in done.out["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # refused before measuring


def _writable_tmpfs() -> Path | None:
    mounts = [
        Path(p.mountpoint)
        for p in psutil.disk_partitions(all=True)
        if p.fstype == "tmpfs" and os.access(p.mountpoint, os.W_OK)
    ]
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
