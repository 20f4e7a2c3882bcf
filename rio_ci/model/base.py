"""The seam between the harness and a model provider."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # None: unknown, never counted as free


@dataclass(frozen=True)
class ModelRequest:
    """Everything a model sees for one attempt of one Turn."""

    turn_id: str
    state: dict[str, Any]  # the Turn's fixed snapshot (rio.state/1)
    round_index: int  # k: this is the Session's k-th Turn (1-based), counted from accepted patches
    last_rejection: str | None = None  # why the previous attempt's patch was rejected, if it was
    delivered_refs: list[str] = field(default_factory=list)  # session:event:N of delivered messages


@dataclass(frozen=True)
class ModelReply:
    """A complete response. ``patch`` is the ``step`` tool's ``patch`` (a list of operations);
    ``raw`` is what gets committed to the Journal (JSON-serialisable, no secrets)."""

    patch: list[Any]
    usage: Usage
    raw: dict[str, Any]


class Model(Protocol):
    name: str

    def ask(self, request: ModelRequest) -> ModelReply:
        """Return a complete reply or raise ``rio_ci.errors.ModelError``. Must not retry by
        itself: the harness persists attempts and backoff."""
        ...
