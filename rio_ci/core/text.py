"""Text shown to people: clipped, and with terminal control sequences made visible.

Output of a Cell is untrusted: printed raw, an escape sequence could clear a terminal, move
the cursor or fake a status line; a bidirectional control (U+202A to U+202E, U+2066 to U+2069,
U+200E, U+200F, U+061C) reorders what a reader sees, so a line can look like it says the
opposite of what it holds. ``escape_control`` keeps newlines and tabs and spells every other
control character (C0, DEL, C1) and every bidi control as a visible escape such as ``\\x1b``
or ``\\u202e``.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _spelled(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_control(text: str) -> str:
    return _CONTROL.sub(_spelled, text)


def clip(text: str, size: int) -> str:
    """``text`` cut to ``size`` characters, with an ellipsis when cut."""
    return text if len(text) <= size else text[: size - 1] + "…"
