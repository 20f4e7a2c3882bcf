"""The fold: ``apply(projection, seq, kind, data)``. It reads every event kind through the
types of ``rio_ci.core.events``; events written by an older rio-ci (with fields that are now
derived, such as a Turn's stored State or a result's Inbox message) fold the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from rio_ci.core import events as ev
from rio_ci.core.entities import (
    Cell,
    CellUserRecord,
    Departed,
    Execution,
    RefusedHost,
    ShortCell,
    Usage,
    stream_keys,
)
from rio_ci.core.json_value import encoded_size
from rio_ci.core.limits import Limits
from rio_ci.core.projection import DEPARTED_KEPT, REFUSED_KEPT, Projection, is_unresolved
from rio_ci.core.state import EXECUTABLE, first_meaningful_line
from rio_ci.core.text import clip
from rio_ci.core.view import render

SHORT_CHARS = 200  # of a dropped Execution's Cell text: more than its one-line summary shows
RATIONALE_KEPT = 4000  # characters of the last rationale the projection keeps for reports


def new_usage() -> Usage:
    return {
        "rounds": 0,
        "attempts": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_write_tokens": 0,
        "cache_read_tokens": 0,
        "cost_usd": 0.0,
        "unknown_cost_attempts": 0,
    }


def accepted_cells(data: Any) -> list[Cell]:
    """The new Cell versions of a ``patch_accepted`` event's data, in operation order."""
    cells: list[Cell] | None = data.get("cells")
    return (
        cells
        if cells is not None
        else [op["value"] for op in data["patch"] if op["op"] in ("add", "replace")]
    )


def readable(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """An event's data as readers see it: with the fields derived rather than stored."""
    if kind == "patch_accepted" and "cells" not in data:
        data["cells"] = accepted_cells(data)
    return data


def apply(proj: Projection, seq: int, kind: str, data: dict[str, Any]) -> None:
    """Fold one committed event into ``proj`` (in place)."""
    if seq != proj.last_seq + 1:
        raise ValueError(f"event {seq} folded after {proj.last_seq}: the Journal has a gap")
    handler = _HANDLERS.get(kind)
    if handler is None:
        raise ValueError(f"unknown event kind {kind!r} at seq {seq}")
    handler(proj, seq, data)
    proj.last_seq = seq


def _session_created(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    if seq != 1:  # what it fixes is fixed once: nothing later may create the Session again
        raise ValueError(f"session_created at seq {seq}: a Session is created by its first event")
    d = cast(ev.SessionCreated, data)
    proj.session = {
        "id": d["session_id"],
        "goal": d["goal"],
        "cwd": d["cwd"],
        "validators": d["validators"],
        "created_seq": seq,
        # a limit added after this Session was created takes its default
        "limits": {**Limits().to_dict(), **d["limits"]},
        "pass_env": d.get("pass_env", []),
        "secrets": d.get("secrets", []),
        "network": d.get("network"),  # None: created before Cells had a network of their own
    }
    proj.usage = new_usage()


def _add_message(proj: Projection, seq: int, message: ev.MessageData) -> None:
    proj.inbox.append(
        {"id": message["id"], "kind": message["kind"], "payload": message["payload"], "seq": seq}
    )


def _message_received(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.MessageReceived, data)
    _add_message(proj, seq, d["message"])
    if d["message"]["kind"] == "invalid_idle":
        proj.idle_streak += 1


def _turn_prepared(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.TurnPrepared, data)
    delivered = set(d["delivered"])
    state = data.get("state") or render(proj, [m for m in proj.inbox if m["id"] in delivered])
    proj.turn = {
        "turn_id": d["turn_id"],
        "revision": d["revision"],
        "delivered": d["delivered"],
        "state": state,
        "seq": seq,
        "attempts": 0,
        "transient": 0,
        "retry_since": None,
        "not_before": 0.0,
        "feedback": None,
        "response": None,
        "refused": False,  # a reply of this Turn was a refusal: a fallback model may answer next
    }


def _patch_rejected(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.PatchRejected, data)
    if proj.turn is not None and proj.turn["turn_id"] == d["turn_id"]:
        proj.turn["feedback"] = f"the patch was rejected: {d['reason']}"
        proj.turn["response"] = None


def _patch_accepted(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.PatchAccepted, data)
    by_id = {c["id"]: c for c in proj.cells}
    for cell in accepted_cells(d):
        by_id[cell["id"]] = cell
        if cell["kind"] in EXECUTABLE:
            proj.executions[str(cell["id"])] = {
                "cell_id": cell["id"],
                "kind": cell["kind"],
                "cell": cell,
                "phase": "queued",
                "result": None,
                "result_seq": None,
                "stdout": "",
                "stderr": "",
                "stdout_tail": "",
                "stderr_tail": "",
                "stdout_elided": 0,
                "stderr_elided": 0,
                "resolved_by": None,
                "token": None,
                "identity": None,
                "accepted_seq": seq,
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


def _price_set(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.PriceSet, data)
    proj.prices[d["model"]] = dict(d["price"])


def _image_stored(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    """A picture kept for the model (read back by digest); it changes no State."""


def _model_attempt(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.ModelAttempt, data)
    if proj.turn is not None and proj.turn["turn_id"] == d["turn_id"]:
        # Counted as used until its outcome says otherwise: a lost attempt is never free.
        proj.turn["attempts"] += 1
        proj.turn["response"] = None
    proj.usage["attempts"] += 1
    proj.usage["unknown_cost_attempts"] += 1


def _model_response(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.ModelResponse, data)
    usage = d.get("usage")
    if usage is not None:
        fresh = usage["input_tokens"]
        cached = usage.get("cache_write_tokens", 0) + usage.get("cache_read_tokens", 0)
        proj.usage["input_tokens"] += fresh + cached
        proj.usage["output_tokens"] += usage["output_tokens"]
        proj.usage["cache_write_tokens"] += usage.get("cache_write_tokens", 0)
        proj.usage["cache_read_tokens"] += usage.get("cache_read_tokens", 0)
        if usage["cost_usd"] is not None:
            proj.usage["cost_usd"] = round(proj.usage["cost_usd"] + usage["cost_usd"], 9)
            proj.usage["unknown_cost_attempts"] -= 1
    if d["ok"]:
        proj.usage["rounds"] += 1
    if d.get("rationale"):
        proj.rationale = d["rationale"][:RATIONALE_KEPT]
    turn = proj.turn
    if turn is None or turn["turn_id"] != d["turn_id"]:
        return
    turn["not_before"] = d.get("not_before", 0.0)
    if d.get("transient"):
        turn["attempts"] -= 1  # a transient failure does not use up an attempt
        turn["transient"] += 1
        turn["retry_since"] = turn["retry_since"] or data.get("retry_since")
    if d.get("invalid"):
        turn["feedback"] = f"the reply had no admissible step call: {d['invalid']}"
    if (d.get("raw") or {}).get("stop_reason") == "refusal":
        turn["refused"] = True
    turn["response"] = {
        "attempt": d["attempt"],
        "ok": d["ok"],
        "seq": seq,
        "patch": d.get("patch"),
        "error": d.get("error") or d.get("invalid"),
        "transient": bool(d.get("transient")),
    }


def _execution_started(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.ExecutionStarted, data)
    ex = _execution(proj, d["cell_id"])
    ex["phase"], ex["token"], ex["started_seq"] = "started", d["token"], seq


def _worker_registered(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.WorkerRegistered, data)
    _execution(proj, d["cell_id"])["identity"] = d["identity"]


def _output(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.Output, data)
    ex = _execution(proj, d["cell_id"])
    stream = d["stream"]
    tail, elided, truncated = stream_keys(stream)
    ex[stream] += d.get("text", "")
    if "tail" in d:
        ex[tail] = d["tail"]
        ex[elided] = d.get("elided", 0)
    if data.get("dropped"):  # written by rio-ci 0.1: a prefix with the rest dropped
        ex[truncated] = True


def _execution_finished(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.ExecutionFinished, data)
    ex = _execution(proj, d["cell_id"])
    ex["phase"], ex["result"], ex["result_seq"] = "finished", d["result"], seq
    message = ev.execution_message(d["cell_id"], d["result"])
    _add_message(proj, seq, message)
    if d["result"]["type"] in ("error", "UnknownExecution"):
        proj.pause = message["id"]
    _prune(proj)


def _control_applied(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.ControlApplied, data)
    proj.controls = [c for c in proj.controls if c["note_id"] != d["note_id"]]


def _control_rejected(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.ControlRejected, data)
    proj.controls = [c for c in proj.controls if c["note_id"] != d["note_id"]]
    _add_message(proj, seq, ev.control_message(d["note_id"], d["reason"]))


def _validator_result(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    """Validator results are observations in the Journal, not Inbox messages."""


def _timer_set(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.TimerSet, data)
    proj.timers[d["id"]] = {
        "id": d["id"],
        "deadline": d["deadline"],
        "payload": d["payload"],
        "seq": seq,
    }
    proj.idle_streak = 0


def _timer_fired(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.TimerFired, data)
    timer = proj.timers.pop(d["id"], None)
    message = data.get("message") or ev.timer_message(
        d["id"], None if timer is None else timer["payload"]
    )
    _add_message(proj, seq, message)


def _timer_cancelled(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    proj.timers.pop(cast(ev.TimerCancelled, data)["id"], None)


def _run_ended(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.RunEnded, data)
    proj.ended = {
        "result": d["result"],
        "reason": d["reason"],
        "seq": seq,
        "unresolved": d.get("unresolved", []),
        "cleanup_error": d.get("cleanup_error"),
    }
    proj.controls = []
    proj.turn = None


def _watermark(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.Watermark, data)
    proj.watermarks[d["name"]] = d["value"]


def _cell_user(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    proj.cell_user = cast(CellUserRecord, {**data, "seq": seq})


def _egress(proj: Projection, seq: int, data: dict[str, Any]) -> None:
    d = cast(ev.Egress, data)
    tally = proj.egress
    if d["allowed"]:
        tally["allowed"] += d["count"]
        return
    if not d["host"]:  # no request was read: no host to name (the event keeps it)
        return
    refused = tally["refused"]
    where = (d["host"], d["port"])
    entry = next((r for r in refused if (r["host"], r["port"]) == where), None)
    if entry is None and len(refused) >= REFUSED_KEPT:
        where = ("*", 0)
        entry = next((r for r in refused if r["host"] == "*"), None)
    if entry is None:
        entry = RefusedHost(host=where[0], port=where[1], count=0, cell_id=None)
        refused.append(entry)
    entry["count"] += d["count"]
    entry["cell_id"], entry["reason"] = d["cell_id"], d["reason"]


def _execution(proj: Projection, cell_id: int) -> Execution:
    return proj.executions[str(cell_id)]


def _prune(proj: Projection) -> None:
    """Drop settled Executions whose Cell left the context; their events stay in history."""
    heads = {c["id"] for c in proj.cells}
    for key in [
        k
        for k, e in proj.executions.items()
        if e["phase"] == "finished" and not is_unresolved(e) and int(k) not in heads
    ]:
        proj.departed.append(departed(proj.executions.pop(key)))
    extra = len(proj.departed) - DEPARTED_KEPT
    if extra > 0:
        del proj.departed[:extra]
        proj.departed_before += extra


def departed(ex: Execution) -> Departed:
    """What is kept of a dropped (so finished) Execution: its Cell in short (its kind and
    the start of its argv or its source's first line: what ``show`` prints) and its result;
    no output. Small: the saved projection carries ``DEPARTED_KEPT`` of them."""
    return {
        "cell_id": ex["cell_id"],
        "cell": short_cell(ex["cell"]),
        "result": ex["result"],
        "resolved_by": ex["resolved_by"],
    }


def short_cell(cell: Cell) -> ShortCell:
    """``cell`` with its text, argv or source cut to what a one-line summary shows."""
    short: ShortCell = {"kind": cell["kind"]}
    if cell["kind"] == "cmd":
        short["argv"] = list(clip(" ".join(cell["argv"]), SHORT_CHARS).split(" "))
    elif cell["kind"] == "code":
        short["source"] = clip(first_meaningful_line(cell["source"]), SHORT_CHARS)
    if cell.get("description"):
        short["description"] = cell["description"]
    return short


_HANDLERS: dict[str, Callable[[Projection, int, dict[str, Any]], None]] = {
    "session_created": _session_created,
    "message_received": _message_received,
    "turn_prepared": _turn_prepared,
    "patch_rejected": _patch_rejected,
    "patch_accepted": _patch_accepted,
    "price_set": _price_set,
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
    "cell_user": _cell_user,
    "image_stored": _image_stored,
    "egress": _egress,
}
assert tuple(_HANDLERS) == ev.KINDS


def creation_problem(data: dict[str, Any]) -> str | None:
    """Why a Session created with ``data`` (a ``session_created`` event's) could never work,
    or None: a blank goal, or a first State — goal, limits, validators, nothing else yet —
    that fills ``context_bytes``, so that no Turn could be shown and no patch accepted."""
    if not str(data["goal"]).strip():
        return "the goal must not be blank"
    proj = Projection()
    apply(proj, 1, "session_created", data)
    size, limit = encoded_size(render(proj, [])), proj.limits.context_bytes
    if size >= limit:
        return (
            f"the goal, limits and validators alone take {size} bytes of the State, "
            f"context_bytes={limit}: no Turn could be shown, no patch accepted; shorten "
            "the goal or raise context_bytes"
        )
    return None
