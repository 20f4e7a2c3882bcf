"""The default allowlist (``default_allow.txt`` beside this module; docs/network.md).

The file holds one pattern a line; the comment lines right above a pattern give the reason it
is there, and a pattern without one is an error, so every entry stays explained.
"""

from __future__ import annotations

import functools
from importlib import resources

from rio_ci.egress.policy import Pattern, parse

FILE = "default_allow.txt"


@functools.cache
def entries() -> tuple[tuple[Pattern, str], ...]:
    """Every default pattern with its reason, in the file's order."""
    text = resources.files(__package__).joinpath(FILE).read_text(encoding="utf-8")
    return read(text)


def patterns() -> tuple[Pattern, ...]:
    """The default patterns, in the file's order."""
    return tuple(pattern for pattern, _ in entries())


def read(text: str) -> tuple[tuple[Pattern, str], ...]:
    """``(pattern, reason)`` for every pattern line of ``text``; ValueError for a pattern with
    no comment above it (a blank line ends a comment)."""
    found: list[tuple[Pattern, str]] = []
    reason: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("#"):
            reason.append(line.removeprefix("#").strip())
        elif not line:
            reason = []
        elif not reason:
            raise ValueError(f"{FILE} line {number}: {line} has no reason above it")
        else:
            found.append((parse(line), " ".join(reason)))
            reason = []
    return tuple(found)
