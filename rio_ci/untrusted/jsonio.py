"""Strict JSON in and out (RFC 8259): what a user hands in, and what rio-ci prints.

Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity`` and turns ``1e400`` into
``inf``; none of them is JSON, and ``NaN`` is not even equal to itself, so a message holding
one could never be received twice. ``loads`` refuses them all, with a reason a person can act
on; ``dumps`` never writes them. ``printable`` keeps stdout valid UTF-8 when a message has to
name a path or argument that is not (Linux allows any bytes in a file name).
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from rio_ci.core.json_value import is_text_safe

MAX_DEPTH = 100  # far beyond any patch or payload; keeps re-encoding off the stack limit
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class NotJSON(ValueError):
    """The text is not strict JSON; the message says why (and where, when known)."""


def _constant(name: str) -> Any:
    raise NotJSON(f"{name} is not a JSON number")


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJSON(f"{text} is too large for a JSON number (it would become {value})")
    return value


def strict_decoder(*, overflow: bool = False) -> json.JSONDecoder:
    """A decoder that refuses ``NaN``, ``Infinity`` and ``-Infinity`` (``NotJSON``) and, unless
    ``overflow``, a number too large for a float (with ``overflow`` it is read as infinity,
    as Python's ``json`` does). It bounds no depth: ``loads`` does, a caller of ``decode`` may
    not (the Journal's rows are written by rio-ci itself and may be deeper)."""
    return json.JSONDecoder(parse_constant=_constant, parse_float=None if overflow else _number)


_DECODER = strict_decoder()


def loads(text: str | bytes, what: str = "input") -> Any:
    """Parse ``text`` as strict JSON or raise ``NotJSON`` naming ``what``.

    Refused: syntax errors, bytes that are not UTF-8, ``NaN``/``Infinity``, numbers too large
    for a float, integers with more digits than Python converts (4,300), nesting deeper than
    ``MAX_DEPTH``."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        value = _DECODER.decode(text)
    except UnicodeDecodeError as exc:
        raise NotJSON(f"{what} is not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise NotJSON(
            f"{what} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except RecursionError:
        raise NotJSON(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # NotJSON from a hook, or an integer of too many digits
        raise NotJSON(f"{what} is not valid JSON: {exc}") from None
    if not depth_at_most(value, MAX_DEPTH):
        raise NotJSON(f"{what} is nested more than {MAX_DEPTH} levels deep")
    return value


def depth_at_most(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)
    return True


def dumps(value: Any, **options: Any) -> str:
    """Strict JSON text (raises ValueError on a non-finite number), UTF-8 as is."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False, **options)


def finite_copy(value: Any) -> Any:
    """``value`` with every non-finite float replaced by its spelling (``"inf"``, ``"nan"``):
    what strict JSON can carry of a value parsed by a lenient parser (Python's reads
    ``Infinity``, ``NaN`` and ``1e999``)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {key: finite_copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_copy(item) for item in value]
    return value


def printable(text: str) -> str:
    """``text`` with every lone surrogate spelled out: ``\\xff`` for a byte of a file name
    that is not UTF-8 (Python decodes it as U+DCFF), ``\\ud800`` for any other. The result
    encodes as UTF-8, so a message naming such a path never breaks stdout."""

    def spell(match: re.Match[str]) -> str:
        code = ord(match.group())
        return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"

    return _SURROGATE.sub(spell, text)


def printable_value(value: Any) -> Any:
    """``value`` with ``printable`` applied to every string in it (keys too)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_value(k): printable_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable_value(v) for v in value]
    return value


def emit(value: Any) -> bool:
    """Print ``value`` as one line of strict JSON on stdout; False (nothing printed) when it
    holds NaN or Infinity."""
    try:
        text = dumps(value)
    except ValueError:
        return False
    if not is_text_safe(text):  # a path or argument that is not UTF-8
        text = dumps(printable_value(value))
    write_stdout(text + "\n")
    return True


def write_stdout(text: str) -> None:
    """``text`` on stdout as UTF-8 whatever the locale, lone surrogates spelled out."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a text stream without bytes (tests capture into StringIO)
        sys.stdout.write(printable(text))
    else:
        sys.stdout.flush()
        buffer.write(printable(text).encode("utf-8"))
    sys.stdout.flush()
