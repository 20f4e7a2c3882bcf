"""State (``rio.state/1``) and its Cells: their shape and validation.

A Cell is a plain JSON object. ``validate_cell`` says what is wrong with one, or returns
None. ``rio_ci.core.view`` builds the State a Turn shows from the fold's projection.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from rio_ci.core.json_value import is_int

SCHEMA = "rio.state/1"
ROLES = ("cancel", "resolution", "conclusion")
EXECUTABLE = ("code", "cmd")
EVIDENCE_REF = re.compile(r"^session:event:([1-9][0-9]*)\Z")

_FIELDS = {
    "note": {"text"},
    "code": {"runtime", "source"},
    "cmd": {"argv"},
}
_OPTIONAL = {
    "note": {"role", "target_cell_id", "evidence_refs", "result"},
    "code": {"description"},
    "cmd": {"description"},
}
DESCRIPTION_CHARS = 80  # a few words on one line: what an executable Cell is for
# PEP 723: a block opens with "# /// TYPE", holds "#" or "# ..." lines, closes with "# ///".
_PEP723 = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")


def validate_cell(cell: Any) -> str | None:
    """The reason ``cell`` is not a valid Cell, or None."""
    if not isinstance(cell, dict):
        return "a Cell must be a JSON object"
    kind = cell.get("kind")
    if not isinstance(kind, str) or kind not in _FIELDS:  # a list here is unhashable
        return f"Cell kind must be note, code or cmd, got {kind!r}"
    allowed = {"id", "previous_id", "kind"} | _FIELDS[kind] | _OPTIONAL.get(kind, set())
    unknown = sorted(set(cell) - allowed)
    if unknown:
        return f"unknown field(s) in {kind} Cell: {', '.join(unknown)}"
    missing = sorted(({"id", "previous_id"} | _FIELDS[kind]) - set(cell))
    if missing:
        return f"missing field(s) in {kind} Cell: {', '.join(missing)}"
    if not is_int(cell["id"]) or cell["id"] < 1:
        return "Cell id must be an integer >= 1"
    previous = cell["previous_id"]
    if previous is not None and (not is_int(previous) or previous < 1):
        return "previous_id must be null or an integer >= 1"
    if kind == "note":
        return _validate_note(cell)
    if "description" in cell and (problem := _description_problem(cell["description"])):
        return problem
    if kind == "code":
        return _validate_code(cell)
    return _validate_cmd(cell)


def _description_problem(description: Any) -> str | None:
    """An executable Cell's optional ``description``: a few words on one line saying what it
    is for (the progress comment, ``show`` and the timeline name the Cell by it)."""
    if not isinstance(description, str) or not description.strip():
        return "description must be a non-blank string (a few words)"
    if len(description) > DESCRIPTION_CHARS or any(c in description for c in "\r\n\x00"):
        return f"description must be one line of at most {DESCRIPTION_CHARS} characters"
    return None


def _validate_note(cell: dict[str, Any]) -> str | None:
    text = cell["text"]
    if not isinstance(text, str) or not text.strip():
        return "a note needs non-blank text"
    role = cell.get("role")
    if role is None and "role" in cell:
        return "role must be one of cancel, resolution, conclusion (omit it for plain notes)"
    if role is not None and role not in ROLES:
        return f"role must be one of cancel, resolution, conclusion, got {role!r}"
    return _note_fields_problem(cell) or _role_needs_problem(cell, role)


def _note_fields_problem(cell: dict[str, Any]) -> str | None:
    """A Control field of the wrong shape (whatever the role)."""
    if "target_cell_id" in cell and not is_int(cell["target_cell_id"]):
        return "target_cell_id must be an integer"
    if "evidence_refs" in cell:
        refs = cell["evidence_refs"]
        if not isinstance(refs, list) or not all(
            isinstance(r, str) and EVIDENCE_REF.match(r) for r in refs
        ):
            return "evidence_refs must be a list of 'session:event:N' strings"
    if "result" in cell and cell["result"] not in ("success", "failure"):
        return "result must be 'success' or 'failure'"
    return None


def _role_needs_problem(cell: dict[str, Any], role: str | None) -> str | None:
    """A field the role needs and the note lacks."""
    if role in ("cancel", "resolution") and "target_cell_id" not in cell:
        return f"a {role} note needs target_cell_id"
    if role == "resolution" and not cell.get("evidence_refs"):
        return "a resolution note needs a non-empty evidence_refs list"
    if role == "conclusion" and "result" not in cell:
        return "a conclusion note needs result: success or failure"
    return None


def _validate_code(cell: dict[str, Any]) -> str | None:
    if cell["runtime"] != "python":
        return "code Cells need runtime: 'python'"
    source = cell["source"]
    if not isinstance(source, str) or not source.strip():
        return "code Cells need a non-empty source"
    if "\x00" in source:
        return "source must not contain NUL characters"
    blocks = [m for m in _PEP723.finditer(source) if m.group("type") == "script"]
    if len(blocks) != 1:
        return (
            f"a code Cell needs exactly one PEP 723 script block, found {len(blocks)} "
            "(start with '# /// script', '# dependencies = []', '# ///')"
        )
    content = "".join(
        line[2:] if line.startswith("# ") else line[1:]
        for line in blocks[0].group("content").splitlines(keepends=True)
    )
    try:
        metadata = tomllib.loads(content)
    except tomllib.TOMLDecodeError as exc:
        return f"the PEP 723 block is not valid TOML: {exc}"
    deps = metadata.get("dependencies")
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        return "the PEP 723 block needs a dependencies list (dependencies = [] when none)"
    return None


def _validate_cmd(cell: dict[str, Any]) -> str | None:
    argv = cell["argv"]
    if not isinstance(argv, list) or not argv:
        return "a cmd Cell needs a non-empty argv list"
    if not all(isinstance(a, str) for a in argv) or not argv[0]:
        return "argv must be a list of strings with a non-empty program name"
    if any("\x00" in a for a in argv):
        return "argv must not contain NUL characters"
    return None


_IMPORT = re.compile(r"\s*(import\s|from\s+\S+\s+import\s)")


def first_meaningful_line(source: str) -> str:
    """The line of a script that says what it does: the first that is not blank, a comment
    (the PEP 723 block included) or an import (a parenthesised one to its closing line)."""
    in_import = False
    for line in source.splitlines():
        stripped = line.strip()
        if in_import:
            in_import = ")" not in stripped
            continue
        if not stripped or stripped.startswith("#"):
            continue
        if _IMPORT.match(line):
            in_import = stripped.endswith("(")
            continue
        return stripped
    return ""
