"""Models answer a Turn with one ``step`` call. See ``base.Model``; ``build_model`` turns a
``--model`` spec into one."""

from __future__ import annotations

from rio_ci.errors import UsageError
from rio_ci.model.base import Model, Price

DEFAULT_MODEL = "claude-sonnet-5-5"


def build_model(spec: str, *, effort: str = "high", price: Price | None = None) -> Model:
    """``anthropic`` / ``anthropic:MODEL`` / ``scripted:FILE`` (default: the current Sonnet)."""
    kind, _, rest = (spec or "anthropic").partition(":")
    if kind == "scripted" and rest:
        from rio_ci.model.scripted import ScriptedModel

        return ScriptedModel(rest)
    if kind == "anthropic":
        from rio_ci.model.anthropic import AnthropicModel

        return AnthropicModel(rest or DEFAULT_MODEL)
    raise UsageError(f"--model must be anthropic[:MODEL] or scripted:FILE, got {spec!r}")
