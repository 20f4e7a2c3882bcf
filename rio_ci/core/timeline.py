"""A Session's Timeline, folded from its Journal: the jobs, the model rounds and every
Execution with its times, result and resolution, the validators and the conclusion.

The Projection keeps only what the Owner and the round loop need to act and drops settled Executions
of Cells that left the context; a report (the progress comment, its diagram, ``rio-ci show``)
needs all of them, with when each started and ended. This fold reads every event but output
and keeps a few numbers per Cell and per round, never output or patches.

Jobs are told by the ``job`` watermark the round loop writes when it starts working a Session
(``rio-ci run``, the GitHub job); a Session written before that mark existed is one job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rio_ci.core.entities import Cell, ShortCell

EXECUTABLE = ("cmd", "code")
JOB_MARK = "job"  # the watermark that starts a job


@dataclass
class Resolution:
    note_id: int
    evidence_refs: list[str]
    text: str
    round: int
    at: float


@dataclass
class Run:
    """One Execution: the Cell version it ran, when, and how it ended."""

    cell_id: int
    cell: Cell | ShortCell
    round: int  # the round whose patch queued it (0: before any round)
    job: int
    queued_at: float
    started_at: float | None = None
    finished_at: float | None = None
    result: dict[str, Any] | None = None
    finished_job: int | None = None
    resolution: Resolution | None = None
    replaced_by: int | None = None
    removed: bool = False

    @property
    def seconds(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)


@dataclass
class Round:
    number: int
    turn_id: str
    job: int
    prepared_at: float
    answered_at: float | None = None
    decided_at: float | None = None
    outcome: str = "open"  # open | accepted | rejected | failed


CONCLUSION = "conclusion"  # where a validator ran: for a success conclusion (the Owner)
GATE = "pull-request gate"  # or again after the run ended, before a pull request


@dataclass
class Validation:
    note_id: int
    argv: list[str]
    result: dict[str, Any]
    at: float
    where: str = CONCLUSION


HEARD_KINDS = ("comment", "review", "review_comment")  # what people wrote to the Session


@dataclass
class Heard:
    """A person's comment or review that reached the Session, and the round that read it."""

    message_id: str
    kind: str
    author: str
    url: str
    at: float
    job: int  # the job that took it in, then the job whose round read it
    round: int | None = None


@dataclass
class Job:
    number: int
    label: str
    started_at: float
    ended_at: float  # its last event the fold read (a report may find a later one)
    first_seq: int = 0  # the event that started it (its job mark)


@dataclass
class Timeline:
    started_at: float = 0.0
    last_at: float = 0.0
    last_seq: int = 0
    jobs: list[Job] = field(default_factory=list)
    rounds: list[Round] = field(default_factory=list)
    runs: dict[int, Run] = field(default_factory=dict)
    validations: list[Validation] = field(default_factory=list)
    conclusion: dict[str, Any] | None = None  # {note_id, result, text, at}
    ended: dict[str, Any] | None = None  # {result, reason, at}
    round_count: int | None = None  # rounds known without folding them (``show``)
    notes: dict[int, dict[str, Any]] = field(default_factory=dict)  # conclusion/resolution text
    heard: dict[str, Heard] = field(default_factory=dict)  # message id -> comment or review

    @property
    def job(self) -> int:
        return len(self.jobs)

    def unknown(self) -> list[Run]:
        """Every Execution that ended as an UnknownExecution, resolved or not."""
        return [r for r in self.runs.values() if (r.result or {}).get("type") == "UnknownExecution"]


def fold_timeline(events: Iterable[dict[str, Any]]) -> Timeline:
    """The Timeline of the events given (every kind may be passed; output is skipped)."""
    timeline = Timeline()
    for event in events:
        step = _STEPS.get(event["kind"])
        if step is not None:
            if not timeline.jobs:
                timeline.jobs.append(Job(1, "", event["at"], event["at"]))
                timeline.started_at = event["at"]
            step(timeline, event)
        timeline.last_at = max(timeline.last_at, event["at"])
        timeline.last_seq = event["seq"]
        if timeline.jobs:
            timeline.jobs[-1].ended_at = timeline.last_at
    return timeline


def _watermark(h: Timeline, event: dict[str, Any]) -> None:
    if event["name"] != JOB_MARK:
        return
    first = h.jobs[-1]
    if len(h.jobs) == 1 and not first.label and not h.rounds and not h.runs:
        first.label, first.started_at = str(event["value"]), event["at"]  # the first job
        return
    h.jobs.append(Job(len(h.jobs) + 1, str(event["value"]), event["at"], event["at"], event["seq"]))


def _turn_prepared(h: Timeline, event: dict[str, Any]) -> None:
    number = int(event["turn_id"].split("-")[1])  # turn-<k>-<random>
    if h.rounds and h.rounds[-1].turn_id == event["turn_id"]:
        return
    h.rounds.append(Round(number, event["turn_id"], h.job, event["at"]))
    for message_id in event.get("delivered") or []:
        heard = h.heard.get(message_id)
        if heard is not None and heard.round is None:
            heard.round, heard.job = number, h.job


def _message_received(h: Timeline, event: dict[str, Any]) -> None:
    message = event["message"]
    if message.get("kind") not in HEARD_KINDS:
        return
    payload = message.get("payload") if isinstance(message.get("payload"), dict) else {}
    h.heard[str(message["id"])] = Heard(
        str(message["id"]),
        str(message["kind"]),
        str(payload.get("author") or ""),
        str(payload.get("url") or ""),
        event["at"],
        h.job,
    )


def _round(h: Timeline, event: dict[str, Any]) -> Round | None:
    last = h.rounds[-1] if h.rounds else None
    return last if last is not None and last.turn_id == event.get("turn_id") else None


def _model_response(h: Timeline, event: dict[str, Any]) -> None:
    if (r := _round(h, event)) is None:
        return
    r.answered_at = event["at"]
    if not event.get("ok"):
        r.outcome = "failed"


def _patch_rejected(h: Timeline, event: dict[str, Any]) -> None:
    if (r := _round(h, event)) is not None:
        r.outcome, r.decided_at = "rejected", event["at"]


def _patch_accepted(h: Timeline, event: dict[str, Any]) -> None:
    r = _round(h, event)
    number = r.number if r is not None else len(h.rounds)
    if r is not None:
        r.outcome, r.decided_at = "accepted", event["at"]
    cells = {c["id"]: c for c in event["cells"]}
    for cell in event["cells"]:
        if cell["kind"] == "note" and cell.get("role") in ("conclusion", "resolution"):
            h.notes[cell["id"]] = cell
        previous = h.runs.get(cell.get("previous_id") or -1)
        if previous is not None:
            previous.replaced_by = cell["id"]
    for cell_id in event["removed"]:
        if cell_id in h.runs:
            h.runs[cell_id].removed = True
    for cell_id in event["executions"]:
        h.runs[cell_id] = Run(
            cell_id, cells.get(cell_id, {"kind": "?"}), number, h.job, event["at"]
        )
    for control in event["controls"]:
        _control(h, control, number, event["at"])


def _control(h: Timeline, control: dict[str, Any], number: int, at: float) -> None:
    note = h.notes.get(control["note_id"], {})
    if control["role"] == "resolution":
        target = h.runs.get(control["target_cell_id"])
        if target is not None and target.resolution is None:
            target.resolution = Resolution(
                control["note_id"],
                list(control.get("evidence_refs") or note.get("evidence_refs") or []),
                str(note.get("text") or ""),
                number,
                at,
            )
    elif control["role"] == "conclusion":
        h.conclusion = {
            "note_id": control["note_id"],
            "result": control.get("result") or note.get("result"),
            "text": str(note.get("text") or ""),
            "at": at,
        }


def _execution_started(h: Timeline, event: dict[str, Any]) -> None:
    if (run := h.runs.get(event["cell_id"])) is not None:
        run.started_at = event["at"]


def _execution_finished(h: Timeline, event: dict[str, Any]) -> None:
    if (run := h.runs.get(event["cell_id"])) is not None:
        run.finished_at, run.result, run.finished_job = event["at"], event["result"], h.job


def _validator_result(h: Timeline, event: dict[str, Any]) -> None:
    # After the run ended, a validator runs for the pull-request gate (rio_ci.run.gate).
    where = GATE if h.ended is not None else CONCLUSION
    h.validations.append(
        Validation(event["note_id"], list(event["argv"]), event["result"], event["at"], where)
    )


def _run_ended(h: Timeline, event: dict[str, Any]) -> None:
    h.ended = {"result": event["result"], "reason": event["reason"], "at": event["at"]}


def _session_created(h: Timeline, event: dict[str, Any]) -> None:
    h.started_at = event["at"]


_STEPS = {
    "session_created": _session_created,
    "watermark": _watermark,
    "message_received": _message_received,
    "turn_prepared": _turn_prepared,
    "model_response": _model_response,
    "patch_rejected": _patch_rejected,
    "patch_accepted": _patch_accepted,
    "execution_started": _execution_started,
    "execution_finished": _execution_finished,
    "validator_result": _validator_result,
    "run_ended": _run_ended,
}

# The kinds the fold reads: what a report asks the Journal for (never output).
KINDS = tuple(_STEPS)
