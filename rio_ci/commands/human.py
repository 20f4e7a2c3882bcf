"""``--human``: the flag every command takes (docs/cli.md), and a command's JSON result as
readable, indented lines.

One generic rendering for every command that has no text form of its own. It shows the
same value the JSON line holds, deterministically (keys in the result's own order):

    key: value                 a scalar; strings unquoted, null/true/false as in JSON
    key:                       a non-empty object or list, its entries indented by two
      - first item             a list item; an object in a list starts on the dash line
    key: |                     a string with line breaks, its lines indented by four
        line one

Everything is text a Cell, a model or a user may have written, so terminal control
characters are printed escaped (``\\x1b``), as ``rio-ci show`` does.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rio_ci.core.text import escape_control

INDENT = 2
HUMAN_HELP = {
    "output": "print the text itself, not JSON",
    "show": "readable text (the default)",
    "demo": "only the story, no JSON",
    "bench": "print the table (the default)",
    "eval": "print the Markdown report (the default)",
}
JSON_HELP = {
    "show": "print the summary as JSON",
    "bench": "print one JSON object",
    "eval": "print JSON (default: the Markdown report)",
}


def add_output_flags(parsers: dict[str, argparse.ArgumentParser]) -> None:
    """Give every command ``--human``; those whose default is already text (``show``,
    ``bench``, ``eval``) also get ``--json``, and the two exclude each other."""
    for name, parser in parsers.items():
        group = parser.add_mutually_exclusive_group()
        group.add_argument(
            "--human",
            action="store_true",
            help=HUMAN_HELP.get(
                name, "print the result as readable lines, not JSON (errors stay JSON)"
            ),
        )
        if name in JSON_HELP:
            group.add_argument("--json", action="store_true", help=JSON_HELP[name])


def render(value: Any) -> str:
    """``value`` (anything JSON can hold) as lines without a final newline."""
    return "\n".join(_lines(value, 0))


def _lines(value: Any, indent: int) -> list[str]:
    pad = " " * indent
    if isinstance(value, dict) and value:
        return [
            line
            for key, item in value.items()
            for line in _entry(f"{pad}{escape_control(str(key))}:", item, indent)
        ]
    if isinstance(value, list | tuple) and value:
        return [line for item in value for line in _item(item, indent)]
    if isinstance(value, str) and "\n" in value:
        return [pad + "|", *_block(value, indent + 2 * INDENT)]
    return [pad + _scalar(value)]


def _entry(head: str, item: Any, indent: int) -> list[str]:
    if isinstance(item, dict | list | tuple) and item:
        return [head, *_lines(item, indent + INDENT)]
    if isinstance(item, str) and "\n" in item:
        return [head + " |", *_block(item, indent + 2 * INDENT)]
    return [f"{head} {_scalar(item)}"]


def _item(item: Any, indent: int) -> list[str]:
    """One list item: ``- scalar``, or a container whose first line shares the dash."""
    pad = " " * indent
    if isinstance(item, dict | list | tuple) and item:
        inner = _lines(item, indent + INDENT)
        return [f"{pad}- {inner[0][indent + INDENT :]}", *inner[1:]]
    return _entry(f"{pad}-", item, indent)


def _block(text: str, indent: int) -> list[str]:
    lines = escape_control(text).split("\n")
    if lines[-1] == "":  # the line break that ends the text starts no line of its own
        lines.pop()
    return [" " * indent + line if line else "" for line in lines]


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return escape_control(value) if value else '""'
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list | tuple):
        return "[]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return escape_control(str(value))
