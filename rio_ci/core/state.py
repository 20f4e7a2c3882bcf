"""State (``rio.state/1``) and its Cells: their shape and validation.

A Cell is a plain JSON object. ``validate_cell`` says what is wrong with one, or returns
None. ``rio_ci.core.view`` builds the State a Turn shows from the fold's projection.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from typing import Any, TypeGuard

SCHEMA = "rio.state/1"
ROLES = ("cancel", "resolution", "conclusion")
EXECUTABLE = ("code", "cmd")
EVIDENCE_REF = re.compile(r"^session:event:([1-9][0-9]*)\Z")

_FIELDS = {
    "note": {"text"},
    "code": {"runtime", "source"},
    "cmd": {"argv"},
}
_OPTIONAL = {"note": {"role", "target_cell_id", "evidence_refs", "result"}}
# PEP 723: a block opens with "# /// TYPE", holds "#" or "# ..." lines, closes with "# ///".
_PEP723 = re.compile(r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$")


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
    if kind == "code":
        return _validate_code(cell)
    return _validate_cmd(cell)


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


def is_unresolved(execution: dict[str, Any]) -> bool:
    result = execution.get("result")
    return (
        isinstance(result, dict)
        and result.get("type") == "UnknownExecution"
        and execution.get("resolved_by") is None
    )
