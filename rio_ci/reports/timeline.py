"""What a report of a Session reads: its Timeline (``rio_ci.core.timeline``), gathered in one
place so a faster source (derived data kept beside the Journal) can replace the scan."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePath
from typing import Any

from rio_ci.core.entities import Cell, ShortCell
from rio_ci.core.projection import Projection
from rio_ci.core.timeline import (
    CONCLUSION,
    GATE,
    KINDS,
    Run,
    Timeline,
    Validation,
    fold_timeline,
)
from rio_ci.reports.live import describe
from rio_ci.session.session import Session


def read_timeline(session: Session, upto: int | None = None) -> Timeline:
    """The Timeline of every event committed up to seq ``upto`` (all when None); one pass
    over the Journal's rows of the kinds the fold reads (never output)."""
    events = session.events(kinds=KINDS)
    if upto is not None:
        events = (e for e in events if e["seq"] <= upto)
    timeline = fold_timeline(events)
    _job_ends(session, timeline, upto)
    return timeline


def _job_ends(session: Session, timeline: Timeline, upto: int | None) -> None:
    """Each job's true last event, output included (the fold reads no output, and a job cut
    off mid-Cell was writing output until it died): one indexed look-up per job."""
    marks = [job.first_seq for job in timeline.jobs[1:]]
    if upto is not None:
        marks.append(upto + 1)
    for job, mark in zip(timeline.jobs, marks, strict=False):
        before = next(session.events(after=max(0, mark - 2), limit=1), None)
        if before is not None and before["seq"] < mark:
            job.ended_at = max(job.ended_at, before["at"])


# How far back ``recent_timeline`` looks for validator results: those of the latest
# conclusions, which come right before the run's end or a control_rejected message.
RECENT_EVENTS = 2_000


def recent_timeline(session: Session, proj: Projection, cell_ids: Iterable[int]) -> Timeline:
    """What ``rio-ci show`` needs of the Timeline, read in a bounded number of indexed look-ups
    (never a scan of the Journal): the first and last event's times, the rounds from the
    usage, each listed Execution's start and end, and the validator results among the last
    ``RECENT_EVENTS`` events."""
    first = next(session.events(limit=1), None)
    last = next(session.events(after=max(0, proj.last_seq - 1), limit=1), None)
    timeline = Timeline(
        started_at=first["at"] if first else 0.0,
        last_at=last["at"] if last else 0.0,
        last_seq=proj.last_seq,
        round_count=int(proj.usage.get("rounds", 0)),
    )
    for cell_id in cell_ids:
        started = session.find(str(cell_id), "execution_started")
        finished = session.find(str(cell_id), "execution_finished")
        if started is not None and started["seq"] <= proj.last_seq:
            done = finished is not None and finished["seq"] <= proj.last_seq
            timeline.runs[cell_id] = Run(
                cell_id,
                {"kind": "?"},  # not known here: ``show`` reads only a Run's times
                round=0,
                job=0,
                queued_at=started["at"],
                started_at=started["at"],
                finished_at=finished["at"] if done and finished else None,
                result=finished["result"] if done and finished else None,
            )
    after = max(0, proj.last_seq - RECENT_EVENTS)
    ended_at = proj.ended["seq"] if proj.ended else proj.last_seq + 1
    for event in session.events(after=after, kinds=("validator_result",)):
        if event["seq"] <= proj.last_seq:
            where = GATE if event["seq"] > ended_at else CONCLUSION
            timeline.validations.append(
                Validation(event["note_id"], event["argv"], event["result"], event["at"], where)
            )
    return timeline


def descriptions(timeline: Timeline) -> dict[int, str]:
    """Cell id -> one short line saying what it ran (``rio_ci.reports.live.describe``; a command by
    its program's name, not its path, to fit a chart's label)."""
    return {cell_id: describe(_short(run.cell)) for cell_id, run in timeline.runs.items()}


def _short(cell: Cell | ShortCell) -> Cell | ShortCell:
    if cell.get("kind") != "cmd" or not cell.get("argv"):
        return cell
    argv = list(cell["argv"])
    short = cell.copy()
    short["argv"] = [PurePath(str(argv[0])).name or str(argv[0]), *argv[1:]]
    return short


def seconds(value: float | None) -> str:
    """A duration as people read it: ``0.4 s``, ``12 s``, ``3 min 5 s``, ``—`` if unknown."""
    if value is None:
        return "—"
    if value < 10:
        return f"{value:.1f} s"
    if value < 120:
        return f"{value:.0f} s"
    return f"{int(value // 60)} min {int(value % 60)} s"


def took(run: Run) -> str:
    """How long an Execution ran, in words; an UnknownExecution's end is not known."""
    if (run.result or {}).get("type") == "UnknownExecution":
        return "cut off (its end is unknown)"
    if run.seconds is None:
        return "not finished" if run.started_at is not None else "not started"
    return f"took {seconds(run.seconds)}"


def result_text(result: Mapping[str, Any] | None) -> str:
    """An Execution's result in a few words: ``success``, ``error (exit 1)``,
    ``UnknownExecution (worker_lost_before_result_commit)``; ``running``/``queued`` when none."""
    if not result:
        return "not finished"
    text = str(result.get("type"))
    if result.get("exit_code") is not None and result.get("type") != "success":
        text += f" (exit {result['exit_code']})"
    if result.get("reason"):
        text += f" ({result['reason']})"
    return text
