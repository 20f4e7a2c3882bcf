"""The model table: what rio_ci knows about each Claude model, read from ``models.json``.

Everything price- or feature-related that the Claude client does comes from that one data
file (limits, list prices with cache prices, which ``thinking`` / ``output_config.effort``
values a model accepts, what one request may carry). ``docs/models.md`` says where each
figure comes from and when it was checked. A model id the table does not list still works:
it gets the request features of the current family (``unlisted`` in the file) and an unknown
price, never a guessed one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from rio_ci.model.base import Price, Usage
from rio_ci.model.pictures import RequestLimits

__all__ = [
    "EFFORTS",
    "Features",
    "ModelInfo",
    "RequestLimits",
    "Retired",
    "checked",
    "default_model",
    "lookup",
    "max_tokens",
    "request_limits",
    "retired",
    "table",
]

EFFORTS = ("low", "medium", "high", "xhigh", "max")

# Bedrock and Vertex ids wrap the Claude API id: "global.anthropic.claude-opus-5-5",
# "anthropic.claude-haiku-4-5-20251001-v1:0", "claude-opus-4-5@20251101".
_PLATFORM_WRAPPING = re.compile(
    r"^(?:(?:us|eu|apac|jp|au|global)\.)?(?:anthropic\.)?(?P<id>[a-z0-9.-]+?)(?:-v\d+(?::\d+)?)?"
    r"(?:@[0-9a-z-]+)?\Z"
)


@dataclass(frozen=True)
class Features:
    """Which request features a model accepts. ``thinking``: ``adaptive`` (may be turned off),
    ``adaptive_always_on``, ``extended`` (manual ``budget_tokens`` only) or ``none``.
    ``effort``: the ``output_config.effort`` levels accepted (empty: no effort parameter)."""

    thinking: str
    thinking_display: bool
    effort: tuple[str, ...]
    default_effort: str | None
    forced_tool_choice: str
    sampling_params: str
    assistant_prefill: str
    strict_tools: bool  # accepts ``strict: true`` on a tool (grammar-constrained tool input)


@dataclass(frozen=True)
class ModelInfo:
    id: str
    name: str
    status: str  # active | legacy | restricted | unlisted
    context_window: int | None
    max_output: int
    features: Features
    price: Price | None  # Claude API list price (5-minute cache writes)
    long_prompt: tuple[int, Price] | None  # (threshold in prompt tokens, price above it)
    bedrock_id: str | None
    bedrock_endpoint: str  # mantle (Messages API) | runtime (legacy InvokeModel)
    vertex_id: str | None

    def platform_id(self, provider: str) -> str:
        """The id to send on ``provider``: the table's platform id, else the Claude API id."""
        if provider == "bedrock":
            return self.bedrock_id or f"anthropic.{self.id}"
        if provider == "vertex":
            return self.vertex_id or self.id
        return self.id

    def price_on(self, provider: str) -> Price | None:
        """The list price on ``provider``; None where the table has no price for it (partner
        platforms set their own prices), so the cost stays unknown rather than guessed."""
        if table()["platform_prices"].get(provider) != "list":
            return None
        return self.price

    def cost(self, usage: Usage, price: Price) -> float:
        """USD for ``usage`` at ``price``, with this model's long-prompt tier when it has one
        and ``price`` is its own list price (a ``--price`` override is taken as given)."""
        if self.long_prompt is not None and price == self.price:
            threshold, long_price = self.long_prompt
            if usage.all_input_tokens > threshold:
                return long_price.cost(usage)
        return price.cost(usage)


@dataclass(frozen=True)
class Retired:
    id: str
    retired: str
    replacement: str
    source: str


@cache
def table() -> dict[str, Any]:
    """The parsed ``models.json`` (package data)."""
    text = (
        resources.files("rio_ci.model.claude").joinpath("models.json").read_text(encoding="utf-8")
    )
    data: dict[str, Any] = json.loads(text)
    return data


@cache
def request_limits() -> RequestLimits:
    """What one Messages API request may carry (``request_limits`` in the file)."""
    spec = table()["request_limits"]
    return RequestLimits(
        picture_base64_bytes=int(spec["picture_base64_bytes"]),
        pictures_per_request=int(spec["pictures_per_request"]),
        pictures_at_full_size=int(spec["pictures_at_full_size"]),
        request_bytes=int(spec["request_bytes"]),
    )


def default_model() -> str:
    value: str = table()["default"]
    return value


def checked() -> str:
    """The date the table was last checked against the provider's documentation."""
    value: str = table()["checked"]
    return value


def canonical(model: str) -> str:
    """The Claude API id inside a Bedrock or Vertex id (unchanged when it wraps nothing)."""
    match = _PLATFORM_WRAPPING.match(model)
    return match.group("id") if match else model


def lookup(model: str) -> ModelInfo | None:
    """The table entry for ``model`` (an id, an alias, or a Bedrock / Vertex id), else None."""
    entries = _entries()
    return entries.get(model) or entries.get(canonical(model))


def known_ids() -> list[str]:
    """The ids and aliases of every model the table lists (retired ones left out)."""
    return [name for model, spec in table()["models"].items() for name in (model, *spec["aliases"])]


def unlisted(model: str) -> ModelInfo:
    """What to assume for a model the table does not list: current-family features, no price."""
    spec = table()["unlisted"]
    return ModelInfo(
        id=model,
        name=model,
        status="unlisted",
        context_window=spec["context_window"],
        max_output=spec["max_output"],
        features=_features(spec["features"]),
        price=None,
        long_prompt=None,
        bedrock_id=None,
        bedrock_endpoint="mantle",
        vertex_id=None,
    )


def retired(model: str) -> Retired | None:
    """The retirement record when ``model`` names a retired model."""
    for name, spec in table()["retired"].items():
        names = (name, *spec["aliases"])
        if model in names or canonical(model) in names:
            return Retired(name, spec["retired"], spec["replacement"], spec["source"])
    return None


def max_tokens(info: ModelInfo, effort: str) -> int:
    """The ``max_tokens`` a request at ``effort`` asks for (more room where the model thinks
    longer), capped at the model's maximum output."""
    wanted: int = table()["max_tokens_by_effort"][effort]
    return max(1, min(wanted, info.max_output))


def thinking_budget(effort: str) -> int:
    """The ``budget_tokens`` an ``extended``-thinking model gets for ``--effort``."""
    value: int = table()["extended_thinking_budget"][effort]
    return value


@cache
def _entries() -> dict[str, ModelInfo]:
    found: dict[str, ModelInfo] = {}
    for model_id, spec in table()["models"].items():
        info = _info(model_id, spec)
        for name in (model_id, *spec["aliases"]):
            found[name] = info
    return found


def _info(model_id: str, spec: dict[str, Any]) -> ModelInfo:
    long_prompt = None
    if spec.get("price_long_prompt"):
        tier = spec["price_long_prompt"]
        long_prompt = (int(tier["threshold_tokens"]), _price(tier))
    bedrock = spec.get("bedrock") or {}
    vertex = spec.get("vertex") or {}
    return ModelInfo(
        id=model_id,
        name=spec["name"],
        status=spec["status"],
        context_window=spec["context_window"],
        max_output=spec["max_output"],
        features=_features(spec["features"]),
        price=_price(spec["price"]) if spec.get("price") else None,
        long_prompt=long_prompt,
        bedrock_id=bedrock.get("id"),
        bedrock_endpoint=bedrock.get("endpoint", "mantle"),
        vertex_id=vertex.get("id"),
    )


def _price(spec: dict[str, Any]) -> Price:
    # Only 5-minute cache writes are ever requested (the default ``ephemeral`` TTL).
    return Price(
        float(spec["input"]),
        float(spec["output"]),
        float(spec["cache_write_5m"]),
        float(spec["cache_read"]),
    )


def _features(spec: dict[str, Any]) -> Features:
    return Features(
        thinking=spec["thinking"],
        thinking_display=bool(spec["thinking_display"]),
        effort=tuple(spec["effort"]),
        default_effort=spec["default_effort"],
        forced_tool_choice=spec["forced_tool_choice"],
        sampling_params=spec["sampling_params"],
        assistant_prefill=spec["assistant_prefill"],
        strict_tools=bool(spec.get("strict_tools", False)),
    )
