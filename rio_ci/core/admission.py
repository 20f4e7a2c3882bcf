"""Step admission (docs/patches.md). ``decide(projection, turn, patch, facts)`` is a pure
function that takes a patch as it was submitted and, in one pass, unwraps it, encodes it once,
checks it and either accepts it (an ``Accepted`` holding the event the commit stores) or names
the first rule it breaks (a ``Rejection``, with what the Journal records of the patch). What it
needs of the Journal beyond the projection it asks ``facts``, only when a rule needs it.
``decide_again`` answers a patch for a Turn that already accepted one. Nothing is changed
either way: the Session commits the outcome.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

from jsonpointer import EndOfList, JsonPointer, JsonPointerException

from rio_ci.core.entities import Cell, Turn
from rio_ci.core.events import OBSERVATION_KINDS, Control, PatchAccepted
from rio_ci.core.json_value import NOT_FINITE, compact, encoded_size, json_equal, lenient
from rio_ci.core.projection import Projection, is_unresolved
from rio_ci.core.reducer import accepted_cells
from rio_ci.core.state import EVIDENCE_REF, EXECUTABLE, validate_cell
from rio_ci.core.view import render, unbounded_size

_INDEX_PATH = re.compile(r"^/cells/(0|[1-9][0-9]*)\Z")
_OP_KEYS = {
    "test": {"op", "path", "value"},
    "add": {"op", "path", "value"},
    "replace": {"op", "path", "value"},
    "remove": {"op", "path"},
}
OPS = tuple(_OP_KEYS)  # the operations a patch may use (the model's step schema names them)


class Facts(Protocol):
    """What admission asks of the Journal beyond the projection, and only when a rule needs
    it: the Session answers (``rio_ci.session.facts.JournalFacts``) inside the step's
    transaction."""

    def kinds_of(self, seqs: set[int]) -> dict[int, str]:
        """The kind of each committed event among ``seqs`` (a seq that names none: absent)."""
        ...

    def execution_recorded(self, cell_id: int) -> bool:
        """Whether the Journal holds a finished Execution of Cell ``cell_id`` (the projection
        drops settled ones)."""
        ...


@dataclass(frozen=True)
class Receipt:
    turn_id: str
    revision: int
    cell_ids: list[int]
    event: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn_id": self.turn_id,
            "revision": self.revision,
            "cell_ids": self.cell_ids,
            "event": self.event,
        }

    @classmethod
    def of(cls, accepted: dict[str, Any]) -> Receipt:
        """The Receipt of a committed ``patch_accepted`` event."""
        return cls(
            accepted["turn_id"],
            accepted["revision"],
            [c["id"] for c in accepted_cells(accepted)],
            accepted["seq"],
        )


@dataclass(frozen=True)
class Accepted:
    """A patch admitted for the open Turn, ready to commit. ``data`` is the ``patch_accepted``
    event's data as the fold takes it: its ``cells`` (the new versions, derived from the patch
    and not stored) are the fold's own copy. ``text`` is that data as the Journal stores it,
    without ``cells``, the patch's one encoding spliced in: handed over with it
    (``Writer.append(text=)``), the data is neither encoded again nor copied."""

    data: PatchAccepted
    text: str

    def receipt(self, seq: int) -> Receipt:
        """The Receipt of this acceptance, committed as event ``seq``."""
        cells = self.data["cells"]
        return Receipt(self.data["turn_id"], self.data["revision"], [c["id"] for c in cells], seq)


@dataclass(frozen=True)
class Rejection:
    """A patch admission will not accept: ``reason``, the first rule it breaks (the words the
    model and the CLI read), and what the Journal records of the patch, its ``digest`` and
    ``size`` (a ``patch_rejected`` event: never the patch itself). Where an API raises instead
    of returning, the same idea is the exception ``rio_ci.core.errors.Rejected``."""

    reason: str
    digest: str
    size: int


@dataclass(frozen=True)
class Encoded:
    """A patch encoded once, as the Journal stores it (compact UTF-8 JSON): a step takes its
    fingerprint, its size, its text check and its stored text from this one encoding."""

    text: str
    digest: str  # sha256 of the encoding: equal patches written alike share it
    size: int  # bytes
    text_safe: bool  # False when a string holds a lone surrogate (no UTF-8 for it)
    finite: bool  # False when a number is NaN or an infinity (not JSON)


def encode(patch: Any) -> Encoded:
    try:
        text, finite = compact(patch), True
    except ValueError:  # NaN or Infinity: fingerprinted, then rejected by _form_problem
        text, finite = lenient(patch), False
    try:
        data, safe = text.encode(), True
    except UnicodeEncodeError:  # still fingerprinted (then rejected): surrogatepass
        data, safe = text.encode("utf-8", "surrogatepass"), False
    return Encoded(text, hashlib.sha256(data).hexdigest(), len(data), safe, finite)


def digest(patch: Any) -> str:
    """The fingerprint of a patch, for idempotent re-submission."""
    return encode(patch).digest


def unwrap(patch: Any) -> Any:
    """The operations of ``{"patch": [...]}`` or of a bare list (anything else as it is)."""
    if isinstance(patch, dict) and set(patch) == {"patch"}:
        return patch["patch"]
    return patch


def decide(proj: Projection, turn: Turn, patch: Any, facts: Facts) -> Accepted | Rejection:
    """Judge ``patch`` (operations, bare or as ``{"patch": [...]}``) for the open ``turn``:
    the ``patch_accepted`` event to commit, or the first rule the patch breaks with its
    digest and size. The patch is unwrapped and encoded once, here: its digest, its size,
    its text check and its stored text all come from that one encoding."""
    ops = unwrap(patch)
    encoded = encode(ops)
    work = _Work(proj, turn, facts)
    problem = work.problem(ops, encoded)
    if problem is not None:
        return Rejection(problem, encoded.digest, encoded.size)
    return work.accepted(ops, encoded)


def decide_again(accepted: dict[str, Any], patch: Any) -> Receipt | Rejection:
    """The answer to ``patch`` for a Turn that already accepted one (``accepted``: that
    committed ``patch_accepted`` event). The same patch, by digest or by value (the digests
    differ for keys in another order, or a digest computed by an older rio-ci), gets the
    original Receipt; a different one is a conflict, a Rejection recorded like any other."""
    ops = unwrap(patch)
    encoded = encode(ops)
    if accepted["digest"] == encoded.digest or json_equal(accepted["patch"], ops):
        return Receipt.of(accepted)
    why = f"conflict: Turn {accepted['turn_id']} already accepted a different patch"
    return Rejection(why, encoded.digest, encoded.size)


def _form_problem(ops: Any, encoded: Encoded) -> str | None:
    """The first way ``ops`` is not a patch at all, or None."""
    if not isinstance(ops, list):
        return 'a patch must be a list of operations (or {"patch": [...]})'
    if not ops:
        return "a patch needs at least the /revision test"
    if not encoded.text_safe:
        return "the patch holds a lone surrogate (\\ud800-\\udfff), which is not text"
    if not encoded.finite:
        return f"the patch is not JSON: {NOT_FINITE}"
    for number, op in enumerate(ops):
        problem = _operation_problem(op, f"operation {number}")
        if problem is not None:
            return problem
    return None


def _operation_problem(op: Any, where: str) -> str | None:
    if not isinstance(op, dict) or not isinstance(op.get("op"), str):
        return f"{where} must be an object with an 'op'"
    name = op["op"]
    if name in ("move", "copy"):
        return f"{where}: {name} is not allowed"
    if name not in _OP_KEYS:
        return f"{where}: unknown op {name!r}"
    if set(op) != _OP_KEYS[name]:
        return f"{where}: {name} takes exactly {', '.join(sorted(_OP_KEYS[name]))}"
    if not isinstance(op["path"], str):
        return f"{where}: path must be a string"
    if name != "test" and not op["path"].startswith("/cells/"):
        return (
            f"{where}: only /cells may be changed; {op['path']} belongs to "
            "the harness (test it instead)"
        )
    return None


def _revision_problem(first: dict[str, Any], shown: int, current: int) -> str | None:
    if first["op"] != "test" or first["path"] != "/revision":
        return "the first operation must be {op: test, path: /revision, value: N}"
    value = first["value"]  # RFC 6902 compares numbers by value: 3.0 is 3, true is not 1
    if isinstance(value, bool) or not isinstance(value, int | float) or value != shown:
        return f"revision test failed: the Turn's State is at revision {shown}"
    if shown != current:
        return "stale Turn: the State has moved on since this Turn was prepared"
    return None


class _Work:
    """The candidate ``cells`` as a patch's operations change them, and what the patch asks
    for. Each check returns the rule the patch breaks, or None once it has applied."""

    def __init__(self, proj: Projection, turn: Turn, facts: Facts) -> None:
        self.proj, self.turn, self.facts = proj, turn, facts
        self.shown = turn["state"]  # the Turn's State, as the model saw it
        self.cells: list[Cell] = [c.copy() for c in proj.cells]
        self.original = {c["id"] for c in self.cells}
        self.busy = {e["cell_id"] for e in proj.pending()}
        self.new_cells: list[Cell] = []
        self.removed: list[int] = []
        self.expected_id = proj.next_cell_id
        self.last_removed_index: int | None = None
        self.executions: list[int] = []  # one queued Execution per new code/cmd Cell
        self.controls: list[Control] = []

    def problem(self, ops: Any, encoded: Encoded) -> str | None:
        """The first rule the patch breaks, or None: the candidate is then complete. The
        order: its form, the revision test, each operation in turn, the Controls, then the
        budgets (pending work before the context's size)."""
        # A reason is never empty: ``or`` goes on to the next rule only when one passed.
        problem = _form_problem(ops, encoded) or _revision_problem(
            ops[0], self.shown["revision"], self.proj.revision
        )
        if problem is not None:
            return problem
        for number, op in enumerate(ops[1:], start=1):  # the first, the revision test, passed
            problem = self.apply(op, f"operation {number}")
            if problem is not None:
                return problem
        self.executions = [c["id"] for c in self.new_cells if c["kind"] in EXECUTABLE]
        return self.controls_problem() or _budget_problem(self.proj, self.cells, self.executions)

    def accepted(self, ops: list[Any], encoded: Encoded) -> Accepted:
        """The acceptance of a patch that broke no rule: the event's data, and its text with
        the patch's one encoding spliced in. The data goes to the fold with its own copy of
        what the fold keeps of the patch: the new Cells (validated: strings, integers, null
        and lists of strings)."""
        delivered = list(self.turn["delivered"])
        data: PatchAccepted = {
            "turn_id": self.turn["turn_id"],
            "patch": ops,
            "digest": encoded.digest,
            "revision": self.proj.revision + 1,
            "next_cell_id": self.expected_id,
            "heads": [c["id"] for c in self.cells],
            "removed": self.removed,
            "executions": self.executions,
            "controls": self.controls,
            "consumed": delivered,
            "pause_cleared": self.proj.pause is not None and self.proj.pause in delivered,
        }
        rest = compact({k: v for k, v in data.items() if k not in ("turn_id", "patch")})
        data["cells"] = [
            {k: list(v) if isinstance(v, list) else v for k, v in cell.items()}
            for cell in self.new_cells
        ]
        turn_id = compact(data["turn_id"])
        return Accepted(data, f'{{"turn_id":{turn_id},"patch":{encoded.text},{rest[1:]}')

    # --- the operations after the revision test --------------------------------------------

    def apply(self, op: dict[str, Any], where: str) -> str | None:
        kind = op["op"]
        if kind == "test":
            return self.test(op, where)
        if kind == "add":
            return self.add(op, where)
        match = _INDEX_PATH.match(op["path"])
        if not match:
            return f"{where}: {kind} must name a whole Cell at /cells/N (no edits inside a Cell)"
        index = int(match.group(1))
        if index >= len(self.cells):
            return f"{where}: no Cell at {op['path']}"
        target = self.cells[index]
        # A replaced Cell's slot now holds its new version, and a removed Cell is gone from
        # ``cells``: so this one check also gives every existing Cell at most one operation
        # per patch.
        if target["id"] not in self.original:
            return (
                f"{where}: Cell {target['id']} was created in this patch; every "
                "Cell takes at most one operation per patch"
            )
        if kind == "remove":
            return self.remove(index, where)
        return self.replace(op, index, where)

    def test(self, op: dict[str, Any], where: str) -> str | None:
        try:
            actual = JsonPointer(op["path"]).resolve(self.shown)
            if isinstance(actual, EndOfList):  # "-" names no element, only a position
                raise JsonPointerException(op["path"])
        except JsonPointerException:
            return f"{where}: test path {op['path']} does not exist"
        if not json_equal(actual, op["value"]):
            return f"{where}: test failed at {op['path']}"
        return None

    def add(self, op: dict[str, Any], where: str) -> str | None:
        if op["path"] != "/cells/-":
            return f"{where}: add is allowed only at /cells/- (a new lineage)"
        problem = _cell_problem(op["value"], self.expected_id, where)
        if problem is not None:
            return problem
        if op["value"]["previous_id"] is not None:
            return f"{where}: an added Cell starts a lineage: previous_id must be null"
        self.cells.append(self._new_version(op["value"]))
        return None

    def remove(self, index: int, where: str) -> str | None:
        if self.last_removed_index is not None and index >= self.last_removed_index:
            return f"{where}: removals must go in strictly descending index order"
        self.last_removed_index = index
        self.removed.append(self.cells[index]["id"])
        del self.cells[index]
        return None

    def replace(self, op: dict[str, Any], index: int, where: str) -> str | None:
        target = self.cells[index]
        problem = _cell_problem(op["value"], self.expected_id, where)
        if problem is not None:
            return problem
        if op["value"]["previous_id"] != target["id"]:
            return (
                f"{where}: stale predecessor: replacing Cell {target['id']} needs "
                f"previous_id {target['id']}, got {op['value']['previous_id']}"
            )
        if target["id"] in self.busy:
            return (
                f"{where}: Cell {target['id']} has a queued or running Execution: "
                "wait or cancel first"
            )
        self.cells[index] = self._new_version(op["value"])
        return None

    def _new_version(self, value: dict[str, Any]) -> Cell:
        """A checked Cell (the patch's value, copied) as the next new version."""
        cell = cast(Cell, dict(value))
        self.new_cells.append(cell)
        self.expected_id += 1
        return cell

    # --- what the new notes ask for ----------------------------------------------------------

    def controls_problem(self) -> str | None:
        """The Controls the new notes ask for, into ``controls``; or the first that cannot
        be asked for."""
        resolving: set[int] = set()
        for cell in self.new_cells:
            role = cell.get("role") if cell["kind"] == "note" else None
            if role is None:
                continue
            control: Control = {"note_id": cell["id"], "role": role}
            problem = None
            if role == "cancel":
                problem = self._cancel_problem(cell)
                control["target_cell_id"] = cell["target_cell_id"]
            elif role == "resolution":
                problem = self._resolution_problem(cell, resolving)
                control["target_cell_id"] = cell["target_cell_id"]
                control["evidence_refs"] = list(cell["evidence_refs"])
            else:
                control["result"] = cell["result"]
            if problem is not None:
                return problem
            self.controls.append(control)
        return None

    def _cancel_problem(self, cell: Cell) -> str | None:
        target = cell["target_cell_id"]
        # The Journal is asked last, and only about a target the projection no longer holds.
        if (
            str(target) in self.proj.executions
            or target in self.executions
            or self.facts.execution_recorded(target)
        ):
            return None
        return f"Cell {cell['id']}: cancel target {target} has no recorded Execution"

    def _resolution_problem(self, cell: Cell, resolving: set[int]) -> str | None:
        target = cell["target_cell_id"]
        execution = self.proj.executions.get(str(target))
        if execution is None or not is_unresolved(execution) or target in resolving:
            return (
                f"Cell {cell['id']}: resolution target {target} is not an unresolved "
                "UnknownExecution"
            )
        own = execution["result_seq"]
        refs = [(ref, _seq_of(ref)) for ref in cell["evidence_refs"]]
        # Only seqs up to the last event can name one (and fit an SQLite integer).
        kinds = self.facts.kinds_of({seq for _, seq in refs if seq <= self.proj.last_seq})
        for ref, seq in refs:
            if seq == own:
                return (
                    f"Cell {cell['id']}: {ref} is the UnknownExecution's own record; cite an "
                    "observation that shows what happened"
                )
            if kinds.get(seq) not in OBSERVATION_KINDS:
                return f"Cell {cell['id']}: {ref} is not a committed observation"
        resolving.add(target)
        return None


def _seq_of(ref: str) -> int:
    match = EVIDENCE_REF.match(ref)
    assert match is not None  # validate_cell checked the shape
    return int(match.group(1))


def _cell_problem(value: Any, expected_id: int, where: str) -> str | None:
    problem = validate_cell(value)
    if problem:
        return f"{where}: {problem}"
    if value["id"] != expected_id:
        return (
            f"{where}: the new Cell version must take id {expected_id} "
            f"(runtime.next_cell_id, then +1 per new version), got {value['id']}"
        )
    return None


def _budget_problem(proj: Projection, work: list[Cell], executions: list[int]) -> str | None:
    limits = proj.limits
    outstanding = len(proj.pending()) + len(proj.unresolved()) + len(executions)
    if outstanding > limits.pending_cells:
        return (
            f"too much outstanding work: {outstanding} pending/unresolved/new executable Cells "
            f"exceeds pending_cells={limits.pending_cells}"
        )
    cells_size = encoded_size(work)
    if cells_size > limits.context_bytes // 2:
        return (
            f"context budget: cells take {cells_size} bytes, more than half of "
            f"context_bytes={limits.context_bytes}; remove or summarise Cells"
        )
    # The candidate as the next Turn would render it: its size from its parts while that
    # fits (no State built, the Cells not encoded twice), else rendered with the outputs
    # masked as far as they may be.
    total = unbounded_size(proj, work, cells_size)
    if total > limits.context_bytes:
        total = encoded_size(render(replace(proj, cells=work), []))
    if total > limits.context_bytes:
        return (
            f"context budget: the State would take {total} bytes, over "
            f"context_bytes={limits.context_bytes}; remove Cells whose output you no longer need"
        )
    return None
