"""The repository's guidance for agents (``AGENTS.md`` and its kin), read from the working
tree for every request (docs/tools.md, "Files the harness reads")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rio_ci.untrusted.treefile import read_tree_file

__all__ = ["GUIDANCE_BYTES", "GUIDANCE_FILES", "read_guidance"]

GUIDANCE_FILES = ("AGENTS.md", "CLAUDE.md", ".github/copilot-instructions.md")
GUIDANCE_BYTES = 16_000


def read_guidance(cwd: Path, warn: Callable[[str], None] | None = None) -> str | None:
    """The repository's guidance for agents (the first of ``GUIDANCE_FILES`` found), clipped
    at ``GUIDANCE_BYTES``, or None. Only a regular file inside ``cwd`` counts, and at most
    ``GUIDANCE_BYTES + 1`` bytes of it are read (rio_ci.untrusted.treefile); one that links out of
    the tree, a FIFO or a device is skipped and ``warn`` told why."""
    for name in GUIDANCE_FILES:
        found = read_tree_file(cwd, name, GUIDANCE_BYTES)
        if found.skipped is not None and warn is not None:
            warn(f"{found.skipped}; it is not shown to the model")
        if found.data is None:
            continue
        text = found.data[:GUIDANCE_BYTES].decode("utf-8", "ignore")
        more = found.size - GUIDANCE_BYTES
        return f"{name}:\n{text}" + (f"\n[… {more} more bytes not shown]" if more > 0 else "")
    return None
