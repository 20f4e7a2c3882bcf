"""The launch record's format: a write-ahead copy of a Session's Journal tail.

A launch record is one git commit (pushed by ``rio_ci.github.record``) holding two files:

    record.json   {"schema": "rio.launch/1", "session_id", "issue", "generation",
                   "after_seq", "last_seq", "cell_id", "run_id"[, "superseded_by"]}
    tail.jsonl    every event with seq > after_seq, one {"seq", "kind", "at", "data"} a line

``generation`` is the artifact generation the job restored (0: none) and ``after_seq`` the
last seq of that generation's Journal (0 when the job created the Session), so the tail is
exactly what the artifact does not have. ``superseded_by`` names the generation that holds
all of it once finish has written one. The files come from a ref anyone with push access can
write: ``read`` checks sizes, strict JSON of any depth and every field's shape, and a failure
is a reason, never an exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rio_ci.core.events import KINDS
from rio_ci.core.json_value import is_int
from rio_ci.store.sessionfile import DECODER

SCHEMA = "rio.launch/1"
HEADER = "record.json"
TAIL = "tail.jsonl"
MAX_TAIL_BYTES = 512 * 1024 * 1024  # as an artifact's snapshot
MAX_HEADER_BYTES = 64 * 1024  # a few ids and counts
HEADER_FIELDS = (
    "schema",
    "session_id",
    "issue",
    "generation",
    "after_seq",
    "last_seq",
    "cell_id",
    "run_id",
)


@dataclass(frozen=True)
class Record:
    """A launch record as read back: the header's facts and the tail's events."""

    session_id: str
    generation: int
    after_seq: int
    events: list[dict[str, Any]]  # {"seq", "kind", "at", "data"}, seqs after_seq + 1, ...
    superseded_by: int | None = None  # the generation that holds all of it (finish wrote it)

    @property
    def last_seq(self) -> int:
        return self.events[-1]["seq"] if self.events else self.after_seq


def event_line(event: dict[str, Any]) -> str:
    """One Journal event (as ``Session.events`` yields it) as a tail line."""
    data = {k: v for k, v in event.items() if k not in ("seq", "kind", "at")}
    return json.dumps(
        {"seq": event["seq"], "kind": event["kind"], "at": event["at"], "data": data},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def header_text(header: dict[str, Any]) -> bytes:
    """``record.json`` as it is stored."""
    return (json.dumps(header, sort_keys=True) + "\n").encode()


def read(header: str, tail: str) -> Record | str:
    """The record the two files hold, or why they are not a well-formed one."""
    try:
        parsed = _loads(header)
        events = [_loads(line) for line in tail.splitlines() if line.strip()]
    except ValueError as exc:
        return f"unreadable: {' '.join(str(exc).split())[:300]}"
    return parse(parsed, events) or f"not a {SCHEMA} record"


def parse(header: Any, events: list[Any]) -> Record | None:
    """A Record from its parts, or None when they are not a well-formed rio.launch/1 record
    (seqs after ``after_seq`` without gaps, known kinds, objects as data)."""
    if (
        not isinstance(header, dict)
        or header.get("schema") != SCHEMA
        or not set(HEADER_FIELDS) <= set(header)
    ):
        return None
    session_id, generation, after = header["session_id"], header["generation"], header["after_seq"]
    if not isinstance(session_id, str) or not _count(generation) or not _count(after):
        return None
    for offset, event in enumerate(events, start=1):
        if not (
            isinstance(event, dict)
            and event.get("seq") == after + offset
            and event.get("kind") in KINDS
            and isinstance(event.get("data"), dict)
        ):
            return None
    if header["last_seq"] != after + len(events):
        return None
    superseded = header.get("superseded_by")
    if superseded is not None and not (_count(superseded) and superseded > 0):
        return None
    return Record(session_id, generation, after, events, superseded)


def _loads(text: str) -> Any:
    """Strict JSON, as the Journal's rows are; nesting too deep for the parser is a
    ValueError like any other damage."""
    try:
        return DECODER.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _count(value: Any) -> bool:
    return is_int(value) and value >= 0
