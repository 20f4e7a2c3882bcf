"""A Session as a picture GitHub draws by itself: a Mermaid Gantt chart of its jobs, their
model rounds and the Executions they ran, with the cut-off and each resolution marked.

Every label is our own words plus a few characters of what a Cell ran, reduced to a small
safe alphabet (ASCII letters, digits, space and ``._-/()=+,``), so nothing a model, a Cell or
an issue wrote can end the fenced block, start a Mermaid directive or comment (``%%``), add
a task (``:`` and line breaks are gone), or carry HTML. Long Sessions are bounded: only the
last ``MAX_ITEMS`` rows are drawn, and the text under the chart says how many were left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rio_ci.core.timeline import Run, Timeline

MAX_ITEMS = 40
LABEL_CHARS = 48
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._/()=+,\-]+")


@dataclass(frozen=True)
class Row:
    section: str
    label: str
    tags: str  # "", "done", "crit", "active", "milestone" (comma-joined)
    start: float
    end: float


def label(text: str) -> str:
    """``text`` reduced to the safe alphabet, one line, clipped."""
    cleaned = " ".join(_UNSAFE.sub(" ", text).split())
    return cleaned[:LABEL_CHARS].rstrip() or "-"


def rows(timeline: Timeline, describe: dict[int, str]) -> list[Row]:
    """The chart's rows in time order: per job, its rounds and Executions, and the marks.
    ``describe``: Cell id -> a short text of what it ran."""
    out: list[Row] = []
    for job in timeline.jobs:
        section = f"job {job.number}"
        for r in timeline.rounds:
            if r.job == job.number:
                end = r.decided_at or r.answered_at or job.ended_at
                tags = "active" if r.outcome == "open" else "done"
                out.append(Row(section, f"round {r.number} model", tags, r.prepared_at, end))
        for run in timeline.runs.values():
            if run.job == job.number and run.started_at is not None:
                out.append(_run_row(section, run, describe.get(run.cell_id, ""), job.ended_at))
        out.extend(_marks(timeline, job.number))
    out.sort(key=lambda row: (row.start, row.end))
    return out


def _run_row(section: str, run: Run, text: str, job_end: float) -> Row:
    result = (run.result or {}).get("type")
    tags = {"UnknownExecution": "crit", None: "active"}.get(result, "done")
    name = f"cell {run.cell_id} {text}"
    if result == "UnknownExecution":
        name = f"cell {run.cell_id} UnknownExecution {text}"
    assert run.started_at is not None
    return Row(section, name, tags, run.started_at, run.finished_at or job_end)


def _marks(timeline: Timeline, number: int) -> list[Row]:
    """Where job ``number`` was cut off, and the resolutions committed in it. A job whose
    Execution the next job found unfinished was cut off at its last event; one that was
    stopped (a signal, its time budget) recorded the UnknownExecution itself, at the cut."""
    marks = []
    job = timeline.jobs[number - 1]
    cuts = {
        job.ended_at if (r.finished_job or 0) > number else (r.finished_at or job.ended_at)
        for r in timeline.unknown()
        if r.job == number
    }
    for at in sorted(cuts)[:1]:  # one cut-off a job
        marks.append(Row(f"job {number}", "cut off", "milestone", at, at))
    for run in timeline.unknown():
        res = run.resolution
        if res is not None and job.started_at <= res.at <= job.ended_at:
            marks.append(
                Row(
                    f"job {number}",
                    f"cell {run.cell_id} resolved by note {res.note_id}",
                    "milestone",
                    res.at,
                    res.at,
                )
            )
    return marks


def gantt(timeline: Timeline, describe: dict[int, str], *, limit: int = MAX_ITEMS) -> str:
    """The Mermaid source (without the fence) and the note of rows left out ("" if none)."""
    every = rows(timeline, describe)
    shown = every[-limit:] if limit > 0 else []
    span = max((r.end for r in shown), default=0.0) - min((r.start for r in shown), default=0.0)
    lines = ["gantt", "    dateFormat x", f"    axisFormat {_axis_format(span)}"]
    section = None
    for index, row in enumerate(shown):
        if row.section != section:
            section = row.section
            lines.append(f"    section {label(section)}")
        start = int(row.start * 1000)
        end = max(int(row.end * 1000), start + 1)
        tags = f"{row.tags}, " if row.tags else ""
        lines.append(f"    {label(row.label)} :{tags}i{index}, {start}, {end}")
    return "\n".join(lines)


def _axis_format(span: float) -> str:
    """A time axis as fine as the chart needs: milliseconds for a chart of seconds, the date
    for one of days."""
    if span < 20:
        return "%H:%M:%S.%L"
    if span < 6 * 3600:
        return "%H:%M:%S"
    if span < 2 * 86400:
        return "%H:%M"
    return "%m-%d %H:%M"


def left_out(timeline: Timeline, describe: dict[int, str], *, limit: int = MAX_ITEMS) -> int:
    return max(0, len(rows(timeline, describe)) - limit)


def block(timeline: Timeline, describe: dict[int, str], *, limit: int = MAX_ITEMS) -> str:
    """The chart as a fenced ``mermaid`` block, with a line under it saying how many rows
    were left out (the earliest ones) when there are more than ``limit``."""
    text = "```mermaid\n" + gantt(timeline, describe, limit=limit) + "\n```"
    skipped = left_out(timeline, describe, limit=limit)
    if skipped:
        text += (
            f"\n\n_The chart shows the last {limit} items; {skipped} earlier ones are left out._"
        )
    return text
