"""How the Messages API bills prompt caching, as a small model the fakes share.

The rules, as the provider documents them (https://platform.claude.com/docs/en/build-with-claude/
prompt-caching, checked 2026-12-04; docs/performance.md cites them):

- the cached prefix is the whole prompt in the order ``tools`` → ``system`` → ``messages``, up
  to and including a block that carries ``cache_control`` (a *breakpoint*); a request may
  carry at most 4 breakpoints (more is a 400 ``invalid_request_error``);
- a request reads from the cache when its prefix up to a block boundary is byte-identical to
  a prefix an earlier request wrote at one of its breakpoints, and that entry is still alive.
  The API looks for such a hit at each breakpoint and at the 20 block boundaries before it,
  no further back;
- an entry lives 5 minutes (``ttl`` ``"1h"``: an hour) and each hit refreshes it at no cost;
- a prefix shorter than the model's minimum cacheable length is not written (no error);
- usage says it: ``cache_read_input_tokens`` (read), ``cache_creation_input_tokens``
  (written, billed at the 5-minute write price), ``input_tokens`` (the rest, after the last
  breakpoint or not cacheable, at the base price).

This module is the fakes' own knowledge, apart from the product's layout
(``rio_ci/model/claude/layout.py``): a layout that breaks the prefix pays here as it would there.
Tokens are not the provider's tokenizer: a block counts one token per 4 bytes of its JSON
(rounded up), which keeps every ratio of the bench meaningful and deterministic.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "LOOKBACK_BLOCKS",
    "MAX_BREAKPOINTS",
    "Billed",
    "BreakpointError",
    "PromptCache",
    "minimum_tokens",
    "prompt_blocks",
]

MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
BYTES_PER_TOKEN = 4
LIFETIMES = {"5m": 300.0, "1h": 3600.0}
# Minimum cacheable prompt length, in tokens, by model family (the page's table); an id not
# listed gets the common 1,024.
_MINIMUM = {
    "claude-opus-4-5": 4096,
    "claude-opus-4-6": 4096,
    "claude-haiku-4-5": 4096,
    "claude-opus-4-7": 2048,
    "claude-opus-5": 512,
    "claude-fable-5": 512,
    "claude-mythos-5": 512,
}
DEFAULT_MINIMUM = 1024


class BreakpointError(ValueError):
    """A request the API refuses for its ``cache_control`` blocks (HTTP 400)."""


@dataclass(frozen=True)
class Billed:
    """One request's input tokens, split as the API reports them."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int

    @property
    def total(self) -> int:
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


@dataclass(frozen=True)
class Block:
    """One block of the prompt in the provider's order: the hash of the whole prefix up to
    and including it, its tokens, and its breakpoint's lifetime (``None``: no breakpoint)."""

    prefix: str
    tokens: int
    ttl: float | None


def minimum_tokens(model: str) -> int:
    """The minimum cacheable prompt length of ``model`` (longest listed prefix of its id)."""
    best = max((key for key in _MINIMUM if model.startswith(key)), key=len, default=None)
    return DEFAULT_MINIMUM if best is None else _MINIMUM[best]


def prompt_blocks(body: dict[str, Any]) -> list[Block]:
    """``body``'s blocks in cache order (tools, system, each message's content), each with
    the hash of everything up to it. The model is part of every prefix; thinking settings
    are part of the messages' (changing them keeps only the tools and system cached)."""
    digest = hashlib.sha256(json.dumps(body.get("model")).encode())
    blocks: list[Block] = []
    parts: list[tuple[str, Any]] = [("tool", tool) for tool in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str):
        system = [{"type": "text", "text": system}] if system else []
    parts += [("system", block) for block in system or []]
    for number, message in enumerate(body.get("messages") or []):
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        marker = f"message {number} {message.get('role')}"
        if number == 0:
            marker += " " + json.dumps(body.get("thinking"), sort_keys=True)
        parts += [(marker if i == 0 else "block", block) for i, block in enumerate(content)]
    if sum(1 for _, block in parts if _breakpoint(block) is not None) > MAX_BREAKPOINTS:
        raise BreakpointError("A maximum of 4 blocks with cache_control may be provided.")
    for kind, block in parts:
        shown = {k: v for k, v in block.items() if k != "cache_control"}
        data = json.dumps(shown, sort_keys=True, ensure_ascii=False).encode()
        digest.update(kind.encode() + b"\0" + data + b"\0")
        tokens = -(-len(data) // BYTES_PER_TOKEN)
        blocks.append(Block(digest.hexdigest(), tokens, _breakpoint(block)))
    return blocks


def _breakpoint(block: Any) -> float | None:
    control = block.get("cache_control") if isinstance(block, dict) else None
    if not control:
        return None
    if not isinstance(control, dict) or control.get("type") != "ephemeral":
        raise BreakpointError("cache_control.type: must be 'ephemeral'")
    ttl = control.get("ttl", "5m")
    if ttl not in LIFETIMES:
        raise BreakpointError(f"cache_control.ttl: must be '5m' or '1h', not {ttl!r}")
    return LIFETIMES[ttl]


@dataclass
class PromptCache:
    """The provider's cache for one account: entries by prefix hash, with their expiry."""

    clock: Callable[[], float] = time.monotonic
    entries: dict[str, tuple[float, float]] = field(default_factory=dict)  # hash → (expiry, ttl)

    def bill(self, body: dict[str, Any]) -> Billed:
        """Bill ``body`` against the entries earlier requests wrote, then write its own.
        ``BreakpointError`` for a request the API refuses (nothing is read or written)."""
        blocks = prompt_blocks(body)
        now = self.clock()
        ends = [0]
        for block in blocks:
            ends.append(ends[-1] + block.tokens)
        marks = [i for i, block in enumerate(blocks) if block.ttl is not None]
        read = self._longest_hit(blocks, marks, now)
        for i in range(read):  # a hit refreshes the entries it used
            entry = self.entries.get(blocks[i].prefix)
            if entry is not None:
                self.entries[blocks[i].prefix] = (now + entry[1], entry[1])
        written_to = read
        floor = minimum_tokens(str(body.get("model", "")))
        for i in marks:
            ttl = blocks[i].ttl
            if i + 1 > read and ends[i + 1] >= floor and ttl is not None:
                self.entries[blocks[i].prefix] = (now + ttl, ttl)
                written_to = i + 1
        return Billed(
            input_tokens=ends[-1] - ends[written_to],
            cache_creation_input_tokens=ends[written_to] - ends[read],
            cache_read_input_tokens=ends[read],
        )

    def _longest_hit(self, blocks: list[Block], marks: list[int], now: float) -> int:
        """Blocks covered by the longest live entry found at a breakpoint or in the
        ``LOOKBACK_BLOCKS`` boundaries before it."""
        best = 0
        for mark in marks:
            for i in range(mark, max(-1, mark - LOOKBACK_BLOCKS - 1), -1):
                entry = self.entries.get(blocks[i].prefix)
                if entry is not None and entry[0] > now:
                    best = max(best, i + 1)
                    break
        return best
