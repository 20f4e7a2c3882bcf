"""The fold: ``apply(projection, event)``. The one place that knows every event kind.

A Projection is everything the harness needs to act, derived from the Journal alone. It
stays bounded however long the Journal grows: finished, settled Executions of Cells that
left the context and consumed Inbox messages are dropped (their events stay in the
Journal, where history is read).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from rio_ci.core.state import EXECUTABLE, is_unresolved

# Every event kind, with what its data holds. docs/journal.md documents each one and a test
# checks that the two agree.
EVENT_KINDS = (
    "session_created",  # {session_id, goal, cwd, validators, limits}
    "message_received",  # {message: {id, kind, payload}}   (Inbox)
    "turn_prepared",  # {turn_id, revision, delivered, state}
    "patch_rejected",  # {turn_id, reason, patch}
    "patch_accepted",  # {turn_id, patch, digest, revision, cells, heads, executions, controls, ...}
    "model_attempt",  # {turn_id, attempt, fingerprint, not_before}
    "model_response",  # {turn_id, attempt, ok, patch | error, retryable, usage, raw}
    "execution_started",  # {cell_id, token, host}                (launch authorised)
    "worker_registered",  # {cell_id, identity}
    "output",  # {cell_id, stream, text, dropped}
    "execution_finished",  # {cell_id, result, message}
    "control_applied",  # {note_id, role, target_cell_id}
    "control_rejected",  # {note_id, reason, message}
    "validator_result",  # {note_id, index, argv, result, stdout, stderr, truncated}
    "timer_set",  # {id, deadline, payload, cell_id}
    "timer_fired",  # {id, message}
    "timer_cancelled",  # {id}
    "run_ended",  # {result, reason, note_id, unresolved, cleanup_error}
    "watermark",  # {name, value}
)
# The shape of a Projection. Raise it whenever the fold changes what it keeps: a snapshot
# written in another format is ignored and the Journal replayed.
PROJECTION_FORMAT = 2

# Events that are observations a resolution may cite (SPEC §3.8).
OBSERVATION_KINDS = frozenset(
    {"message_received", "execution_finished", "timer_fired", "control_rejected",
     "validator_result"}
)


@dataclass
class Projection:
    session: dict[str, Any] = field(default_factory=dict)
    last_seq: int = 0
    revision: int = 0
    next_cell_id: int = 1
    cells: list[dict[str, Any]] = field(default_factory=list)
    executions: dict[str, dict[str, Any]] = field(default_factory=dict)
    inbox: list[dict[str, Any]] = field(default_factory=list)
    turn: dict[str, Any] | None = None  # the open Turn
    accepted_turns: int = 0
    pause: str | None = None
    controls: list[dict[str, Any]] = field(default_factory=list)  # awaiting the Owner
    timers: dict[str, dict[str, Any]] = field(default_factory=dict)  # waiting
    usage: dict[str, Any] = field(default_factory=dict)
    idle_streak: int = 0
    ended: dict[str, Any] | None = None
    watermarks: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.__dict__)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Projection:
        return cls(**copy.deepcopy(data))

    @property
    def limits(self) -> dict[str, Any]:
        limits: dict[str, Any] = self.session["limits"]
        return limits

    def pending(self) -> list[dict[str, Any]]:
        """Executions not yet finished, in acceptance order (ids rise with acceptance)."""
        rows = [e for e in self.executions.values() if e["phase"] != "finished"]
        return sorted(rows, key=lambda e: e["cell_id"])

    def unresolved(self) -> list[dict[str, Any]]:
        rows = [e for e in self.executions.values() if is_unresolved(e)]
        return sorted(rows, key=lambda e: e["cell_id"])


def new_usage() -> dict[str, Any]:
    return {"rounds": 0, "attempts": 0, "input_tokens": 0, "output_tokens": 0,
            "cost_usd": 0.0, "unknown_cost_attempts": 0}


def apply(proj: Projection, seq: int, kind: str, at: float, data: dict[str, Any]) -> None:
    """Fold one committed event into ``proj`` (in place)."""
    if seq != proj.last_seq + 1:
        raise ValueError(f"event {seq} folded after {proj.last_seq}: the Journal has a gap")
    handler = _HANDLERS.get(kind)
    if handler is None:
        raise ValueError(f"unknown event kind {kind!r} at seq {seq}")
    handler(proj, seq, data)
    proj.last_seq = seq


def _session_created(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    proj.session = {"id": d["session_id"], "goal": d["goal"], "cwd": d["cwd"],
                    "validators": d["validators"], "limits": d["limits"], "created_seq": seq,
                    "pass_env": d.get("pass_env", [])}
    proj.usage = new_usage()


def _add_message(proj: Projection, seq: int, message: dict[str, Any]) -> None:
    proj.inbox.append({"id": message["id"], "kind": message["kind"],
                       "payload": message["payload"], "seq": seq})


def _message_received(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    _add_message(proj, seq, d["message"])
    if d["message"]["kind"] == "invalid_idle":
        proj.idle_streak += 1


def _turn_prepared(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    proj.turn = {"turn_id": d["turn_id"], "revision": d["revision"],
                 "delivered": d["delivered"], "state": d["state"], "seq": seq,
                 "attempts": 0, "not_before": 0.0, "last_rejection": None, "response": None}


def _patch_rejected(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    if proj.turn is not None and proj.turn["turn_id"] == d["turn_id"]:
        proj.turn["last_rejection"] = d["reason"]
        proj.turn["response"] = None


def _patch_accepted(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    by_id = {c["id"]: c for c in proj.cells}
    for cell in d["cells"]:
        by_id[cell["id"]] = cell
        if cell["kind"] in EXECUTABLE:
            proj.executions[str(cell["id"])] = {
                "cell_id": cell["id"], "kind": cell["kind"], "cell": cell, "phase": "queued",
                "result": None, "result_seq": None, "stdout": "", "stderr": "",
                "stdout_truncated": False, "stderr_truncated": False, "resolved_by": None,
                "token": None, "identity": None, "accepted_seq": seq,
            }
    proj.cells = [by_id[i] for i in d["heads"]]
    proj.revision = d["revision"]
    proj.next_cell_id = d["next_cell_id"]
    consumed = set(d["consumed"])
    proj.inbox = [m for m in proj.inbox if m["id"] not in consumed]
    if d["pause_cleared"]:
        proj.pause = None
    for control in d["controls"]:
        if control["role"] == "resolution":
            target = proj.executions.get(str(control["target_cell_id"]))
            if target is not None and target["resolved_by"] is None:
                target["resolved_by"] = control["note_id"]
        else:
            proj.controls.append(control)
    if d["executions"]:
        proj.idle_streak = 0
    proj.turn = None
    proj.accepted_turns += 1
    _prune(proj)


def _model_attempt(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    if proj.turn is not None and proj.turn["turn_id"] == d["turn_id"]:
        proj.turn["attempts"] = d["attempt"]
        proj.turn["not_before"] = d["not_before"]
        proj.turn["response"] = None
    proj.usage["attempts"] += 1
    # Unknown until a response says otherwise: a lost attempt is never counted as free.
    proj.usage["unknown_cost_attempts"] += 1


def _model_response(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    usage = d.get("usage")
    if usage is not None:
        proj.usage["input_tokens"] += usage["input_tokens"]
        proj.usage["output_tokens"] += usage["output_tokens"]
        if usage["cost_usd"] is not None:
            proj.usage["cost_usd"] = round(proj.usage["cost_usd"] + usage["cost_usd"], 9)
            proj.usage["unknown_cost_attempts"] -= 1
    if d["ok"]:
        proj.usage["rounds"] += 1
    if proj.turn is not None and proj.turn["turn_id"] == d["turn_id"]:
        proj.turn["response"] = {"attempt": d["attempt"], "ok": d["ok"], "seq": seq,
                                 "patch": d.get("patch"), "error": d.get("error")}
        proj.turn["not_before"] = d.get("not_before", 0.0)


def _execution_started(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    ex = proj.executions[str(d["cell_id"])]
    ex["phase"] = "started"
    ex["token"] = d["token"]
    ex["started_seq"] = seq


def _worker_registered(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    proj.executions[str(d["cell_id"])]["identity"] = d["identity"]


def _output(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    ex = proj.executions[str(d["cell_id"])]
    stream = d["stream"]
    ex[stream] += d["text"]
    if d["dropped"]:
        ex[f"{stream}_truncated"] = True


def _execution_finished(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    ex = proj.executions[str(d["cell_id"])]
    ex["phase"] = "finished"
    ex["result"] = d["result"]
    ex["result_seq"] = seq
    _add_message(proj, seq, d["message"])
    if d["result"]["type"] in ("error", "UnknownExecution"):
        proj.pause = d["message"]["id"]
    _prune(proj)


def _control_applied(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    proj.controls = [c for c in proj.controls if c["note_id"] != d["note_id"]]


def _control_rejected(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    proj.controls = [c for c in proj.controls if c["note_id"] != d["note_id"]]
    _add_message(proj, seq, d["message"])


def _validator_result(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    """Validator results are observations in the Journal, not Inbox messages."""


def _timer_set(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    proj.timers[d["id"]] = {"id": d["id"], "deadline": d["deadline"], "payload": d["payload"],
                            "seq": seq}
    proj.idle_streak = 0


def _timer_fired(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    proj.timers.pop(d["id"], None)
    _add_message(proj, seq, d["message"])


def _timer_cancelled(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    proj.timers.pop(d["id"], None)


def _run_ended(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    proj.ended = {"result": d["result"], "reason": d["reason"], "seq": seq,
                  "unresolved": d.get("unresolved", []), "cleanup_error": d.get("cleanup_error")}
    proj.controls = []
    proj.turn = None


def _watermark(proj: Projection, seq: int, d: dict[str, Any]) -> None:
    proj.watermarks[d["name"]] = d["value"]


def _prune(proj: Projection) -> None:
    """Drop settled Executions whose Cell left the context; their events stay in history."""
    heads = {c["id"] for c in proj.cells}
    for key in [k for k, e in proj.executions.items()
                if e["phase"] == "finished" and not is_unresolved(e) and int(k) not in heads]:
        del proj.executions[key]


_HANDLERS = {
    "session_created": _session_created,
    "message_received": _message_received,
    "turn_prepared": _turn_prepared,
    "patch_rejected": _patch_rejected,
    "patch_accepted": _patch_accepted,
    "model_attempt": _model_attempt,
    "model_response": _model_response,
    "execution_started": _execution_started,
    "worker_registered": _worker_registered,
    "output": _output,
    "execution_finished": _execution_finished,
    "control_applied": _control_applied,
    "control_rejected": _control_rejected,
    "validator_result": _validator_result,
    "timer_set": _timer_set,
    "timer_fired": _timer_fired,
    "timer_cancelled": _timer_cancelled,
    "run_ended": _run_ended,
    "watermark": _watermark,
}
assert tuple(_HANDLERS) == EVENT_KINDS
