"""The ``step`` tool as the Messages API takes it, and reading a Claude reply's call.

The schema is the neutral one (rio_ci/model/step_tool.py). ``tool_for`` adds ``strict: true``
where the model offers strict tool use and the schema can be strict. ``step_patch`` reads a
``Message``: Claude's stop reasons first (a refusal, ``max_tokens``, a full context window),
then the neutral rules for the call and its input.
"""

from __future__ import annotations

from typing import Any

from anthropic.types import Message, ToolParam

from rio_ci.model.claude import table
from rio_ci.model.step_tool import (
    STEP_DESCRIPTION,
    STEP_NAME,
    STEP_SCHEMA,
    calls_problem,
    ops_problem,
    patch_of,
    strict_obstacle,
)

__all__ = ["STEP_TOOL", "step_patch", "tool_for"]

STEP_TOOL: ToolParam = {
    "name": STEP_NAME,
    "description": STEP_DESCRIPTION,
    "input_schema": STEP_SCHEMA,
}


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
    reason = _stopped(message, max_tokens) or calls_problem(
        [call.name for call in calls], message.stop_reason
    )
    if reason is not None:
        return None, reason
    patch, reason = patch_of(calls[0].input)
    if patch is None:
        return None, reason
    if message.stop_reason != "tool_use":
        return None, f"the reply stopped with {message.stop_reason!r}, not a complete step call."
    reason = ops_problem(patch)
    return (None, reason) if reason is not None else (patch, None)


def _stopped(message: Message, max_tokens: int) -> str | None:
    """Why the reply cannot hold a usable call, from Claude's stop reason alone."""
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
    return None
