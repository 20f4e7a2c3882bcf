"""The ``step`` tool, provider-neutral: its schema as plain JSON Schema, when a schema can be
strict, and what makes a call's input a patch.

The schema says what a patch is (docs/models.md): an array of operations, each with ``op`` one
of ``PATCH_OPS`` (exactly what admission accepts), a string ``path`` and any ``value``.
``strict_obstacle`` says why a schema cannot go under strict (grammar-constrained) tool use,
where every object must be closed; ``step``'s open ``value`` is such a reason. A reply that is
not exactly one well-formed ``step`` call is invalid, with a reason phrased for the model,
which is told on its next attempt; how a provider's reply names its calls and why it stopped
is the provider's (rio_ci/model/claude/tool.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rio_ci.core.admission import OPS

__all__ = [
    "PATCH_OPS",
    "STEP_DESCRIPTION",
    "STEP_NAME",
    "STEP_SCHEMA",
    "calls_problem",
    "ops_problem",
    "patch_of",
    "strict_obstacle",
]

# The operations admission accepts: a patch is a list of these.
PATCH_OPS = OPS

STEP_NAME = "step"
STEP_DESCRIPTION = (
    "Submit this Turn's decision: an RFC 6902 JSON Patch on the State. The first operation "
    'must be {"op": "test", "path": "/revision", "value": <revision shown>}. Give each code '
    'and cmd Cell a "description": a few words saying what it is for.'
)
STEP_SCHEMA: dict[str, Any] = {
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


def calls_problem(names: Sequence[str], stop: str | None) -> str | None:
    """Why a reply calling the tools ``names`` (in order) is not one ``step`` call, phrased
    for the model; None when it is. ``stop`` is why the reply ended, as the provider says."""
    if not names:
        return (
            f"no step call (stop reason {stop}). Text alone does nothing: call the step "
            'tool exactly once with {"patch": [...]}.'
        )
    if len(names) > 1:
        return (
            f"{len(names)} tool calls in one reply. Call step exactly once; put every "
            "operation in that one patch."
        )
    if names[0] != STEP_NAME:
        return f"unknown tool {names[0]!r}. The only tool is step."
    return None


def patch_of(tool_input: Any) -> tuple[list[Any] | None, str | None]:
    """The patch in a ``step`` call's input, or why the input holds none (phrased for the
    model): it must be ``{"patch": [objects]}``."""
    patch = tool_input.get("patch") if isinstance(tool_input, dict) else None
    if not isinstance(patch, list) or not all(isinstance(op, dict) for op in patch):
        return None, (
            'malformed step input: it must be {"patch": [operation objects]}, a '
            "list of RFC 6902 operations, each a JSON object."
        )
    return patch, None


def ops_problem(patch: list[Any]) -> str | None:
    """Why an operation of ``patch`` is not one admission reads (phrased for the model)."""
    for number, op in enumerate(patch):
        if op.get("op") not in PATCH_OPS or not isinstance(op.get("path"), str):
            return (
                f"malformed step input: operation {number} must have an op of "
                f"{', '.join(PATCH_OPS)} and a string path; got op {op.get('op')!r}, "
                f"path {op.get('path')!r}."
            )
    return None
