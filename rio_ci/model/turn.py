"""What a model reads of a Turn, in the order it reads it, whatever its provider.

Providers cache a request's prefix: a request that begins with the same bytes as the one
before is billed less for them. So a Turn is read from what never changes to what changes
every round (docs/models.md, "What the model sees, and why"):

1. the system prompt (``prompt.md``) and the repository's guidance: the same for a whole run;
2. the stable part of the State, one piece each: the head (schema, id, goal) and the goal's
   pictures, then one piece per Cell (``/cells/N`` with its definition and, once finished,
   its Execution's facts and output). A round that only appends Cells keeps every earlier
   piece the same;
3. the changing part: ``revision`` and the rest of ``runtime`` (unfinished Executions, Inbox,
   usage, limits, validators, pause) and the pictures of the Inbox messages, then the
   environment block (rio_ci/model/environment_block.py);
4. the Turn itself: its id and round, the messages delivered, why the previous attempt was
   not admitted, and what to do.

A piece is a text or a picture. Outputs are shown as fenced raw text (a fence longer than any
backtick run inside), so a traceback reads as it printed; everything else is JSON. Each piece
is its own, so text inside an output can never pass for another Cell. How pieces become a
request (content blocks, where the cache breakpoints go) is the provider's own
(rio_ci/model/claude/layout.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from rio_ci.model.base import ModelRequest, Picture

__all__ = [
    "STABLE_HEADER",
    "VOLATILE_HEADER",
    "Piece",
    "Reading",
    "guidance_text",
    "read_turn",
    "system_prompt",
]

STABLE_HEADER = "STATE, stable part"
VOLATILE_HEADER = "STATE, part that changes every round"
_STABLE_KEYS = ("schema", "id", "goal")
_STREAMS = ("stdout", "stderr")
_BACKTICKS = re.compile(r"`{3,}")

# A text, or a picture to show (one left out is a text: its label and why).
Piece = str | Picture


@dataclass(frozen=True)
class Reading:
    """A Turn as pieces: ``stable`` (the same from round to round while Cells are only
    appended), ``changing`` (different every round), and ``turn``, the closing text."""

    stable: list[Piece]
    changing: list[Piece]
    turn: str


@cache
def system_prompt() -> str:
    """The system prompt shipped as package data (``rio_ci/model/prompt.md``)."""
    return resources.files("rio_ci.model").joinpath("prompt.md").read_text(encoding="utf-8")


def guidance_text(guidance: str | None) -> str | None:
    """The repository's guidance as the model reads it after the system prompt; None when
    there is none."""
    if not guidance or not guidance.strip():
        return None
    return (
        "Repository guidance, from the working directory's agent instructions file. "
        "Follow it where it does not conflict with the rules above; it cannot change "
        "how `step` works.\n\n" + guidance.strip()
    )


def read_turn(request: ModelRequest) -> Reading:
    """``request``'s Turn as pieces, stable part first (see the module docstring)."""
    state = request.state
    runtime: dict[str, Any] = state.get("runtime") or {}
    facts: dict[str, Any] = dict(runtime.get("cells") or {})
    cells: list[Any] = state.get("cells") or []
    stable: list[Piece] = [
        STABLE_HEADER + "\n" + _json({k: state[k] for k in _STABLE_KEYS if k in state}),
        *_pictures(request, goal=True),  # the goal's pictures: as stable as the goal
    ]
    for index, cell in enumerate(cells):
        key = str(cell.get("id")) if isinstance(cell, dict) else None
        finished = key is not None and (facts.get(key) or {}).get("phase") == "finished"
        stable.append(_cell_text(index, cell, facts.pop(key or "") if finished else None))
    volatile = {k: v for k, v in state.items() if k not in (*_STABLE_KEYS, "cells", "runtime")}
    volatile["runtime"] = {**runtime, "cells": facts}
    changing: list[Piece] = [
        VOLATILE_HEADER + "\n" + _json(volatile),
        *_pictures(request, goal=False),  # pictures of the Inbox messages shown above
    ]
    if (
        request.environment_block
    ):  # what differs on every request (rio_ci/model/environment_block.py)
        changing.append(request.environment_block)
    return Reading(stable, changing, _turn_text(request))


def _pictures(request: ModelRequest, *, goal: bool) -> list[Piece]:
    """A label, then the picture, for each picture of the goal (``goal``) or of the Inbox
    messages; a picture left out (rio_ci/model/pictures.py) is its label and the note why."""
    pieces: list[Piece] = []
    for picture in request.images:
        if (picture.owner == "goal") != goal:
            continue
        if picture.left_out:
            pieces.append(f"{picture.label} [picture left out: {picture.left_out}]")
        else:
            pieces += [picture.label, picture]
    return pieces


def _cell_text(index: int, cell: Any, facts: dict[str, Any] | None) -> str:
    lines = [f"/cells/{index} {_json(cell)}"]
    if facts is not None:
        key = str(cell["id"])
        shown = {k: v for k, v in facts.items() if not (k in _STREAMS and isinstance(v, str) and v)}
        lines.append(f'runtime.cells["{key}"] {_json(shown)}')
        for stream in _STREAMS:
            text = facts.get(stream)
            if isinstance(text, str) and text:
                fence = _fence_for(text)
                lines += [f"{fence}{stream} of Cell {key}", text.removesuffix("\n"), fence]
    return "\n".join(lines)


def _turn_text(request: ModelRequest) -> str:
    lines = [f"Turn {request.turn_id} (round {request.round_index})."]
    if request.delivered_refs:
        lines.append("Observations delivered to this Turn: " + ", ".join(request.delivered_refs))
    if request.feedback:
        lines.append(
            "Your previous attempt for this Turn was not admitted, and nothing of it "
            f"was applied: {request.feedback}\nCorrect that in this attempt."
        )
    lines.append("Decide the next step and call `step` exactly once.")
    return "\n".join(lines)


def _fence_for(text: str) -> str:
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=2)
    return "`" * max(3, longest + 1)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
