"""What the model sees: the State of a Turn (``rio.state/1``), rendered from the projection.

The State never exceeds ``context_bytes``. Each stream's retained output is already bounded
(the first and the last half of ``output_bytes``, with a marker of what was elided); when the
whole State would still be too big, the outputs of the oldest finished Executions are replaced
by a marker that says how to read them in full. Nothing is dropped silently, and the Journal
keeps everything it retained.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from rio_ci.core.entities import Cell, Execution, Fact, Message, State, stream_keys
from rio_ci.core.json_value import encoded_size
from rio_ci.core.output import joined
from rio_ci.core.projection import Projection, is_unresolved
from rio_ci.core.state import SCHEMA

MAX_DELIVERED = 64  # messages folded into one Turn, at most


def render(proj: Projection, inbox: list[Message]) -> State:
    """The State a Turn shows: heads, runtime facts, and the given Inbox messages, with the
    oldest finished outputs masked as far as needed to fit ``context_bytes``."""
    state = _unbounded(proj, inbox)
    limit = proj.limits.context_bytes
    size = encoded_size(state)
    if size <= limit:
        return state
    facts = state["runtime"]["cells"]
    for key in _mask_order(proj, facts):
        for stream in ("stdout", "stderr"):
            text = facts[key][stream]
            if not text:
                continue
            marker = masked_marker(int(key), stream, len(text.encode()))
            size -= encoded_size(text) - encoded_size(marker)
            facts[key][stream] = marker
        if size <= limit:
            break
    return state


def masked_marker(cell_id: int, stream: str, size: int) -> str:
    return (
        f"[{size} bytes of {stream} hidden to keep the State within context_bytes; read "
        f"them with rio_ci.api.output({cell_id}, {stream!r}) in a Cell or "
        f"`rio-ci output DB {cell_id} --stream {stream}`]"
    )


def retained(execution: Execution, stream: Literal["stdout", "stderr"]) -> str:
    """A stream's retained text: its head, then a marker and the tail when bytes between
    them were elided."""
    tail, elided, _ = stream_keys(stream)
    return joined(execution[stream], execution.get(tail, ""), execution.get(elided, 0))


def next_turn(proj: Projection) -> tuple[list[Message], State]:
    """The messages a new Turn delivers (``select_inbox``) and the State it shows
    (``render``), rendered once when they all fit unmasked (the usual case)."""
    first = proj.inbox[:MAX_DELIVERED]
    state = _unbounded(proj, first)
    if encoded_size(state) <= proj.limits.context_bytes:
        return list(first), state  # what render() returns for them, and select_inbox() picks
    chosen = select_inbox(proj)
    return chosen, render(proj, chosen)


def select_inbox(proj: Projection) -> list[Message]:
    """A bounded set of unconsumed messages, in receipt order, that fits the context once
    every output is masked (at least one message, so the Inbox always drains)."""
    everything_masked = _unbounded(proj, [])
    for key, fact in everything_masked["runtime"]["cells"].items():
        for stream in ("stdout", "stderr"):
            if fact[stream]:
                fact[stream] = masked_marker(int(key), stream, len(fact[stream].encode()))
    budget = proj.limits.context_bytes - encoded_size(everything_masked)
    chosen: list[Message] = []
    for message in proj.inbox[:MAX_DELIVERED]:
        size = encoded_size(message) + 1
        if size > budget:
            if chosen:
                break
            # The first message alone is too large (odd limits: output_bytes near
            # context_bytes): delivered cut, saying so, never silently and never over.
            message = clipped_message(message, budget - 1)
            size = encoded_size(message) + 1
        budget -= size
        chosen.append(message)
    return chosen


def clipped_message(message: Message, room: int) -> Message:
    """``message`` with its payload replaced by the start of the payload's JSON, cut to
    fit ``room`` bytes with the rest of the message, and the payload's full size: the
    whole message stays in the Journal (``rio-ci state``, ``events``)."""
    text = json.dumps(message["payload"], ensure_ascii=False, allow_nan=False)
    payload: dict[str, Any] = {"truncated": True, "payload_bytes": len(text.encode()), "head": ""}
    shell: Message = {**message, "payload": payload}
    free = max(0, room - encoded_size(shell))
    head = text.encode()[:free].decode("utf-8", "ignore")
    while head and encoded_size({**shell, "payload": {**payload, "head": head}}) > room:
        head = head[: len(head) * 9 // 10]  # JSON escapes make the head longer than its text
    return {**shell, "payload": {**payload, "head": head}}


def runtime_cells(proj: Projection, head_ids: list[int]) -> dict[str, Fact]:
    """Execution facts the model may see: heads with an Execution, every unfinished
    Execution, every unresolved UnknownExecution (docs/patches.md)."""
    heads = set(head_ids)
    shown: dict[str, Fact] = {}
    for key, ex in sorted(proj.executions.items(), key=lambda kv: int(kv[0])):
        if int(key) in heads or ex["phase"] != "finished" or is_unresolved(ex):
            shown[key] = {
                "phase": ex["phase"],
                "result": ex["result"],
                "stdout": retained(ex, "stdout"),
                "stderr": retained(ex, "stderr"),
                "truncated": bool(
                    ex.get("stdout_elided")
                    or ex.get("stderr_elided")
                    or ex.get("stdout_truncated")
                    or ex.get("stderr_truncated")
                ),
                "resolved_by": ex["resolved_by"],
            }
    return shown


def unbounded_size(proj: Projection, cells: list[Cell], cells_size: int | None = None) -> int:
    """``encoded_size`` of the unmasked State with ``cells`` as heads and no Inbox, added up
    from its parts (``cells_size``: ``encoded_size(cells)`` if known): compact JSON puts
    nothing between parts, so ``[a,b]`` is ``[]`` plus ``a,b``."""
    facts = runtime_cells(proj, [c["id"] for c in cells])
    cells_size = encoded_size(cells) if cells_size is None else cells_size
    return _shell_size(proj) + (cells_size - 2) + (encoded_size(facts) - 2)


# The last Session's fixed part of the State (id, goal, limits, validators: set when it was
# created, never changed) with the JSON around it, measured once: encoding the limits alone
# took a tenth of a step. Keyed by the session dict itself, held here, so never a stale one.
_FIXED: list[Any] = [None, 0]


def _shell_size(proj: Projection) -> int:
    """``encoded_size`` of the State with no Cells, no facts and no Inbox."""
    variable = encoded_size([proj.revision, proj.next_cell_id, proj.usage, proj.pause])
    if _FIXED[0] is not proj.session:
        _FIXED[:] = [
            proj.session,
            encoded_size(_unbounded(proj, [], cells=[], facts={})) - variable,
        ]
    return int(_FIXED[1]) + variable


def _unbounded(
    proj: Projection,
    inbox: list[Message],
    *,
    cells: list[Cell] | None = None,
    facts: dict[str, Fact] | None = None,
) -> State:
    cells = proj.cells if cells is None else cells
    return {
        "schema": SCHEMA,
        "id": proj.session["id"],
        "revision": proj.revision,
        "goal": proj.session["goal"],
        "cells": [c.copy() for c in cells],
        "runtime": {
            "next_cell_id": proj.next_cell_id,
            "cells": runtime_cells(proj, [c["id"] for c in cells]) if facts is None else facts,
            "inbox": [m.copy() for m in inbox],
            "usage": proj.usage.copy(),
            "pause": proj.pause,
            "limits": proj.limits.to_dict(),
            "validators": [list(argv) for argv in proj.session["validators"]],
        },
    }


def _mask_order(proj: Projection, facts: dict[str, Fact]) -> list[str]:
    """Oldest finished results first; unfinished Executions last."""

    def age(key: str) -> tuple[int, int]:
        seq = proj.executions[key].get("result_seq")
        return (0, seq) if seq is not None else (1, int(key))

    return sorted(facts, key=age)
