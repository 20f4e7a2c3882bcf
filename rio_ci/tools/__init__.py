"""Tools for reading and changing a repository precisely, inside Cells.

In a ``code`` Cell: ``from rio_ci.tools import view, replace, insert, create, find, grep,
apply_diff``; in a ``cmd`` Cell: ``python -m rio_ci.tools COMMAND …`` (see ``__main__``).
Each function returns the report the command prints; a failure raises ``ToolError`` (a
ValueError) with the message the command prints after ``error:``. Paths are relative to the
current directory, the Session's working directory.

Standard library only, and importable without the rest of rio_ci: a Cell sees only the
copy of ``rio_ci.api`` and this package that the Owner puts on its PYTHONPATH. Python 3.8 or
later, since a cmd Cell's ``python`` may be older than rio_ci's (no runtime generics, no
``str.removesuffix``, no ``match``).
"""

from __future__ import annotations

from rio_ci.tools.files import ToolError, create, insert, replace, view
from rio_ci.tools.patch import apply_diff
from rio_ci.tools.search import find, grep

__all__ = ["ToolError", "apply_diff", "create", "find", "grep", "insert", "replace", "view"]
