"""SIGKILL at every named crash point (and its N-th occurrence) of a real workload, then
recovery: every acknowledged commit is there, nothing is half-applied, no Cell ran twice, a
``started`` Cell became ``UnknownExecution``, a second recovery commits nothing, Timers fire
once, Inbox messages are consumed exactly once, and the workload still succeeds.

The default run crashes at the first and the last occurrence of every point (and at a spread
of commits for the two generic ``journal_*`` points); ``--long`` crashes at every occurrence.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rio_ci.faults.crashpoints import POINTS
from tests.faults import checks, runner
from tests.faults.workload import setup

PARALLEL = 4  # drivers mostly wait on Workers and Timers; 4 at a time suit 2 cores
GENERIC = ("journal_before_commit", "journal_after_commit")
GENERIC_SAMPLE = 3  # commits sampled per generic point in the default run
# Points a clean run never passes: they are reached by a recovery from an earlier crash
# (the "prelude"), so they are crashed a second time while recovering.
PRELUDE = "script_running:1"
AFTER_A_CRASH = (
    "recovery_midway",
    "recovery_after_commit",
    "journal_before_commit",
    "journal_after_commit",
)


@dataclass
class Case:
    point: str
    nth: int
    prelude: str | None = None
    landed: bool = False
    violations: list[str] = field(default_factory=list)


def cases(counts: dict[str, int], long: bool) -> list[Case]:
    chosen = [Case(point, 1, PRELUDE) for point in AFTER_A_CRASH]
    for point in POINTS:
        total = counts.get(point, 0)
        if long:
            picks = set(range(1, total + 1))
        elif point in GENERIC:
            step = max(1, total // GENERIC_SAMPLE)
            picks = {1, total, *range(step, total, step)}
        else:
            picks = {1, total}
        chosen += [Case(point, n) for n in sorted(picks) if n >= 1]
    return chosen


def crash_and_recover(base: Path, case: Case) -> Case:
    directory = base / f"{case.point}-{case.nth}{'-again' if case.prelude else ''}"
    setup(directory)
    if case.prelude:
        first = runner.drive("run", directory, RIO_CRASH_AT=case.prelude)
        if first.code != -9:
            case.violations.append(f"the prelude crash {case.prelude} did not fire")
            return case
    crashed = runner.drive("run", directory, RIO_CRASH_AT=f"{case.point}:{case.nth}")
    case.landed = crashed.code == -9
    if not case.landed:
        # Timing decides some counts (output flushes): the N-th pass did not come this time.
        if crashed.code != 0:
            case.violations.append(f"the driver failed without a crash: {crashed.err[-800:]}")
        return case
    started = checks.started_cells(directory)
    recovered = runner.drive("recover", directory)
    if recovered.code != 0 or not isinstance(recovered.out, dict):
        case.violations.append(f"recovery failed: {recovered.err[-800:]}")
        return case
    if recovered.out["second"]:
        case.violations.append(f"a second recovery committed {recovered.out['second']} events")
    results = {
        e["cell_id"]: e["result"]["type"]
        for e in checks.events_of(directory)
        if e["kind"] == "execution_finished"
    }
    for cell in sorted(started):
        if results.get(cell) != "UnknownExecution":
            case.violations.append(
                f"Cell {cell} was started at the crash; after recovery "
                f"it is {results.get(cell)}, not UnknownExecution"
            )
    case.violations += checks.violations(directory, final=False)
    resumed = runner.drive("run", directory)
    if resumed.code != 0:
        case.violations.append(
            f"the resumed run did not succeed: {resumed.out} {resumed.err[-800:]}"
        )
    case.violations += checks.violations(directory, final=True)
    return case


def test_every_crash_point_on_a_real_workload(
    disk_path: Path, long_run: bool, fault_report: dict[str, Any]
) -> None:
    # A dry run: the workload itself must be clean, and it counts each point's passes.
    dry = disk_path / "dry"
    setup(dry)
    counts_file = disk_path / "counts.json"
    done = runner.drive("run", dry, RIO_FAULT_COUNT=str(counts_file))
    assert done.code == 0, done.err
    assert checks.violations(dry, final=True) == []
    counts: dict[str, int] = json.loads(counts_file.read_text())
    unreached = [p for p in POINTS if not counts.get(p) and p not in AFTER_A_CRASH]
    assert not unreached, f"the workload never passes {unreached}: extend it"

    todo = cases(counts, long_run)
    with ThreadPoolExecutor(PARALLEL) as pool:
        results = list(pool.map(lambda c: crash_and_recover(disk_path, c), todo))

    landed = [c for c in results if c.landed]
    fault_report["crash points"] = {
        "points": len(POINTS),
        "cases": len(results),
        "landed": len(landed),
        "occurrences_in_workload": sum(counts.get(p, 0) for p in POINTS),
        "violations": sum(len(c.violations) for c in results),
        "landed_per_point": {p: sum(c.landed for c in landed if c.point == p) for p in POINTS},
    }
    bad = {f"{c.prelude or ''} {c.point}:{c.nth}": c.violations for c in results if c.violations}
    assert not bad, json.dumps(bad, indent=1)
    never = sorted(
        {c.point for c in results if c.nth == 1 and not c.landed}
        - {c.point for c in results if c.landed}
    )
    assert not never, f"crash points that never fired at their first pass: {never}"
