"""The seam between the harness and a model provider.

A provider answers one attempt of one Turn in one of three ways:

- a ``ModelReply`` whose ``patch`` is set: exactly one ``step`` call, admissible;
- a ``ModelReply`` whose ``invalid`` is set: the provider answered (and billed ``usage``) but
  the reply cannot be admitted — no ``step`` call or more than one, malformed input, cut off
  at ``max_tokens``, a refusal. It uses up one of the Turn's ``model_attempts``; the reason is
  committed and shown to the model on its next attempt (``ModelRequest.feedback``);
- ``ModelError``: no usable answer. ``transient`` errors (connection, timeout, 408, 409, 429,
  5xx, 529) are retried by the harness with backoff for up to ``provider_retry_seconds`` per
  Turn without using up ``model_attempts``; any other error ends the run with its message.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from rio_ci.untrusted.jsonio import dumps, finite_copy


@dataclass(frozen=True)
class Price:
    """USD per million tokens of fresh input, output, cache writes and cache reads."""

    input: float
    output: float
    cache_write: float
    cache_read: float

    @classmethod
    def flat(cls, input: float, output: float, cache_write_factor: float) -> Price:
        """A price given as ``--price IN/OUT``: cache writes at the provider's write premium
        over IN (``cache_write_factor``, its row of the providers table), cache reads as
        fresh input (far above their real price), so the count never falls below the
        truth."""
        return cls(input, output, input * cache_write_factor, input)

    def cost(self, usage: Usage) -> float:
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_write_tokens * self.cache_write
            + usage.cache_read_tokens * self.cache_read
        ) / 1_000_000


@dataclass(frozen=True)
class Usage:
    """What one billed reply used. ``input_tokens`` counts fresh input only; cache writes and
    reads are counted apart (the provider bills them at other prices). ``cost_usd`` None:
    unknown, never counted as free."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    cost_usd: float | None = None

    @property
    def all_input_tokens(self) -> int:
        """Every input token the provider processed (what the ``tokens`` budget counts)."""
        return self.input_tokens + self.cache_write_tokens + self.cache_read_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cost_usd": self.cost_usd,
        }


@dataclass(frozen=True)
class Picture:
    """One picture for the model: whose it is (``goal`` or an Inbox message id), a label
    saying so, and the bytes (base64) of a PNG, JPEG, GIF or WebP. ``left_out``, when not
    empty, says why the request carries the label and this note instead of the picture
    (rio_ci/model/pictures.py: it does not fit the provider's limits)."""

    owner: str
    label: str
    media_type: str
    data: str
    left_out: str = ""


@dataclass(frozen=True)
class ModelRequest:
    """Everything a model sees for one attempt of one Turn."""

    turn_id: str
    state: dict[str, Any]  # the Turn's State, fixed when it was prepared (rio.state/1)
    round_index: int  # k: this is the Session's k-th Turn (1-based), counted from accepted patches
    # Why the previous attempt for this Turn was not admitted (a rejected patch or an invalid
    # reply), told to the model so it can correct itself; None on a first attempt.
    feedback: str | None = None
    delivered_refs: list[str] = field(default_factory=list)  # session:event:N of delivered messages
    # The repository's own guidance for agents (AGENTS.md, CLAUDE.md or
    # .github/copilot-instructions.md in the working directory), clipped; None when absent.
    guidance: str | None = None
    # Where the model is (date, Unix time, OS, Python, working directory, git status): built
    # for each request (rio_ci/model/environment_block.py), sent after the cached prefix.
    environment_block: str | None = None
    # Pictures of the goal and of the Inbox messages in this Turn's State, sent as image
    # blocks (the goal's with the stable part, the messages' after the volatile part).
    images: tuple[Picture, ...] = ()


@dataclass(frozen=True)
class ModelReply:
    """A complete response. ``patch`` is the ``step`` tool's ``patch`` (a list of operations),
    None when ``invalid`` says why the reply cannot be admitted. ``rationale`` is what the
    model wrote before its call (its text, else its thinking summary). ``raw`` is what gets
    committed to the Journal (JSON-serialisable, no secrets)."""

    patch: list[Any] | None
    usage: Usage
    raw: dict[str, Any]
    rationale: str = ""
    invalid: str | None = None


class Model(Protocol):
    name: str

    def price(self) -> Price | None:
        """What this model costs, or None when unknown."""
        ...

    def cost(self, usage: Usage) -> float | None:
        """What ``usage`` costs with this model (its price tiers included), or None."""
        ...

    def ask(self, request: ModelRequest) -> ModelReply:
        """Return a complete reply or raise ``rio_ci.core.errors.ModelError``. Must not retry by
        itself: the harness persists attempts and backoff."""
        ...


@runtime_checkable
class KeyCheck(Protocol):
    """A model whose provider can say, at no cost, whether it takes the key and knows the
    model (the set-up check, docs/github.md)."""

    def verify(self) -> tuple[str, str] | None:
        """None when it does, else ``(what, why)``: what was refused (``key``, ``model`` or
        ``provider``) and why, in one line."""
        ...


def strict_reply(reply: ModelReply) -> ModelReply:
    """``reply`` as the Journal can hold it. A provider's JSON parser is lenient (it reads
    ``1e999`` as infinity, and ``NaN``): a reply whose patch or record holds a number strict
    JSON cannot carry becomes an invalid reply, its record keeping the number's spelling, so
    it is committed and billed like any other and the model is told why."""
    try:
        dumps([reply.patch, reply.raw, reply.usage.to_dict()])
        return reply
    except ValueError:
        why = (
            "malformed step input: it holds a number that JSON cannot carry (NaN, Infinity "
            "or one too large for a 64-bit float); write such values as strings."
        )
        raw = finite_copy(reply.raw)
        raw["invalid"] = reply.invalid or why
        return replace(reply, patch=None, raw=raw, invalid=reply.invalid or why)
