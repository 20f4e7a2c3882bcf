"""What the fake Messages API accepts, model by model, as the provider's docs describe it.

This is the fake's own knowledge, written apart from ``rio_ci/model/models.json`` on purpose:
a wrong entry in the product's table makes a request that this fake refuses, as the real API
would, instead of agreeing with itself. The rules (checked 2026-12-04, see docs/models.md):

- the current family (Sonnet 5.5, Opus 5.5, Haiku 5.5, Fable 5.1/5.2, Mythos 5.1/5.2) answers
  400 to a forced ``tool_choice`` (``any`` / ``tool``), to sampling parameters, to a thinking
  budget (``thinking.type: enabled``), to ``thinking.type: disabled`` (Haiku 5.5 excepted) and to
  an assistant prefill; thinking is adaptive and on by default, with display ``omitted``;
- effort levels differ: the 5.x family and Opus 4.7/4.8 take low…max; Opus 4.6 and Sonnet 4.6
  no ``xhigh``; Opus 4.5 only low, medium, high; Haiku 4.5 no effort at all (and no adaptive
  thinking: budgets only);
- an assistant prefill (a conversation ending with an assistant message) is a 400 from the 4.6
  models on (the migration guide): Opus 4.6, Sonnet 4.6 and every newer model; Haiku 4.5 and
  Opus 4.5 still take one;
- ``strict: true`` on a tool (strict tool use, every model here) needs every object of its
  schema closed with ``additionalProperties: false``, else a 400;
- an unknown or retired model id is a 404 ``not_found_error``;
- pictures (the vision page, the API overview's request size limits): an image whose base64
  data is over 5 MB (5,242,880 bytes, as the API's own message counts it) is a 400; more
  than 100 images in a request is a 400 ("Too much media"); a request body over 32 MB is a
  413 ``request_too_large`` (Cloudflare's, before any other check), read here as 32,000,000
  bytes, the lower reading.

Ids starting ``rio-test-`` behave like the current family, so tests can name a model the
product's table does not list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

ALL_EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})
IMAGE_BASE64_BYTES = 5 * 1024 * 1024
IMAGES_PER_REQUEST = 100
REQUEST_BYTES = 32_000_000
NO_XHIGH = frozenset({"low", "medium", "high", "max"})


@dataclass(frozen=True)
class Rules:
    max_output: int
    efforts: frozenset[str] | None  # None: the effort parameter is refused
    thinking: frozenset[str]  # accepted thinking.type values
    thinks_by_default: bool
    forced_tool_choice: bool  # accepted when thinking is off
    sampling: bool
    prefill: bool
    display_default: str
    strict_tools: bool = True  # structured outputs: every model from the 4.5 family on


_CURRENT = Rules(
    128_000, ALL_EFFORTS, frozenset({"adaptive"}), True, False, False, False, "omitted"
)
_5_0 = Rules(
    128_000, ALL_EFFORTS, frozenset({"adaptive", "disabled"}), True, True, False, False, "omitted"
)
_4_7 = Rules(
    128_000, ALL_EFFORTS, frozenset({"adaptive", "disabled"}), False, True, False, False, "omitted"
)
_4_6 = Rules(
    128_000,
    NO_XHIGH,
    frozenset({"adaptive", "enabled", "disabled"}),
    False,
    True,
    True,
    False,
    "summarized",
)
_BUDGET_ONLY = Rules(
    64_000, None, frozenset({"enabled", "disabled"}), False, True, True, True, "summarized"
)

MODELS: dict[str, Rules] = {
    "claude-sonnet-5-5": Rules(
        128_000,
        ALL_EFFORTS,
        frozenset({"adaptive", "between_tools"}),
        True,
        False,
        False,
        False,
        "omitted",
    ),
    "claude-opus-5-5": _CURRENT,
    "claude-haiku-5-5": Rules(
        128_000,
        ALL_EFFORTS,
        frozenset({"adaptive", "disabled"}),
        True,
        False,
        False,
        False,
        "omitted",
    ),
    "claude-fable-5-2": _CURRENT,
    "claude-mythos-5-2": _CURRENT,
    "claude-fable-5-1": _CURRENT,
    "claude-mythos-5-1": _CURRENT,
    "claude-fable-5": _CURRENT,
    "claude-mythos-5": _CURRENT,
    "claude-sonnet-5": Rules(
        128_000,
        ALL_EFFORTS,
        frozenset({"adaptive", "disabled"}),
        True,
        True,
        False,
        False,
        "omitted",
    ),
    "claude-opus-5": _5_0,
    "claude-opus-4-8": _4_7,
    "claude-opus-4-7": _4_7,
    "claude-opus-4-6": _4_6,
    "claude-sonnet-4-6": Rules(
        64_000,
        NO_XHIGH,
        frozenset({"adaptive", "enabled", "disabled"}),
        False,
        True,
        True,
        False,
        "summarized",
    ),
    "claude-haiku-4-5": _BUDGET_ONLY,
    "claude-haiku-4-5-20251001": _BUDGET_ONLY,
    "claude-opus-4-5": Rules(
        64_000,
        frozenset({"low", "medium", "high"}),
        frozenset({"enabled", "disabled"}),
        False,
        True,
        True,
        True,
        "summarized",
    ),
}
MODELS["claude-opus-4-5-20251101"] = MODELS["claude-opus-4-5"]

_TOP_LEVEL = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "stream",
        "metadata",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "service_tier",
        "inference_geo",
        "anthropic_version",
        "anthropic_beta",
    }
)
_PLATFORM = re.compile(
    r"^(?:(?:us|eu|apac|global)\.)?(?:anthropic\.)?(?P<id>[a-z0-9.-]+?)"
    r"(?:-v\d+(?::\d+)?)?$"
)


class Refused(Exception):
    """A request the API refuses: ``status`` with an error ``kind`` and message."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def rules_for(model: str) -> Rules:
    """The rules for ``model`` (a Claude API, Bedrock or Vertex id), else a 404."""
    match = _PLATFORM.match(model)
    plain = match.group("id") if match else model
    if plain.startswith("rio-test-"):
        return _CURRENT
    if plain in MODELS:
        return MODELS[plain]
    raise Refused(404, "not_found_error", f"model: {model}")


def thinking_active(body: dict[str, Any], rules: Rules) -> bool:
    thinking = body.get("thinking")
    if not isinstance(thinking, dict):
        return rules.thinks_by_default
    return thinking.get("type") in ("adaptive", "enabled")


def display(body: dict[str, Any], rules: Rules) -> str:
    thinking = body.get("thinking")
    chosen = thinking.get("display") if isinstance(thinking, dict) else None
    return str(chosen or rules.display_default)


def check(body: Any, model: str) -> Rules:
    """The rules for an acceptable request; ``Refused`` says why one is not acceptable."""
    if not isinstance(body, dict):
        raise _bad("request body must be a JSON object")
    unknown = sorted(set(body) - _TOP_LEVEL)
    if unknown:
        raise _bad(f"{unknown[0]}: Extra inputs are not permitted")
    rules = rules_for(model)
    _check_max_tokens(body, rules)
    _check_messages(body, rules)
    for name in ("temperature", "top_p", "top_k"):
        if body.get(name) is not None and not rules.sampling:
            raise _bad(f"`{name}` is not supported on {model}; remove it")
    _check_thinking(body, rules, model)
    _check_effort(body, rules, model)
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        if not rules.forced_tool_choice:
            raise _bad(
                f"tool_choice of type {choice['type']!r} is not supported on {model}; use auto"
            )
        if thinking_active(body, rules):
            raise _bad("Thinking may not be enabled when tool_choice forces tool use.")
    _check_tools(body.get("tools"), rules, model)
    if _count_cache_controls(body) > 4:
        raise _bad("A maximum of 4 blocks with cache_control may be provided.")
    return rules


def _check_max_tokens(body: dict[str, Any], rules: Rules) -> None:
    value = body.get("max_tokens")
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise _bad("max_tokens: Field required (a positive integer)")
    if value > rules.max_output:
        raise _bad(
            f"max_tokens: {value} > {rules.max_output}, which is the maximum allowed "
            "number of output tokens for this model"
        )


def _check_messages(body: dict[str, Any], rules: Rules) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages: at least one message is required")
    images = sum(
        1
        for message in messages
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "image"
    )
    if images > IMAGES_PER_REQUEST:
        raise _bad(f"Too much media: 0 document pages + {images} images > {IMAGES_PER_REQUEST}")
    for number, message in enumerate(messages):
        expected = "user" if number % 2 == 0 else "assistant"
        if not isinstance(message, dict) or message.get("role") != expected:
            raise _bad(f"messages.{number}.role: roles must alternate, starting with user")
        content = message.get("content")
        if not content or not isinstance(content, str | list):
            raise _bad(f"messages.{number}.content: must be non-empty")
        if isinstance(content, list):
            for index, block in enumerate(content):
                if isinstance(block, dict) and block.get("type") == "image":
                    _check_image(block, f"messages.{number}.content.{index}")
    if messages[-1]["role"] == "assistant" and not rules.prefill:
        raise _bad(
            "This model does not support assistant message prefill. The conversation "
            "must end with a user message."
        )


_IMAGE_TYPES = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}


def _check_image(block: dict[str, Any], where: str) -> None:
    """An image block (vision): a base64 source of a supported type whose bytes are that type."""
    import base64
    import binascii

    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") not in ("base64", "url", "file"):
        raise _bad(f"{where}.source: must be a base64, url or file source")
    if source["type"] != "base64":
        return
    kind = source.get("media_type")
    if kind not in _IMAGE_TYPES:
        raise _bad(
            f"{where}.source.media_type: Input should be 'image/jpeg', 'image/png', "
            "'image/gif' or 'image/webp'"
        )
    size = len(str(source.get("data") or ""))
    if size > IMAGE_BASE64_BYTES:
        raise _bad(
            f"{where}.image.source.base64: image exceeds 5 MB maximum: "
            f"{size} bytes > {IMAGE_BASE64_BYTES} bytes"
        )
    try:
        data = base64.b64decode(str(source.get("data") or ""), validate=True)
    except (binascii.Error, ValueError):
        raise _bad(f"{where}.source.data: invalid base64 data") from None
    if not data or not data.startswith(_IMAGE_TYPES[kind]):
        raise _bad(f"{where}: Image does not match the provided media type {kind}")


def _check_thinking(body: dict[str, Any], rules: Rules, model: str) -> None:
    thinking = body.get("thinking")
    if thinking is None:
        return
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind not in rules.thinking:
        raise _bad(
            f'thinking.type: "{kind}" is not supported for {model}; use '
            f"{' or '.join(sorted(rules.thinking))}"
        )
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024 or budget >= body["max_tokens"]:
            raise _bad("thinking.budget_tokens: must be >= 1024 and less than max_tokens")
    if thinking.get("display") not in (None, "summarized", "omitted"):
        raise _bad("thinking.display: must be summarized or omitted")


def _check_effort(body: dict[str, Any], rules: Rules, model: str) -> None:
    config = body.get("output_config")
    effort = config.get("effort") if isinstance(config, dict) else None
    if effort is None:
        return
    if rules.efforts is None:
        raise _bad(f"output_config.effort: effort is not supported for {model}")
    if effort not in rules.efforts:
        raise _bad(f"output_config.effort: {effort!r} is not supported for {model}")


def _check_tools(tools: Any, rules: Rules, model: str) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _bad("tools: must be a list")
    for number, tool in enumerate(tools):
        if not (
            isinstance(tool, dict)
            and isinstance(tool.get("name"), str)
            and isinstance(tool.get("input_schema"), dict)
        ):
            raise _bad("tools: each tool needs a name and an input_schema")
        if tool.get("strict") is True:
            if not rules.strict_tools:
                raise _bad(f"tools.{number}.strict: strict tool use is not supported on {model}")
            _check_strict_schema(tool["input_schema"], f"tools.{number}.custom")


def _check_strict_schema(schema: Any, where: str) -> None:
    """Strict tool use compiles the schema into a grammar: every object must be closed."""
    if not isinstance(schema, dict):
        return
    if schema.get("type") == "object" and schema.get("additionalProperties") is not False:
        raise _bad(
            f"{where}: For 'object' type, 'additionalProperties' must be explicitly set to false"
        )
    for sub in (schema.get("properties") or {}).values():
        _check_strict_schema(sub, where)
    if "items" in schema:
        _check_strict_schema(schema["items"], where)


def _count_cache_controls(value: Any) -> int:
    if isinstance(value, dict):
        own = 1 if value.get("cache_control") else 0
        return own + sum(_count_cache_controls(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return sum(_count_cache_controls(v) for v in value)
    return 0


def _bad(message: str) -> Refused:
    return Refused(400, "invalid_request_error", message)


# --- reading a request the way the product lays it out (rio_ci/model/claude/layout.py) -----

STABLE_HEADER = "STATE, stable part"
VOLATILE_HEADER = "STATE, part that changes every round"
_CELL = re.compile(r"^/cells/(\d+) (\{.*\})$")
_FACTS = re.compile(r'^runtime\.cells\["(\d+)"\] (\{.*\})$')
_FENCE = re.compile(r"^(`{3,})(stdout|stderr) of Cell (\d+)$")


def user_blocks(body: dict[str, Any]) -> list[str]:
    """The text of every block of the last user message."""
    content = body["messages"][-1]["content"]
    if isinstance(content, str):
        return [content]
    return [block["text"] for block in content if block.get("type") == "text"]


def state_from(body: dict[str, Any]) -> dict[str, Any]:
    """The State a request shows, rebuilt from its stable and volatile blocks."""
    import json

    state: dict[str, Any] = {}
    cells: list[Any] = []
    finished: dict[str, Any] = {}
    volatile: dict[str, Any] = {}
    for text in user_blocks(body):
        head, _, rest = text.partition("\n")
        if head == STABLE_HEADER:
            state.update(json.loads(rest))
        elif head == VOLATILE_HEADER:
            volatile = json.loads(rest)
        elif _CELL.match(head):
            lines = text.split("\n")
            cells.append(json.loads(_CELL.match(lines[0]).group(2)))  # type: ignore[union-attr]
            _read_facts(lines[1:], finished)
    runtime = dict(volatile.pop("runtime", {}))
    runtime["cells"] = {**finished, **runtime.get("cells", {})}
    return {**state, **volatile, "cells": cells, "runtime": runtime}


def _read_facts(lines: list[str], finished: dict[str, Any]) -> None:
    import json

    index = 0
    while index < len(lines):
        facts = _FACTS.match(lines[index])
        fence = _FENCE.match(lines[index])
        if facts:
            finished[facts.group(1)] = json.loads(facts.group(2))
            index += 1
        elif fence:
            end = lines.index(fence.group(1), index + 1)
            finished[fence.group(3)][fence.group(2)] = "\n".join(lines[index + 1 : end]) + "\n"
            index = end + 1
        else:
            raise ValueError(f"unexpected line in a Cell block: {lines[index]!r}")
