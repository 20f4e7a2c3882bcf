"""Every event kind of the Journal: one ``TypedDict`` for its data and one constructor.

The Session builds events only through these constructors and the fold reads them through
the same types, so writers and the reducer agree on each shape. ``docs/journal.md`` documents
every kind and a test checks that the two agree. Execution results are built here too
(``success``, ``error``, ``cancelled``, ``unknown``): one place decides their shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

Json = Any


@dataclass(frozen=True)
class Event:
    """One event to append: its kind, its data and the id it is indexed by (``ref``)."""

    kind: str
    data: dict[str, Any]
    ref: str | None = None


@dataclass(frozen=True)
class OutputPiece:
    """Retained output to commit for one stream: ``text`` extends the head; ``tail`` (with
    ``elided``) replaces the tail window."""

    stream: Literal["stdout", "stderr"]
    text: str | None = None
    tail: str | None = None
    elided: int = 0


# --- execution results ----------------------------------------------------------------------


class Result(TypedDict):
    type: Literal["success", "error", "cancelled", "UnknownExecution"]
    cell_id: int
    exit_code: NotRequired[int | None]
    reason: NotRequired[str]
    worker_stopped: NotRequired[bool]
    evidence_refs: NotRequired[list[str]]
    refused_hosts: NotRequired[list[RefusedHost]]  # where its processes could not connect


class RefusedHost(TypedDict):
    """A host the egress proxy refused an Execution (docs/network.md), and the option that
    would admit it in a new Session (None where none would)."""

    host: str
    port: int
    reason: str
    count: int
    allow: str | None


def exited(cell_id: int, exit_code: int) -> Result:
    """The result of a script that ran and exited: success on 0, else error."""
    return {
        "type": "success" if exit_code == 0 else "error",
        "cell_id": cell_id,
        "exit_code": exit_code,
    }


def launch_failed(cell_id: int, problem: str) -> Result:
    """Known not to have run: the launch failed before the gate opened."""
    return {
        "type": "error",
        "cell_id": cell_id,
        "exit_code": None,
        "reason": f"launch_failed: {problem}",
    }


def cancelled(cell_id: int, reason: str) -> Result:
    return {"type": "cancelled", "cell_id": cell_id, "reason": reason}


def unknown(cell_id: int, reason: str, *, worker_stopped: bool) -> Result:
    """An UnknownExecution; the Session adds ``evidence_refs`` naming its own event."""
    return {
        "type": "UnknownExecution",
        "cell_id": cell_id,
        "reason": reason,
        "worker_stopped": worker_stopped,
    }


class MessageData(TypedDict):
    """A message as an event commits it; the Inbox keeps it with the event's seq."""

    id: str
    kind: str
    payload: Json


def execution_message(cell_id: int, result: Json) -> MessageData:
    """The Inbox notice committed with every result."""
    return {"id": f"execution:{cell_id}", "kind": "execution", "payload": result}


def control_message(note_id: int, reason: str) -> MessageData:
    return {
        "id": f"control:{note_id}",
        "kind": "control_rejected",
        "payload": {"reason": reason, "note_id": note_id},
    }


def timer_message(timer_id: str, payload: Json) -> MessageData:
    return {"id": f"timer:{timer_id}", "kind": "timer", "payload": payload}


def message_of(kind: str, data: dict[str, Any]) -> MessageData | None:
    """The Inbox message an event commits, if any, as its reader sees it (``rio-ci events``
    shows the event, not the derived message). A fired Timer's payload is the one it was set
    with; here it is None unless the event still carries its message (rio-ci 0.1)."""
    if isinstance(data.get("message"), dict):
        message: MessageData = data["message"]
        return message
    if kind == "execution_finished":
        return execution_message(data["cell_id"], data["result"])
    if kind == "control_rejected":
        return control_message(data["note_id"], data["reason"])
    if kind == "timer_fired":
        return timer_message(data["id"], None)
    return None


# --- event data -----------------------------------------------------------------------------


class SessionCreated(TypedDict):
    session_id: str
    goal: str
    cwd: str
    validators: list[list[str]]
    limits: dict[str, Any]
    pass_env: list[str]
    secrets: NotRequired[list[str]]  # names whose values are credentials (``--secret``)
    # The Cells' network (docs/network.md); absent: created before there was one ("open").
    network: NotRequired[NetworkSettings]


class NetworkSettings(TypedDict):
    mode: Literal["allowlist", "open", "none"]
    allow: list[str]  # every pattern the proxy reads (the default list in it under allowlist)


class MessageReceived(TypedDict):
    message: MessageData


class TurnPrepared(TypedDict):
    """The Turn's State is not stored: the fold renders it from the projection at this
    event and the delivered message ids, so replay rebuilds the very same State."""

    turn_id: str
    revision: int
    delivered: list[str]


class PatchRejected(TypedDict):
    """A rejected patch is kept as its digest and size, never whole: rejections cannot fill
    the storage budget."""

    turn_id: str
    reason: str
    digest: str
    size: int


class PatchAccepted(TypedDict):
    """``cells`` (the new versions) are the patch's add/replace values: derived, not stored
    (older events carry them); readers get them back (``rio_ci.core.reducer.readable``)."""

    turn_id: str
    patch: list[Any]
    digest: str
    revision: int
    next_cell_id: int
    cells: NotRequired[list[dict[str, Any]]]
    heads: list[int]
    removed: list[int]
    executions: list[int]
    controls: list[Control]
    consumed: list[str]
    pause_cleared: bool


class Control(TypedDict):
    """A Control a note asks for (``cancel``, ``resolution``, ``conclusion``); the
    projection keeps those that await the Owner."""

    note_id: int
    role: str
    target_cell_id: NotRequired[int]
    evidence_refs: NotRequired[list[str]]
    result: NotRequired[str]


class PriceSet(TypedDict):
    model: str
    price: dict[str, float]  # {input, output, cache_write, cache_read} USD per MTok


class ModelAttempt(TypedDict):
    turn_id: str
    attempt: int
    fingerprint: str
    model: str
    # set when this attempt went to the fallback model after a refusal: the model it replaces
    fallback_from: NotRequired[str]


class ModelResponse(TypedDict):
    """One attempt's outcome: a reply (``patch``), an invalid reply (``invalid``: billed,
    not admissible) or a failure (``error``; ``transient`` ones are retried at
    ``not_before`` without using up an attempt)."""

    turn_id: str
    attempt: int
    ok: bool
    patch: NotRequired[list[Any] | None]
    invalid: NotRequired[str | None]
    error: NotRequired[str | None]
    transient: NotRequired[bool]
    not_before: NotRequired[float]
    retry_since: NotRequired[float | None]  # when this Turn's run of transient failures began
    gave_up: NotRequired[str]  # a transient failure not retried: why (the wait is past the limit)
    usage: dict[str, Any] | None
    rationale: NotRequired[str]
    raw: NotRequired[dict[str, Any]]


class ExecutionStarted(TypedDict):
    cell_id: int
    token: str


class WorkerRecord(TypedDict):
    """A Worker's identity as committed (``rio_ci.run.survivors.WorkerIdentity``)."""

    pid: int
    pgid: int
    create_time: float
    boot_time: float
    token: str


class WorkerRegistered(TypedDict):
    cell_id: int
    identity: WorkerRecord


class Output(TypedDict):
    """Retained output of one stream. ``text`` extends the head (the first half of
    ``output_bytes``); ``tail`` replaces the tail window (the last half), with ``elided``
    bytes dropped between the two so far."""

    cell_id: int
    stream: Literal["stdout", "stderr"]
    text: NotRequired[str]
    tail: NotRequired[str]
    elided: NotRequired[int]


class ExecutionFinished(TypedDict):
    cell_id: int
    result: Result


class ControlApplied(TypedDict):
    note_id: int
    role: str
    target_cell_id: NotRequired[int]
    result: NotRequired[str]


class ControlRejected(TypedDict):
    note_id: int
    reason: str


class ValidatorResult(TypedDict):
    note_id: int
    index: int
    argv: list[str]
    result: dict[str, Any]
    stdout: str
    stderr: str
    truncated: bool


class TimerSet(TypedDict):
    id: str
    deadline: float
    payload: Any
    cell_id: int | None


class TimerFired(TypedDict):
    id: str


class TimerCancelled(TypedDict):
    id: str


class Unresolved(TypedDict):
    """An UnknownExecution a failed run left unresolved."""

    cell_id: int
    reason: str | None
    evidence_refs: list[str]


class RunEnded(TypedDict):
    result: Literal["success", "failure"]
    reason: str
    note_id: int | None
    unresolved: list[Unresolved]
    cleanup_error: NotRequired[str | None]


class Watermark(TypedDict):
    name: str
    value: Any


class CellUserMode(TypedDict):
    """How Cells run: ``separate`` (as ``user``, uid ``uid``) or ``shared`` (as the
    harness's user, for ``reason``); ``tree``: the working tree's owner before it was lent to
    the Cell user; ``opened``: directories given a search bit for it (``[path, mode]``)."""

    mode: Literal["separate", "shared"]
    user: str
    uid: int | None
    gid: int | None
    reason: str | None
    tree: dict[str, Any] | None
    opened: list[list[Any]]
    network: NotRequired[CellNetwork]


class CellNetwork(TypedDict):
    """Whether Cells run in a network namespace of their own behind the egress proxy
    (``isolated``), or why they use the host's network (``reason``)."""

    isolated: bool
    reason: str | None


class Egress(TypedDict):
    """``count`` connections (one, or the counted rest of one kind: docs/network.md) that
    the processes of one Execution (``cell_id``; None: a validator's) made through the egress
    proxy, to one host and port, with one verdict and reason, and their bytes each way."""

    cell_id: int | None
    host: str
    port: int
    allowed: bool
    reason: str
    bytes_up: int
    bytes_down: int
    count: int


# --- constructors ---------------------------------------------------------------------------


def session_created(data: SessionCreated) -> Event:
    return Event("session_created", dict(data))


def message_received(message_id: str, kind: str, payload: Json) -> Event:
    data: MessageReceived = {"message": {"id": message_id, "kind": kind, "payload": payload}}
    return Event("message_received", dict(data), message_id)


def turn_prepared(turn_id: str, revision: int, delivered: list[str]) -> Event:
    data: TurnPrepared = {"turn_id": turn_id, "revision": revision, "delivered": delivered}
    return Event("turn_prepared", dict(data), turn_id)


def patch_rejected(turn_id: str, reason: str, digest: str, size: int) -> Event:
    data: PatchRejected = {"turn_id": turn_id, "reason": reason, "digest": digest, "size": size}
    return Event("patch_rejected", dict(data), turn_id)


def patch_accepted(data: PatchAccepted) -> Event:
    return Event("patch_accepted", dict(data), data["turn_id"])


def price_set(model: str, price: dict[str, float]) -> Event:
    data: PriceSet = {"model": model, "price": price}
    return Event("price_set", dict(data), model)


def model_attempt(
    turn_id: str, attempt: int, fingerprint: str, model: str, fallback_from: str | None = None
) -> Event:
    data: ModelAttempt = {
        "turn_id": turn_id,
        "attempt": attempt,
        "fingerprint": fingerprint,
        "model": model,
    }
    if fallback_from is not None:
        data["fallback_from"] = fallback_from
    return Event("model_attempt", dict(data), turn_id)


def model_response(data: ModelResponse) -> Event:
    return Event("model_response", dict(data), data["turn_id"])


def execution_started(cell_id: int, token: str) -> Event:
    data: ExecutionStarted = {"cell_id": cell_id, "token": token}
    return Event("execution_started", dict(data), str(cell_id))


def worker_registered(cell_id: int, identity: WorkerRecord) -> Event:
    data: WorkerRegistered = {"cell_id": cell_id, "identity": identity}
    return Event("worker_registered", dict(data), str(cell_id))


def output(
    cell_id: int,
    stream: Literal["stdout", "stderr"],
    *,
    text: str | None = None,
    tail: str | None = None,
    elided: int = 0,
) -> Event:
    data: Output = {"cell_id": cell_id, "stream": stream}
    if text is not None:
        data["text"] = text
    if tail is not None:
        data["tail"], data["elided"] = tail, elided
    return Event("output", dict(data), str(cell_id))


def execution_finished(cell_id: int, result: Result) -> Event:
    data: ExecutionFinished = {"cell_id": cell_id, "result": result}
    return Event("execution_finished", dict(data), str(cell_id))


def control_applied(
    note_id: int, role: str, *, target_cell_id: int | None = None, result: str | None = None
) -> Event:
    data: ControlApplied = {"note_id": note_id, "role": role}
    if target_cell_id is not None:
        data["target_cell_id"] = target_cell_id
    if result is not None:
        data["result"] = result
    return Event("control_applied", dict(data), str(note_id))


def control_rejected(note_id: int, reason: str) -> Event:
    data: ControlRejected = {"note_id": note_id, "reason": reason}
    return Event("control_rejected", dict(data), str(note_id))


def validator_result(data: ValidatorResult) -> Event:
    return Event("validator_result", dict(data), str(data["note_id"]))


def timer_set(timer_id: str, deadline: float, payload: Json, cell_id: int | None) -> Event:
    data: TimerSet = {"id": timer_id, "deadline": deadline, "payload": payload, "cell_id": cell_id}
    return Event("timer_set", dict(data), timer_id)


def timer_fired(timer_id: str) -> Event:
    data: TimerFired = {"id": timer_id}
    return Event("timer_fired", dict(data), timer_id)


def timer_cancelled(timer_id: str) -> Event:
    data: TimerCancelled = {"id": timer_id}
    return Event("timer_cancelled", dict(data), timer_id)


def run_ended(
    result: Literal["success", "failure"],
    reason: str,
    *,
    note_id: int | None,
    unresolved: list[Unresolved],
    cleanup_error: str | None = None,
) -> Event:
    data: RunEnded = {
        "result": result,
        "reason": reason,
        "note_id": note_id,
        "unresolved": unresolved,
        "cleanup_error": cleanup_error,
    }
    return Event("run_ended", dict(data))


class ImageStored(TypedDict):
    digest: str  # sha256 of the picture's bytes, hex
    media_type: str  # image/png | image/jpeg | image/gif | image/webp (by its first bytes)
    size: int  # bytes
    data: str  # base64


def image_stored(digest: str, media_type: str, size: int, data: str) -> Event:
    stored: ImageStored = {"digest": digest, "media_type": media_type, "size": size, "data": data}
    return Event("image_stored", dict(stored), digest)


def watermark(name: str, value: Json) -> Event:
    data: Watermark = {"name": name, "value": value}
    return Event("watermark", dict(data), name)


def cell_user(mode: CellUserMode) -> Event:
    return Event("cell_user", dict(mode))


def egress(data: Egress) -> Event:
    return Event("egress", dict(data), None if data["cell_id"] is None else str(data["cell_id"]))


def imported(kind: str, data: dict[str, Any]) -> Event:
    """An event another copy of this Session committed (GitHub: a verified launch record),
    kept as it was, with the ref its constructor gave it. Unknown kinds raise ValueError."""
    if kind not in KINDS:
        raise ValueError(f"unknown event kind {kind!r}")
    message = data.get("message")
    keys = [
        k for k in ("turn_id", "id", "cell_id", "note_id", "model", "name", "digest") if k in data
    ]
    ref = (
        message.get("id")
        if isinstance(message, dict)
        else data[keys[0]]
        if keys and kind not in ("session_created", "run_ended")
        else None
    )
    stored = {k: v for k, v in data.items() if not (kind == "patch_accepted" and k == "cells")}
    return Event(kind, stored, None if ref is None else str(ref))  # cells: derived on read


# Every event kind, in the order docs/journal.md lists them.
KINDS = (
    "session_created",
    "message_received",
    "turn_prepared",
    "patch_rejected",
    "patch_accepted",
    "price_set",
    "model_attempt",
    "model_response",
    "execution_started",
    "worker_registered",
    "output",
    "execution_finished",
    "control_applied",
    "control_rejected",
    "validator_result",
    "timer_set",
    "timer_fired",
    "timer_cancelled",
    "run_ended",
    "watermark",
    "cell_user",
    "image_stored",
    "egress",
)

# Events that are observations a resolution may cite (docs/patches.md).
OBSERVATION_KINDS = frozenset(
    {
        "message_received",
        "execution_finished",
        "timer_fired",
        "control_rejected",
        "validator_result",
    }
)
