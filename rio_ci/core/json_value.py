"""JSON values as rio-ci stores, budgets and compares them: one compact encoder (every stored
event and every context budget is measured in its bytes), RFC 6902 equality, and the
predicates that keep what is stored strict JSON and text (no NaN or Infinity, no lone
surrogate), with the parsers of whole numbers that never take digits on trust.
"""

from __future__ import annotations

import json
from typing import Any, TypeGuard

MAX_SEQ = 2**63 - 1  # SQLite's largest integer: no seq or id can be larger


def ascii_int(text: str, digits: int = 18) -> int | None:
    """``text`` as a whole number if it is at most ``digits`` ASCII digits, else None:
    ``"²".isdigit()`` is true and ``int("²")`` fails, so digits are never taken on trust."""
    if text.isascii() and text.isdigit() and len(text) <= digits:
        return int(text)
    return None


def is_int(value: Any) -> TypeGuard[int]:
    """An integer that is not a bool (JSON has no such thing as ``true == 1``)."""
    return isinstance(value, int) and not isinstance(value, bool)


def json_equal(a: Any, b: Any) -> bool:
    """RFC 6902 equality: types matter (true is not 1), numbers compare by value."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


# Compact UTF-8 JSON, the encoding of every stored event and of every budget; one encoder
# made once (json.dumps with options builds a new one at every call).
# Strict: ValueError on NaN or Infinity, so nothing non-standard is ever stored or printed.
compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode

# For fingerprinting input that may still hold NaN (it is then rejected, never stored).
lenient = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def is_text_safe(value: Any) -> bool:
    """False when a string in ``value`` holds a lone surrogate: JSON can spell one
    (``"\\ud800"``) but UTF-8, SQLite and the model cannot carry it."""
    try:
        (value if isinstance(value, str) else lenient(value)).encode()
    except UnicodeEncodeError:
        return False
    return True


NOT_TEXT = "a string holds a lone surrogate (\\ud800-\\udfff), which is not text"

NOT_FINITE = "a number is NaN or Infinity, which is not JSON"


def is_finite_json(value: Any) -> bool:
    """False when ``value`` holds NaN or an infinity (JSON has neither; NaN is not even
    equal to itself, so an idempotent re-send could never match)."""
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


def encoded_size(value: Any) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON: the unit of every context budget."""
    return len(lenient(value).encode())
