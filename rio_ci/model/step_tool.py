"""The ``step`` tool: its schema, when it can be strict, and reading a reply's call.

The schema says what a patch is (docs/models.md): an array of operations, each with ``op`` one
of ``PATCH_OPS`` (exactly what admission accepts), a string ``path`` and any ``value``.
``strict_obstacle`` says why a schema cannot go under strict tool use (every object must be
closed); ``step``'s open ``value`` is such a reason, so ``tool_for`` sends it without ``strict``.
A reply that is not exactly one well-formed ``step`` call is invalid, with a reason phrased
for the model, which is told on its next attempt.
"""

from __future__ import annotations

from typing import Any

from anthropic.types import Message, ToolParam

from rio_ci.core.admission import OPS
from rio_ci.model import table

__all__ = ["PATCH_OPS", "STEP_TOOL", "step_patch", "strict_obstacle", "tool_for"]

# The operations admission accepts: a patch is a list of these.
PATCH_OPS = OPS

STEP_TOOL: ToolParam = {
    "name": "step",
    "description": (
        "Submit this Turn's decision: an RFC 6902 JSON Patch on the State. The first operation "
        'must be {"op": "test", "path": "/revision", "value": <revision shown>}.'
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "patch": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "op": {"type": "string", "enum": list(PATCH_OPS)},
                        "path": {"type": "string"},
                        # any JSON value: a Cell, the revision, a field's new value
                        "value": {},
                    },
                    "required": ["op", "path"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["patch"],
        "additionalProperties": False,
    },
}


def strict_obstacle(schema: Any, where: str = "input_schema") -> str | None:
    """Why ``schema`` cannot be sent under strict tool use, or None when it can.

    Strict tool use compiles the schema into a grammar and needs every object closed
    (``additionalProperties: false``, docs/models.md); a value left open (``{}``: any JSON,
    objects with any keys included) cannot be closed. ``step``'s ``value`` is such a value
    (a Cell's keys depend on its kind), so ``step`` is sent without ``strict``."""
    if not isinstance(schema, dict):
        return f"{where} is not a schema"
    if not ({"type", "enum", "const", "anyOf"} & set(schema)):
        return f"{where} is an open value (any JSON)"
    if schema.get("type") == "object" and schema.get("additionalProperties") is not False:
        return f"{where} is an object without additionalProperties: false"
    for name, sub in (schema.get("properties") or {}).items():
        if (reason := strict_obstacle(sub, f"{where}.{name}")) is not None:
            return reason
    if "items" in schema:
        return strict_obstacle(schema["items"], f"{where}[]")
    return None


def tool_for(info: table.ModelInfo, tool: ToolParam) -> ToolParam:
    """``tool`` as sent to the model of ``info``: with ``strict: true`` where the model offers
    strict tool use and the schema can be strict; as given otherwise."""
    if info.features.strict_tools and strict_obstacle(tool["input_schema"]) is None:
        return {**tool, "strict": True}
    return tool


def step_patch(
    message: Message, calls: list[Any], max_tokens: int
) -> tuple[list[Any] | None, str | None]:
    """The single step call's patch, or why ``message`` cannot be admitted (phrased for the
    model, which is told on its next attempt)."""
    reason = _unusable(message, calls, max_tokens)
    if reason is not None:
        return None, reason
    tool_input = calls[0].input
    patch = tool_input.get("patch") if isinstance(tool_input, dict) else None
    if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
        return None, (
            'malformed step input: it must be {"patch": [operation objects]}, a '
            "list of RFC 6902 operations, each a JSON object."
        )
    if message.stop_reason != "tool_use":
        return None, f"the reply stopped with {message.stop_reason!r}, not a complete step call."
    for number, op in enumerate(patch):
        if op.get("op") not in PATCH_OPS or not isinstance(op.get("path"), str):
            return None, (
                f"malformed step input: operation {number} must have an op of "
                f"{', '.join(PATCH_OPS)} and a string path; got op {op.get('op')!r}, "
                f"path {op.get('path')!r}."
            )
    return patch, None


def _unusable(message: Message, calls: list[Any], max_tokens: int) -> str | None:
    stop = message.stop_reason
    if stop == "refusal":
        details = getattr(message, "stop_details", None)
        category = getattr(details, "category", None)
        return (
            f"the reply was a refusal{f' (category: {category})' if category else ''}. If "
            "the task is legitimate, take a different, clearly benign approach; otherwise "
            "conclude with result failure and say why."
        )
    if stop == "max_tokens":
        return (
            f"the reply was cut off at max_tokens ({max_tokens}) before a complete step "
            "call. Think less, write less, and send a smaller patch (one or two Cells)."
        )
    if stop == "model_context_window_exceeded":
        return (
            "the request filled the model's context window. Remove Cells you no longer need "
            "and keep outputs short."
        )
    if not calls:
        return (
            f"no step call (stop reason {stop}). Text alone does nothing: call the step "
            'tool exactly once with {"patch": [...]}.'
        )
    if len(calls) > 1:
        return (
            f"{len(calls)} tool calls in one reply. Call step exactly once; put every "
            "operation in that one patch."
        )
    if calls[0].name != "step":
        return f"unknown tool {calls[0].name!r}. The only tool is step."
    return None
