"""Text shown to people: clipped, and with terminal control sequences made visible.

Output of a Cell is untrusted: printed raw, an escape sequence could clear a terminal, move
the cursor or fake a status line. ``escape_control`` keeps newlines and tabs and spells every
other control character (C0, DEL, C1) as a visible escape such as ``\\x1b``.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_control(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def clip(text: str, size: int) -> str:
    """``text`` cut to ``size`` characters, with an ellipsis when cut."""
    return text if len(text) <= size else text[: size - 1] + "…"
