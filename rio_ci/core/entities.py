"""The Projection's entities, one ``TypedDict`` each: what the fold writes and every reader
reads (``rio_ci.core.projection``). They are JSON objects at run time — the saved projection
and the replay's equality compare them as such — and typed for mypy, which then checks every
``["key"]`` a reader writes. A key the fold does not always write is ``NotRequired``.

Values that stay opaque here are ``Json``: a message's payload, a Timer's payload, a
watermark's value — each is whatever its writer put there.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from rio_ci.core.events import (
    CellUserMode,
    Json,
    MessageData,
    NetworkSettings,
    Result,
    Unresolved,
    WorkerRecord,
)

Phase = Literal["queued", "started", "finished"]


class SessionFacts(TypedDict):
    """What ``session_created`` fixed (``Projection.session``), with the limits a later
    rio-ci added at their defaults."""

    id: str
    goal: str
    cwd: str
    validators: list[list[str]]
    created_seq: int
    limits: dict[str, int | float]
    pass_env: list[str]
    secrets: list[str]
    network: NetworkSettings | None  # None: created before Cells had a network of their own


class Cell(TypedDict):
    """A Cell of the State (``rio.state/1``; its rules: ``rio_ci.core.state``). The fields
    of one kind only are ``NotRequired``: a note has ``text``, a code Cell ``runtime`` and
    ``source``, a cmd Cell ``argv``."""

    id: int
    previous_id: int | None
    kind: str
    text: NotRequired[str]
    role: NotRequired[str]
    target_cell_id: NotRequired[int]
    evidence_refs: NotRequired[list[str]]
    result: NotRequired[str]
    runtime: NotRequired[str]
    source: NotRequired[str]
    argv: NotRequired[list[str]]
    description: NotRequired[str]  # a few words a code or cmd Cell may carry


class ShortCell(TypedDict):
    """A dropped Execution's Cell in short: its kind and the start of its argv or source
    (a note has no Execution, so none is ever short: ``text`` and ``role`` are here for the
    readers that take either kind of Cell)."""

    kind: str
    argv: NotRequired[list[str]]
    source: NotRequired[str]
    text: NotRequired[str]
    role: NotRequired[str]
    description: NotRequired[str]


class Execution(TypedDict):
    """One code or cmd Cell's run. Each stream keeps its head (``stdout``), its tail
    window (``stdout_tail``) and the bytes elided between them; ``*_truncated``: written by
    rio-ci 0.1, whose output events kept a prefix and dropped the rest."""

    cell_id: int
    kind: str
    cell: Cell
    phase: Phase
    result: Result | None
    result_seq: int | None
    stdout: str
    stderr: str
    stdout_tail: str
    stderr_tail: str
    stdout_elided: int
    stderr_elided: int
    stdout_truncated: NotRequired[bool]
    stderr_truncated: NotRequired[bool]
    resolved_by: int | None
    token: str | None
    identity: WorkerRecord | None
    accepted_seq: int
    started_seq: NotRequired[int]


class Departed(TypedDict):
    """What is kept of a dropped Execution (``Projection.departed``)."""

    cell_id: int
    cell: ShortCell
    result: Result | None
    resolved_by: int | None


class Message(MessageData):
    """An Inbox message: ``seq`` is the event that committed it."""

    seq: int


class Response(TypedDict):
    """The open Turn's last model reply or failure."""

    attempt: int
    ok: bool
    seq: int
    patch: list[Json] | None
    error: str | None
    transient: bool


class Fact(TypedDict):
    """What the State shows of one Execution (``runtime.cells``)."""

    phase: Phase
    result: Result | None
    stdout: str
    stderr: str
    truncated: bool
    resolved_by: int | None


class Runtime(TypedDict):
    next_cell_id: int
    cells: dict[str, Fact]
    inbox: list[Message]
    usage: Usage
    pause: str | None
    limits: dict[str, int | float]
    validators: list[list[str]]


class State(TypedDict):
    """The State a Turn shows the model (``rio.state/1``, rendered by
    ``rio_ci.core.view``)."""

    schema: str
    id: str
    revision: int
    goal: str
    cells: list[Cell]
    runtime: Runtime


class Turn(TypedDict):
    """The open Turn: the State it shows, the messages it delivers, its attempts so far."""

    turn_id: str
    revision: int
    delivered: list[str]
    state: State
    seq: int
    attempts: int
    transient: int
    retry_since: float | None
    not_before: float
    feedback: str | None
    response: Response | None
    refused: bool


class Timer(TypedDict):
    id: str
    deadline: float
    payload: Json
    seq: int


class Usage(TypedDict):
    """The Session's model usage so far: attempts are counted as soon as they are made
    (``unknown_cost_attempts`` until their cost is known)."""

    rounds: int
    attempts: int
    input_tokens: int
    output_tokens: int
    cache_write_tokens: int
    cache_read_tokens: int
    cost_usd: float
    unknown_cost_attempts: int


class Ended(TypedDict):
    result: Literal["success", "failure"]
    reason: str
    seq: int
    unresolved: list[Unresolved]
    cleanup_error: str | None


class RefusedHost(TypedDict):
    """A host and port the egress proxy refused, counted; the last Cell it refused (None: a
    validator) and why. ``*``, port 0: every host past the Projection's bound."""

    host: str
    port: int
    count: int
    cell_id: int | None
    reason: NotRequired[str]


class EgressTally(TypedDict):
    """Connections through the egress proxy: how many were admitted, and the refused hosts."""

    allowed: int
    refused: list[RefusedHost]


class CellUserRecord(CellUserMode):
    """How Cells run (the last ``cell_user`` event, with its seq)."""

    seq: int


def stream_keys(
    stream: Literal["stdout", "stderr"],
) -> tuple[
    Literal["stdout_tail", "stderr_tail"],
    Literal["stdout_elided", "stderr_elided"],
    Literal["stdout_truncated", "stderr_truncated"],
]:
    """An Execution's keys for ``stream``'s tail window, elided bytes and 0.1 truncation."""
    if stream == "stdout":
        return "stdout_tail", "stdout_elided", "stdout_truncated"
    return "stderr_tail", "stderr_elided", "stderr_truncated"
