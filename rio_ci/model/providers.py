"""``--model`` specs → a ``Model`` (docs/cli.md).

    anthropic | anthropic:MODEL     the Claude API (default model: the table's default)
    bedrock:MODEL | vertex:MODEL    the same models through Amazon Bedrock / Google Vertex
    scripted:FILE                   a YAML list of patches, one per round (offline)

MODEL is a Claude API id (``claude-sonnet-5-5``), an alias from the model table, or the
platform's own id (a Bedrock inference profile such as ``global.anthropic.claude-opus-5-5``),
which is sent as given.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from rio_ci.core.errors import UsageError
from rio_ci.model.base import Model, Price
from rio_ci.model.table import DEFAULT_EFFORT

__all__ = [
    "DEFAULT_EFFORT",
    "DEFAULT_SPEC",
    "build_model",
    "fallback_spec",
    "parse_price",
    "priced_model",
    "priced_models",
]

# The spec a run without ``--model`` (the action without ``model``) uses: the model table's
# default model (``table.default_model()``) on the Claude API. rio_ci's one default model.
DEFAULT_SPEC = "anthropic"
_CLAUDE = ("anthropic", "bedrock", "vertex")
_PRICE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)/([0-9]+(?:\.[0-9]+)?)\Z")


def build_model(
    spec: str | None = None,
    *,
    effort: str = DEFAULT_EFFORT,
    price: Price | None = None,
    connect: bool = True,
) -> Model:
    """The ``Model`` that ``spec`` names; ``UsageError`` for a spec that names none.

    ``effort`` and ``price`` (``--effort``, ``--price``) apply to Claude models; a script
    costs nothing and ignores them. ``connect=False``: a Claude model without its client
    (its name and price only).
    """
    kind, _, rest = (spec or DEFAULT_SPEC).partition(":")
    if kind == "scripted":
        if not rest:
            raise UsageError("--model scripted:FILE needs a file")
        from rio_ci.model.scripted import ScriptedModel

        return ScriptedModel(rest)
    if kind in _CLAUDE:
        from rio_ci.model import table
        from rio_ci.model.anthropic import AnthropicModel

        return AnthropicModel(
            rest or table.default_model(),
            provider=kind,
            effort=effort,
            price=price,
            connect=connect,
        )
    raise UsageError(
        f"--model must be anthropic[:MODEL], bedrock:MODEL, vertex:MODEL or "
        f"scripted:FILE; got {spec!r}"
    )


def parse_price(text: str) -> Price:
    """``IN/OUT`` in USD per million input / output tokens."""
    match = _PRICE.match(text.strip())
    if not match:
        raise UsageError(
            f"--price expects IN/OUT in USD per million tokens (e.g. 3/15), got {text!r}"
        )
    rates = float(match.group(1)), float(match.group(2))
    if not all(math.isfinite(rate) for rate in rates):  # 400 digits parse as infinity
        raise UsageError(f"--price {text!r}: too large to be a price")
    return Price.flat(*rates)


def priced_model(
    spec: str, *, effort: str, price: Price | None, stored: Mapping[str, Mapping[str, float]]
) -> Model:
    """The model of ``spec`` with a known price: ``price`` (``--price``), else the one an
    earlier run stored in the Session for this model (``stored``, by model name), else the
    model's own. A stored price wins over the table's, so every job of a Session counts cost
    the same way. Refuses (``UsageError``, exit 2) a model whose cost cannot be counted,
    before its credentials are looked at: the arguments alone decide that."""
    named = build_model(spec, effort=effort, price=price, connect=False)
    kept = Price(**stored[named.name]) if named.name in stored else None
    if price is not None and kept is not None and price != kept:
        # Usage already counted at the stored price: another one would change what the
        # budgets count mid-Session (a price of 0 would lift cost_usd altogether).
        raise UsageError(
            f"this Session already counts {named.name} at {kept.input:g}/{kept.output:g} USD "
            f"per million input/output tokens (stored by an earlier run); --price "
            f"{price.input:g}/{price.output:g} would change how its budgets are counted"
        )
    if price is None:
        price = kept or named.price()
    if price is None:
        raise UsageError(
            f"{named.name} has no known price, so its cost cannot be counted against the "
            f"cost_usd budget; give --price IN/OUT (USD per million input / output tokens)"
        )
    return build_model(spec, effort=effort, price=price)


def fallback_spec(spec: str, fallback: str) -> str:
    """The spec of ``--fallback-model``: a full spec as given; a bare model id on the
    provider of ``spec`` (``--model bedrock:A --fallback-model B`` means ``bedrock:B``)."""
    kind, sep, _ = fallback.partition(":")
    if sep and kind in (*_CLAUDE, "scripted"):
        return fallback
    provider = (spec or DEFAULT_SPEC).partition(":")[0]
    return f"{provider if provider in _CLAUDE else 'anthropic'}:{fallback}"


def priced_models(
    spec: str,
    fallback: str | None,
    *,
    effort: str,
    price: Price | None,
    stored: Mapping[str, Mapping[str, float]],
) -> tuple[Model, Model | None]:
    """The model of ``spec`` and the fallback model (``--fallback-model``, asked after a
    refusal), both priced as ``priced_model`` prices one. ``price`` is the main model's; the
    fallback's price comes from the Session or the table, and an unpriced fallback is
    refused (exit 2) like an unpriced ``--model``."""
    model = priced_model(spec, effort=effort, price=price, stored=stored)
    if fallback is None or not fallback.strip():
        return model, None
    other = fallback_spec(spec, fallback.strip())
    try:
        return model, priced_model(other, effort=effort, price=None, stored=stored)
    except UsageError as exc:
        raise UsageError(f"--fallback-model: {exc}") from None
