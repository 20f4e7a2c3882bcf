"""The State a Turn shows (``rio.state/1``), rendered from the fold's projection."""

from __future__ import annotations

from typing import Any

from rio_ci.core.reducer import Projection
from rio_ci.core.state import SCHEMA, is_unresolved


def render(proj: Projection, inbox: list[dict[str, Any]]) -> dict[str, Any]:
    """The State a Turn shows: heads, runtime facts, and the given Inbox messages."""
    return {
        "schema": SCHEMA,
        "id": proj.session["id"],
        "revision": proj.revision,
        "goal": proj.session["goal"],
        "cells": [dict(c) for c in proj.cells],
        "runtime": {
            "next_cell_id": proj.next_cell_id,
            "cells": runtime_cells(proj, [c["id"] for c in proj.cells]),
            "inbox": [dict(m) for m in inbox],
            "usage": dict(proj.usage),
            "pause": proj.pause,
        },
    }


def runtime_cells(proj: Projection, head_ids: list[int]) -> dict[str, Any]:
    """Execution facts the model may see: heads with an Execution, every unfinished
    Execution, every unresolved UnknownExecution (SPEC §2)."""
    heads = set(head_ids)
    shown: dict[str, Any] = {}
    for key, ex in sorted(proj.executions.items(), key=lambda kv: int(kv[0])):
        if int(key) in heads or ex["phase"] != "finished" or is_unresolved(ex):
            shown[key] = {
                "phase": ex["phase"],
                "result": ex["result"],
                "stdout": ex["stdout"],
                "stderr": ex["stderr"],
                "truncated": bool(ex["stdout_truncated"] or ex["stderr_truncated"]),
                "resolved_by": ex["resolved_by"],
            }
    return shown
