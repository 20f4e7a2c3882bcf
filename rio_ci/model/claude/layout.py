"""How one Turn is laid out in a Messages API request, so Claude's prompt cache works.

The provider caches a request's prefix up to a ``cache_control`` breakpoint and, on the next
request, re-uses the longest prefix of whole blocks that is byte-identical. The Turn is read
in the order rio_ci/model/turn.py gives, from what never changes to what changes every round,
each piece its own content block (a picture an image block, base64), with the breakpoints:

1. the ``step`` tool and the system prompt (+ the repository's guidance): identical for a whole
   run; breakpoint on the last system block;
2. the stable part of the State: a breakpoint on its last block (and one more further back on
   long lists, since the provider looks back only a limited number of blocks for an earlier
   hit);
3. the changing part, the environment block and the Turn: after the last breakpoint, never
   cached.
"""

from __future__ import annotations

from typing import Any

from anthropic.types import CacheControlEphemeralParam, TextBlockParam

from rio_ci.model.base import ModelRequest
from rio_ci.model.turn import Piece, guidance_text, read_turn

__all__ = ["system_blocks", "user_content"]

# The provider checks for a cached prefix only a limited number of blocks back from each
# breakpoint, so long Cell lists get a second breakpoint this many blocks before the end.
_LOOKBACK = 12
_EPHEMERAL: CacheControlEphemeralParam = {"type": "ephemeral"}


def system_blocks(prompt: str, guidance: str | None) -> list[TextBlockParam]:
    """The system prompt, then the repository's guidance when there is any; the last block
    carries the first cache breakpoint."""
    blocks: list[TextBlockParam] = [{"type": "text", "text": prompt}]
    text = guidance_text(guidance)
    if text is not None:
        blocks.append({"type": "text", "text": text})
    blocks[-1]["cache_control"] = _EPHEMERAL
    return blocks


def user_content(request: ModelRequest) -> list[Any]:
    """The Turn as content blocks: stable State pieces (cached), then the changing part."""
    reading = read_turn(request)
    stable = [_block(piece) for piece in reading.stable]
    stable[-1]["cache_control"] = _EPHEMERAL
    if len(stable) > _LOOKBACK + 2:
        stable[-1 - _LOOKBACK]["cache_control"] = _EPHEMERAL
    # --- after the last breakpoint: what differs on every request ---
    changing = [_block(piece) for piece in reading.changing]
    return [*stable, *changing, _block(reading.turn)]


def _block(piece: Piece) -> Any:
    if isinstance(piece, str):
        return {"type": "text", "text": piece}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": piece.media_type, "data": piece.data},
    }
