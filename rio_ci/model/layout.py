"""How one Turn is laid out in a Messages API request, so the provider's prompt cache works.

The provider caches a request's prefix up to a ``cache_control`` breakpoint and, on the next
request, re-uses the longest prefix of whole blocks that is byte-identical. So the request is
ordered from what never changes to what changes every round:

1. the ``step`` tool and the system prompt (+ the repository's guidance): identical for a whole
   run; breakpoint on the last system block;
2. the stable part of the State, one content block per piece: the head (schema, id, goal), then
   one block per Cell (``/cells/N`` with its definition and, once finished, its Execution's
   facts and output). A round that only appends Cells keeps every earlier block identical; a
   breakpoint sits on the last of these blocks (and one more further back on long lists, since
   the provider looks back only a limited number of blocks for an earlier hit);
3. the volatile part: ``revision`` and the rest of ``runtime`` (unfinished Executions, Inbox,
   usage, limits, validators, pause), then the Turn header and the feedback on the previous
   attempt, and the environment block (date and time, OS, Python, working directory, git
   status: rio_ci/model/environment_block.py). Nothing here is cached.

Outputs are shown as fenced raw text (a fence longer than any backtick run inside), so a
traceback reads as it printed; everything else is JSON. Each piece is its own content block,
so text inside an output can never pass for another Cell.
"""

from __future__ import annotations

import json
import re
from typing import Any

from anthropic.types import CacheControlEphemeralParam, TextBlockParam

from rio_ci.model.base import ModelRequest

__all__ = ["STABLE_HEADER", "VOLATILE_HEADER", "system_blocks", "user_content"]

STABLE_HEADER = "STATE, stable part"
VOLATILE_HEADER = "STATE, part that changes every round"
_STABLE_KEYS = ("schema", "id", "goal")
_STREAMS = ("stdout", "stderr")
# The provider checks for a cached prefix only a limited number of blocks back from each
# breakpoint, so long Cell lists get a second breakpoint this many blocks before the end.
_LOOKBACK = 12
_BACKTICKS = re.compile(r"`{3,}")
_EPHEMERAL: CacheControlEphemeralParam = {"type": "ephemeral"}


def system_blocks(prompt: str, guidance: str | None) -> list[TextBlockParam]:
    """The system prompt, then the repository's guidance when there is any; the last block
    carries the first cache breakpoint."""
    blocks: list[TextBlockParam] = [{"type": "text", "text": prompt}]
    if guidance and guidance.strip():
        blocks.append(
            {
                "type": "text",
                "text": (
                    "Repository guidance, from the working directory's agent instructions file. "
                    "Follow it where it does not conflict with the rules above; it cannot change "
                    "how `step` works.\n\n" + guidance.strip()
                ),
            }
        )
    blocks[-1]["cache_control"] = _EPHEMERAL
    return blocks


def user_content(request: ModelRequest) -> list[Any]:
    """The Turn as content blocks: stable State pieces (cached), then the volatile part."""
    state = request.state
    runtime: dict[str, Any] = state.get("runtime") or {}
    facts: dict[str, Any] = dict(runtime.get("cells") or {})
    cells: list[Any] = state.get("cells") or []
    stable: list[Any] = [
        _text(STABLE_HEADER + "\n" + _json({k: state[k] for k in _STABLE_KEYS if k in state})),
        *_pictures(request, goal=True),  # the goal's pictures: as stable as the goal
    ]
    for index, cell in enumerate(cells):
        key = str(cell.get("id")) if isinstance(cell, dict) else None
        finished = key is not None and (facts.get(key) or {}).get("phase") == "finished"
        stable.append(_text(_cell_text(index, cell, facts.pop(key or "") if finished else None)))
    stable[-1]["cache_control"] = _EPHEMERAL
    if len(stable) > _LOOKBACK + 2:
        stable[-1 - _LOOKBACK]["cache_control"] = _EPHEMERAL
    volatile = {k: v for k, v in state.items() if k not in (*_STABLE_KEYS, "cells", "runtime")}
    volatile["runtime"] = {**runtime, "cells": facts}
    changing: list[Any] = [
        _text(VOLATILE_HEADER + "\n" + _json(volatile)),
        *_pictures(request, goal=False),  # pictures of the Inbox messages shown above
    ]
    # --- after the last breakpoint: what differs on every request (the environment
    # block; see rio_ci/model/environment_block.py) ---
    if request.environment_block:
        changing.append(_text(request.environment_block))
    return [*stable, *changing, _text(_turn_text(request))]


def _pictures(request: ModelRequest, *, goal: bool) -> list[Any]:
    """A label block, then an image block (base64 source), for each picture of the goal
    (``goal``) or of the Inbox messages; a picture left out (rio_ci/model/pictures.py) is
    its label and the note why, and no image."""
    blocks: list[Any] = []
    for picture in request.images:
        if (picture.owner == "goal") != goal:
            continue
        if picture.left_out:
            blocks.append(_text(f"{picture.label} [picture left out: {picture.left_out}]"))
        else:
            blocks.append(_text(picture.label))
            blocks.append(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": picture.media_type,
                        "data": picture.data,
                    },
                }
            )
    return blocks


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


def _text(text: str) -> TextBlockParam:
    return {"type": "text", "text": text}
