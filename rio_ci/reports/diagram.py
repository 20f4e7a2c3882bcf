"""A Session as a picture GitHub draws by itself: a Mermaid Gantt chart of its jobs, their
model rounds and the Executions they ran, with the cut-off and each resolution marked.

Each job is a section drawn from its own start, in time since that start: jobs hours apart do
not leave the chart empty, and the section's title names the gap since the job before. The
axis counts seconds, minutes or hours since the start, whichever keeps the widest job under
60 of them, drawn as Mermaid's seconds (a minute drawn as a second): GitHub formats the axis
in the viewer's time zone, and seconds are the one field no zone shifts. Its ticks are few
(``MAX_TICKS``) and their labels two to six characters, so they never run into each other.
An UnknownExecution's bar ends where its job was cut off.

Every label is our own words plus a few characters of what a Cell ran, reduced to a small
safe alphabet (ASCII letters, digits, space and ``._-/()=+,``), so nothing a model, a Cell or
an issue wrote can end the fenced block, start a Mermaid directive or comment (``%%``), add
a task (``:`` and line breaks are gone), or carry HTML. Long Sessions are bounded: only the
last ``MAX_ITEMS`` rows are drawn, and the text under the chart says how many were left out.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from rio_ci.core.timeline import Job, Run, Timeline

MAX_ITEMS = 40
LABEL_CHARS = 48
MAX_TICKS = 8
LEFT_PADDING = 160  # pixels for the section titles, left of the chart (Mermaid's default: 75)
# Tick spacings the axis may take, in drawn seconds, with Mermaid's name for each.
_TICKS = [(n / 1000, f"{n}millisecond") for n in (1, 2, 5, 10, 20, 50, 100, 200, 500)] + [
    (n, f"{n}second") for n in (1, 2, 5, 10, 15, 30)
]
# The axis's unit: real seconds per drawn second, and its name under the chart.
_UNITS = [(1, "seconds"), (60, "minutes"), (3600, "hours")]
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._/()=+,\-]+")


@dataclass(frozen=True)
class Row:
    section: str
    label: str
    tags: str  # "", "done", "crit", "active", "milestone" (comma-joined)
    start: float
    end: float
    origin: float = 0.0  # when its job started: the chart draws time since then


@dataclass(frozen=True)
class Axis:
    scale: float  # real seconds per drawn second
    unit: str  # what one drawn second is: seconds, minutes, hours
    format: str  # Mermaid's axisFormat: seconds only (``%S``), with milliseconds when short
    tick: str  # Mermaid's tickInterval


def label(text: str) -> str:
    """``text`` reduced to the safe alphabet, one line, clipped."""
    cleaned = " ".join(_UNSAFE.sub(" ", text).split())
    return cleaned[:LABEL_CHARS].rstrip() or "-"


def rows(timeline: Timeline, describe: dict[int, str]) -> list[Row]:
    """The chart's rows in time order: per job, its rounds and Executions, and the marks.
    ``describe``: Cell id -> a short text of what it ran."""
    out: list[Row] = []
    for job in timeline.jobs:
        section = section_title(timeline, job.number)
        mine: list[Row] = []
        for r in timeline.rounds:
            if r.job == job.number:
                end = r.decided_at or r.answered_at or job.ended_at
                tags = "active" if r.outcome == "open" else "done"
                mine.append(Row(section, f"round {r.number} model", tags, r.prepared_at, end))
        for run in timeline.runs.values():
            if run.job == job.number and run.started_at is not None:
                mine.append(_run_row(section, run, describe.get(run.cell_id, ""), job))
        mine.extend(_marks(timeline, job.number))
        mine.sort(key=lambda row: (row.start, row.end))
        out.extend(Row(r.section, r.label, r.tags, r.start, r.end, job.started_at) for r in mine)
    return out


def section_title(timeline: Timeline, number: int) -> str:
    """``job 1, 12-06 14.05 UTC``, ``job 2, 3 h 10 min later``: where the job sits in time,
    since each is drawn from its own start (a gap is counted from the end of the job
    before). Short enough for the chart's left margin (``LEFT_PADDING``)."""
    job = timeline.jobs[number - 1]
    if number == 1:
        return "job 1, " + time.strftime("%m-%d %H.%M UTC", time.gmtime(job.started_at))
    gap = max(0.0, job.started_at - timeline.jobs[number - 2].ended_at)
    return f"job {number}, {_gap(gap)} later"


def _gap(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min"
    if seconds < 86400:
        return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:.0f} min"
    return f"{seconds // 86400:.0f} d {seconds % 86400 // 3600:.0f} h"


def _run_row(section: str, run: Run, text: str, job: Job) -> Row:
    result = (run.result or {}).get("type")
    tags = {"UnknownExecution": "crit", None: "active"}.get(result, "done")
    name = f"cell {run.cell_id} {text}"
    end = run.finished_at or job.ended_at
    if result == "UnknownExecution":
        name = f"cell {run.cell_id} UnknownExecution {text}"
        end = _cut_off(run, job)
    assert run.started_at is not None
    return Row(section, name, tags, run.started_at, end)


def _cut_off(run: Run, job: Job) -> float:
    """Where an UnknownExecution's job was cut off: its last event when a later job found
    the Execution unfinished; the record itself when the job recorded it as it stopped."""
    if (run.finished_job or 0) > job.number:
        return job.ended_at
    return min(run.finished_at or job.ended_at, job.ended_at)


def _marks(timeline: Timeline, number: int) -> list[Row]:
    """Where job ``number`` was cut off, and the resolutions committed in it. A job whose
    Execution the next job found unfinished was cut off at its last event; one that was
    stopped (a signal, its time budget) recorded the UnknownExecution itself, at the cut."""
    marks = []
    job = timeline.jobs[number - 1]
    section = section_title(timeline, number)
    cuts = {_cut_off(r, job) for r in timeline.unknown() if r.job == number}
    for at in sorted(cuts)[:1]:  # one cut-off a job
        marks.append(Row(section, "cut off", "milestone", at, at))
    for run in timeline.unknown():
        res = run.resolution
        if res is not None and job.started_at <= res.at <= job.ended_at:
            marks.append(
                Row(
                    section,
                    f"cell {run.cell_id} resolved by note {res.note_id}",
                    "milestone",
                    res.at,
                    res.at,
                )
            )
    return marks


def gantt(timeline: Timeline, describe: dict[int, str], *, limit: int = MAX_ITEMS) -> str:
    """The Mermaid source (without the fence): each row at its time since its job's start."""
    shown = _shown(timeline, describe, limit)
    axis = axis_of(max((r.end - r.origin for r in shown), default=0.0))
    lines = [
        "---",
        "config:",
        "  gantt:",
        f"    leftPadding: {LEFT_PADDING}",
        "---",
        "gantt",
        "    dateFormat x",
        f"    axisFormat {axis.format}",
        f"    tickInterval {axis.tick}",
    ]
    section = None
    for index, row in enumerate(shown):
        if row.section != section:
            section = row.section
            lines.append(f"    section {label(section)}")
        start = max(0, round((row.start - row.origin) * 1000 / axis.scale))
        end = max(round((row.end - row.origin) * 1000 / axis.scale), start + 1)
        tags = f"{row.tags}, " if row.tags else ""
        lines.append(f"    {label(row.label)} :{tags}i{index}, {start}, {end}")
    return "\n".join(lines)


def _shown(timeline: Timeline, describe: dict[int, str], limit: int) -> list[Row]:
    every = rows(timeline, describe)
    return every[-limit:] if limit > 0 else []


def axis_of(span: float) -> Axis:
    """The axis of a chart whose widest job is ``span`` seconds: the smallest unit that keeps
    it under 60 of them, at most ``MAX_TICKS`` ticks."""
    scale, unit = next(((s, u) for s, u in _UNITS if span / s < 60), _UNITS[-1])
    drawn = span / scale
    tick = next((name for size, name in _TICKS if drawn / size <= MAX_TICKS), _TICKS[-1][1])
    return Axis(scale, unit, "%S.%L" if drawn < 2 else "%S", tick)


def axis_note(timeline: Timeline, describe: dict[int, str], *, limit: int = MAX_ITEMS) -> str:
    """The line under the chart naming its axis's unit."""
    shown = _shown(timeline, describe, limit)
    axis = axis_of(max((r.end - r.origin for r in shown), default=0.0))
    return f"_Each job is drawn from its own start; the axis counts {axis.unit} since then._"


def left_out(timeline: Timeline, describe: dict[int, str], *, limit: int = MAX_ITEMS) -> int:
    return max(0, len(rows(timeline, describe)) - limit)


def block(timeline: Timeline, describe: dict[int, str], *, limit: int = MAX_ITEMS) -> str:
    """The chart as a fenced ``mermaid`` block, with a line under it saying how many rows
    were left out (the earliest ones) when there are more than ``limit``."""
    text = "```mermaid\n" + gantt(timeline, describe, limit=limit) + "\n```"
    text += "\n\n" + axis_note(timeline, describe, limit=limit)
    skipped = left_out(timeline, describe, limit=limit)
    if skipped:
        text += (
            f"\n\n_The chart shows the last {limit} items; {skipped} earlier ones are left out._"
        )
    return text
