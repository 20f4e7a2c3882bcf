"""The Anthropic Messages API as a ``Model``.

Contract of ``AnthropicModel.ask``: one HTTP request per call, never a hidden retry (the SDK is
built with ``max_retries=0`` because the harness commits every attempt and its backoff itself).
It returns a ``ModelReply`` only for a complete response: ``stop_reason == "tool_use"`` and
exactly one ``tool_use`` block named ``step`` whose input holds ``patch`` as a list of objects.
Anything else raises ``ModelError(transient=True)`` and nothing of it is applied. Transport
failures raise ``ModelError`` too: retryable for timeouts, lost connections, 408/409/429/5xx
(``retry_after`` from the provider's header when given); not retryable for other 4xx.

``raw`` (what the harness commits) holds only the response id, model, stop reason, tool input
and usage: never the API key, headers or the request.
"""

from __future__ import annotations

import email.utils
import json
import os
import time
from functools import cache
from importlib import resources
from typing import Any

import anthropic
from anthropic.types import (
    Message,
    MessageParam,
    TextBlockParam,
    ToolChoiceToolParam,
    ToolParam,
)

from rio_ci.errors import ModelError
from rio_ci.model.base import ModelReply, ModelRequest, Price, Usage

__all__ = ["PRICES", "STEP_TOOL", "AnthropicModel", "price_for", "system_prompt"]

# USD per million (input, output) tokens, keyed by model-name prefix; the longest matching
# prefix wins, so "claude-opus-4-5" overrides "claude-opus-4". This is a snapshot of Anthropic's
# published list prices and will go stale: a model missing here has an unknown cost (None),
# which budgets treat as unknown, never as free.
PRICES: dict[str, tuple[float, float]] = {
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-haiku-4": (1.0, 5.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-3-5-sonnet": (3.0, 15.0),
    "claude-3-5-haiku": (0.8, 4.0),
    "claude-3-opus": (15.0, 75.0),
    "claude-3-haiku": (0.25, 1.25),
}

# Prompt-cache tokens are billed relative to the input price (5-minute cache writes, reads).
_CACHE_WRITE_FACTOR = 1.25
_CACHE_READ_FACTOR = 0.1

STEP_TOOL: ToolParam = {
    "name": "step",
    "description": (
        "Submit this Turn's decision: an RFC 6902 JSON Patch on the State. The first operation "
        'must be {"op": "test", "path": "/revision", "value": <revision shown>}.'
    ),
    "input_schema": {
        "type": "object",
        "properties": {"patch": {"type": "array", "items": {"type": "object"}}},
        "required": ["patch"],
    },
}
_FORCE_STEP: ToolChoiceToolParam = {"type": "tool", "name": "step"}

# Status codes where another attempt may succeed (the same set the SDK itself would retry).
_RETRYABLE_STATUS = frozenset({408, 409, 429})


def price_for(model: str) -> tuple[float, float] | None:
    """USD per million (input, output) tokens for ``model``, or None when it is not in the
    table. The longest matching prefix of ``PRICES`` wins."""
    matches = [prefix for prefix in PRICES if model.startswith(prefix)]
    if not matches:
        return None
    return PRICES[max(matches, key=len)]


@cache
def system_prompt() -> str:
    """The system prompt shipped as package data (``rio_ci/model/prompt.md``)."""
    return resources.files("rio_ci.model").joinpath("prompt.md").read_text(encoding="utf-8")


class AnthropicModel:
    """A ``Model`` backed by the Messages API. ``name`` is ``anthropic:<model>``.

    The key comes from ``api_key`` or ``ANTHROPIC_API_KEY``; the endpoint from ``base_url`` or
    ``ANTHROPIC_BASE_URL`` (else the SDK default). A missing key raises a non-retryable
    ``ModelError`` here, before any Turn is attempted.
    """

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = 4096,
        timeout: float = 120.0,
    ) -> None:
        self.name = f"anthropic:{model}"
        self.model = model
        self.max_tokens = max_tokens
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise ModelError(
                "no Anthropic API key: set ANTHROPIC_API_KEY or pass api_key", transient=False
            )
        endpoint = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        self._client = anthropic.Anthropic(
            api_key=key, base_url=endpoint, max_retries=0, timeout=timeout
        )

    def price(self) -> Price | None:
        found = price_for(self.model)
        if found is None:
            return None
        per_in, per_out = found
        return Price(per_in, per_out, per_in * _CACHE_WRITE_FACTOR, per_in * _CACHE_READ_FACTOR)

    def ask(self, request: ModelRequest) -> ModelReply:
        """Send one request for ``request``'s Turn; see the module docstring for the contract."""
        try:
            message = self._client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=_system_blocks(),
                messages=[_user_message(request)],
                tools=[STEP_TOOL],
                tool_choice=_FORCE_STEP,
            )
        except anthropic.APIStatusError as exc:
            status = exc.status_code
            retryable = status in _RETRYABLE_STATUS or status >= 500
            raise ModelError(
                f"anthropic HTTP {status}: {_error_message(exc)}",
                transient=retryable,
                retry_after=_retry_after(exc.response.headers) if retryable else None,
            ) from exc
        except anthropic.APITimeoutError as exc:
            raise ModelError("anthropic request timed out", transient=True) from exc
        except anthropic.APIConnectionError as exc:
            raise ModelError(f"anthropic connection failed: {exc}", transient=True) from exc
        except anthropic.APIResponseValidationError as exc:
            raise ModelError(f"malformed anthropic response: {exc}", transient=True) from exc
        return self._reply(message)

    def _reply(self, message: Message) -> ModelReply:
        usage, usage_raw = self._usage(message)
        patch = _step_patch(message)
        raw: dict[str, Any] = {
            "id": message.id,
            "model": message.model,
            "stop_reason": message.stop_reason,
            "tool_input": {"patch": patch},
            "usage": usage_raw,
        }
        return ModelReply(patch=patch, usage=usage, raw=raw)

    def _usage(self, message: Message) -> tuple[Usage, dict[str, Any]]:
        """Token counts and cost. ``input_tokens`` includes cache writes and reads, so token
        budgets see everything the provider processed."""
        u = message.usage
        fresh, output = u.input_tokens, u.output_tokens
        written = u.cache_creation_input_tokens or 0
        read = u.cache_read_input_tokens or 0
        cost: float | None = None
        price = price_for(self.model)
        if price is not None:
            per_in, per_out = price
            billed_in = fresh + written * _CACHE_WRITE_FACTOR + read * _CACHE_READ_FACTOR
            cost = (billed_in * per_in + output * per_out) / 1_000_000
        usage = Usage(input_tokens=fresh, output_tokens=output, cache_write_tokens=written,
                      cache_read_tokens=read, cost_usd=cost)
        raw = {
            "input_tokens": fresh,
            "output_tokens": output,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "cost_usd": cost,
        }
        return usage, raw


def _system_blocks() -> list[TextBlockParam]:
    # The prompt is identical for every request, so marking it cacheable lets long Sessions pay
    # the cache-read price for it (and for the tool definition before it).
    return [{"type": "text", "text": system_prompt(), "cache_control": {"type": "ephemeral"}}]


def _user_message(request: ModelRequest) -> MessageParam:
    """The Turn as one user message: a short header, the State as JSON, and the reason the
    previous patch for this Turn was rejected, if it was."""
    lines = [f"Turn {request.turn_id} (round {request.round_index})."]
    if request.delivered_refs:
        lines.append("Delivered observations: " + ", ".join(request.delivered_refs))
    if request.feedback:
        lines.append(f"Your previous patch for this Turn was rejected: {request.feedback}")
    state = json.dumps(request.state, ensure_ascii=False, separators=(",", ":"))
    lines.append(f"State:\n{state}")
    return {"role": "user", "content": "\n".join(lines)}


def _step_patch(message: Message) -> list[Any]:
    """The ``patch`` of the single ``step`` call, or ModelError: a truncated or malformed
    response is never applied."""
    if message.stop_reason != "tool_use":
        raise ModelError(
            f"malformed reply: stop_reason {message.stop_reason!r}, expected 'tool_use'",
            transient=True,
        )
    calls = [block for block in message.content if block.type == "tool_use"]
    if len(calls) != 1:
        raise ModelError(f"malformed reply: {len(calls)} tool calls, expected 1", transient=True)
    call = calls[0]
    if call.name != "step":
        raise ModelError(f"malformed reply: unknown tool {call.name!r}", transient=True)
    tool_input: object = call.input
    patch = tool_input.get("patch") if isinstance(tool_input, dict) else None
    if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
        raise ModelError(
            "malformed reply: step input must be {\"patch\": [operation objects]}", transient=True
        )
    return patch


def _error_message(exc: anthropic.APIStatusError) -> str:
    """The provider's own error message when the body has the documented shape."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return f"{error.get('type', 'error')}: {error['message']}"
    return exc.message


def _retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
