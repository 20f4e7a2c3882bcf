"""What may enter the Inbox from outside, and what may be set as a Timer: the rules for an
outside message's id, kind and payload and for a Timer's id, deadline and payload (their sizes
aside, which the Session checks against the limits). Ids and kinds the harness writes itself
are reserved: an outside message must not pass for one of its own.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rio_ci.core.json_value import NOT_FINITE, NOT_TEXT, is_finite_json, is_text_safe

LAST_UNIX_TIME = 253_402_300_799  # 9999-12-31T23:59:59Z: every clock and formatter takes it

RESERVED_PREFIXES = ("execution:", "control:", "timer:", "idle:")

# Kinds only the harness writes: an outside message must not pass for one of its own.
HARNESS_KINDS = frozenset({"execution", "timer", "control_rejected", "invalid_idle"})

_KIND = re.compile(r"^[a-z][a-z0-9_.-]{0,63}\Z")


def message_problem(message_id: Any, kind: Any, payload: Any) -> str | None:
    """Why an outside message may not enter the Inbox (its size aside), or None."""
    if not isinstance(message_id, str) or not message_id.strip() or len(message_id) > 200:
        return "a message id must be a non-empty string of at most 200 characters"
    if message_id.startswith(RESERVED_PREFIXES):
        return f"message ids starting {message_id.split(':')[0]}: are reserved for the harness"
    if not isinstance(kind, str) or not _KIND.match(kind):
        return "a message kind must be a lowercase word (a-z, 0-9, _ . -)"
    if kind in HARNESS_KINDS:
        return f"message kind {kind} is reserved for the harness"
    return _carried_problem(message_id, payload)


def timer_problem(timer_id: Any, deadline: Any, payload: Any) -> str | None:
    """Why a Timer may not be set (its payload's size aside), or None."""
    if not isinstance(timer_id, str) or not timer_id.strip() or len(timer_id) > 200:
        return "a Timer id must be a non-empty string of at most 200 characters"
    if (
        isinstance(deadline, bool)
        or not isinstance(deadline, int | float)
        or not math.isfinite(deadline)
        or not 0 <= deadline <= LAST_UNIX_TIME
    ):
        return (
            "a Timer deadline must be a Unix time in seconds, from 0 to "
            f"{LAST_UNIX_TIME} (9999-12-31)"
        )
    return _carried_problem(timer_id, payload)


def _carried_problem(identifier: str, payload: Any) -> str | None:
    """Why a message's or a Timer's id and payload cannot be stored as they are, or None."""
    if not is_text_safe([identifier, payload]):
        return NOT_TEXT
    if not is_finite_json(payload):
        return NOT_FINITE
    return None
