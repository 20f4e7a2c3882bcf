"""``--model`` specs → a ``Model`` (SPEC §11).

    anthropic | anthropic:MODEL     the Claude API (default model: the table's default)
    bedrock:MODEL | vertex:MODEL    the same models through Amazon Bedrock / Google Vertex
    scripted:FILE                   a YAML list of patches, one per round (offline)

MODEL is a Claude API id (``claude-sonnet-5-5``), an alias from the model table, or the
platform's own id (a Bedrock inference profile such as ``global.anthropic.claude-opus-5-5``),
which is sent as given.
"""

from __future__ import annotations

from rio_ci.errors import UsageError
from rio_ci.model.base import Model, Price

__all__ = ["DEFAULT_SPEC", "build_model"]

DEFAULT_SPEC = "anthropic"
_CLAUDE = ("anthropic", "bedrock", "vertex")


def build_model(spec: str | None = None, *, effort: str = "high",
                price: Price | None = None) -> Model:
    """The ``Model`` that ``spec`` names; ``UsageError`` for a spec that names none.

    ``effort`` and ``price`` (``--effort``, ``--price``) apply to Claude models; a script
    costs nothing and ignores them.
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

        return AnthropicModel(rest or table.default_model(), provider=kind, effort=effort,
                              price=price)
    raise UsageError(f"--model must be anthropic[:MODEL], bedrock:MODEL, vertex:MODEL or "
                     f"scripted:FILE; got {spec!r}")
