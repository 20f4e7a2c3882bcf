"""``rio-ci bench``: the performance figures of docs/performance.md, measured on this machine.

Every figure is measured in this run. A ratio compares two things measured side by side,
interleaved (A B A B …) on the same disk, so a shared machine's drift hits both alike.
Commit figures mean nothing where ``fsync`` costs nothing, so a memory-backed file system
(tmpfs) is refused. See docs/performance.md.

The parts: ``commits`` (step, a round's bookkeeping), ``storage`` (bytes per round, long
Sessions, the artifact), ``cells`` (per-Execution overhead, silent Cells, recovery, idle),
``drive`` (the realistic round), ``chart`` (Session size against rounds, as SVG), ``egress``
(what the egress proxy costs a Cell), ``github_jobs`` (REST requests per job and artifact
bytes kept, against a loopback GitHub).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from rio_ci.commands.bench import chart
from rio_ci.commands.bench.baseline import SQLITE_VERSION
from rio_ci.commands.bench.cells import (
    measure_cells,
    measure_idle,
    measure_inbox,
    measure_recovery,
    measure_silent,
)
from rio_ci.commands.bench.commits import measure_rounds, measure_steps, measure_wal_checkpoint
from rio_ci.commands.bench.egress import measure_egress
from rio_ci.commands.bench.github_jobs import measure_github
from rio_ci.commands.bench.launches import measure_launch_record
from rio_ci.commands.bench.start import measure_start
from rio_ci.commands.bench.storage import measure_artifact, measure_open, measure_storage
from rio_ci.commands.bench.tokens import measure_tokens
from rio_ci.core.errors import UsageError

MEMORY_FILE_SYSTEMS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"}
# (figure, comparison, goal); the figures are never assumed (docs/performance.md).
# ``ratio_step_commit`` and the cmd Cell's overhead are regression guards: the
# first at 1.8 (its floor, a step's SQL, is 1.0-1.14 x the bare commit), the second against
# its own floor measured in the same run (``ratio_cmd_cell_vs_floor``).
GOALS = (
    ("ratio_step_commit", "<=", 1.8),
    ("ratio_round_bookkeeping", "<=", 5.0),
    ("ratio_bytes_per_round", "<=", 1.5),
    ("write_transactions_silent_cell", "<=", 3),
    ("ratio_open_100k_1k", "<=", 3.0),
    ("ratio_owner_open_100k_1k", "<=", 3.0),
    ("ratio_show_100k_1k", "<=", 3.0),
    ("ratio_show_json_100k_1k", "<=", 3.0),
    ("ratio_cmd_cell_vs_floor", "<=", 1.3),
    ("ratio_code_cell_vs_uv", "<=", 1.15),
    ("finish_seconds_300_rounds", "<=", 2.0),
    ("restore_seconds_300_rounds", "<=", 2.0),
    ("idle_owner_rss_mib", "<=", 30.0),
    ("idle_worker_processes", "==", 0),
    ("cache_read_share", ">=", 0.9),
    ("cost_ratio_vs_uncached", "<=", 0.3),
    ("ratio_start_vs_import_anthropic", "<=", 1.3),
    ("ratio_egress_install", "<=", 1.15),
    ("github_requests_wakeup_job", "<=", 10),
    ("ratio_artifact_bytes_20_vs_3_jobs", "<=", 1.2),
)
Measure = Callable[[Path, bool], dict[str, Any]]
# In this order; ``launches`` measures what the GitHub layer's write-ahead launch record
# adds to every launch (``launch_record_ms``, docs/github.md).
MEASURES: tuple[Measure, ...] = (
    measure_steps,
    measure_rounds,
    measure_wal_checkpoint,
    measure_storage,
    measure_open,
    measure_artifact,
    measure_cells,
    measure_silent,
    measure_inbox,
    measure_recovery,
    measure_idle,
    measure_launch_record,
    measure_tokens,
    measure_start,
    measure_egress,
    measure_github,
)
CHART_ROUNDS = 300


def bench_command(
    *,
    as_json: bool,
    quick: bool,
    directory: str | None,
    emit: Callable[[Any], None],
    chart_path: str | None = None,
    before: list[str] | None = None,
    cell_user: str | None = None,
) -> int:
    base = Path(directory or os.getcwd()).resolve()
    if not base.is_dir():
        raise UsageError(f"--dir {base}: not a directory")
    try:  # bench measures in a folder it makes there: fail now, not halfway through
        os.rmdir(tempfile.mkdtemp(prefix="rio-bench-probe-", dir=base))
    except OSError as exc:
        raise UsageError(f"--dir {base}: {exc.strerror}") from None
    trees = chart.parse_before(before or [])
    if trees and chart_path is None:
        raise UsageError("--before draws a line of the storage chart: give --chart too")
    fs = file_system(base)
    if fs["type"] in MEMORY_FILE_SYSTEMS:
        raise UsageError(
            f"refusing to measure durability on {fs['type']} ({base}, mounted at "
            f"{fs['mount']}): fsync costs nothing in memory, so commit figures would be "
            "meaningless. Give --dir a folder on a disk-backed file system."
        )
    say: Callable[[str], None] = (lambda line: None) if as_json else print
    say(
        f"rio-ci bench ({'quick' if quick else 'full'}) in {base}: file system {fs['type']} "
        f"({fs['device']} mounted at {fs['mount']})"
    )
    figures: dict[str, Any] = {
        "filesystem": fs,
        "quick": quick,
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "sqlite": SQLITE_VERSION,
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
    }
    root = Path(tempfile.mkdtemp(prefix="rio-bench-", dir=base))
    try:
        for measure in MEASURES:
            started = time.monotonic()
            figures.update(
                measure_cells(root, quick, cell_user)
                if measure is measure_cells
                else measure(root, quick)
            )
            say(
                f"  measured {measure.__name__.removeprefix('measure_')} in "
                f"{time.monotonic() - started:.1f} s"
            )
        if chart_path is not None:
            series = chart.growth(trees, root, *((60, 5) if quick else (CHART_ROUNDS, 10)))
            Path(chart_path).write_text(
                chart.svg(series, "Session size on disk against rounds played (bench drive)")
            )
            figures["chart"] = {
                "path": chart_path,
                "bytes_per_round": {
                    label: chart.per_round(points) for label, points in series.items()
                },
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures["goals"] = {
        name: {"goal": f"{op} {limit}", "met": met(figures[name], op, limit)}
        for name, op, limit in GOALS
    }
    if as_json:
        emit(figures)
    else:
        print(table(figures))
    return 0


def met(value: float, op: str, limit: float) -> bool:
    if op == "<=":
        return value <= limit
    if op == ">=":
        return value >= limit
    return value == limit


def file_system(path: Path) -> dict[str, str]:
    """The mount holding ``path``: the longest mount point that contains it."""
    best = max(
        (
            p
            for p in psutil.disk_partitions(all=True)
            if path == Path(p.mountpoint) or Path(p.mountpoint) in path.parents
        ),
        key=lambda p: len(p.mountpoint),
        default=None,
    )
    return {
        "path": str(path),
        "type": best.fstype if best else "unknown",
        "device": best.device if best else "unknown",
        "mount": best.mountpoint if best else "unknown",
    }


def table(figures: dict[str, Any]) -> str:
    lines = [f"measured in {figures['filesystem']['path']}", f"{'figure':<28} {'value':>12}  goal"]
    for key, value in figures.items():
        goal = figures["goals"].get(key)
        mark = "" if goal is None else f"{goal['goal']}  {'met' if goal['met'] else 'MISSED'}"
        if key not in ("filesystem", "goals", "machine", "quick"):
            lines.append(f"{key:<28} {json.dumps(value):>12}  {mark}")
    return "\n".join(lines)
