"""Step admission (docs/patches.md): ``decide(projection, turn, patch, facts)`` is a pure
function that either accepts a patch (returning everything the commit must store) or names the
first rule it breaks. Nothing is changed either way: the Journal commits the outcome.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from typing import Any

from jsonpointer import EndOfList, JsonPointer, JsonPointerException

from rio_ci.core.events import PatchAccepted
from rio_ci.core.projection import Projection
from rio_ci.core.reducer import accepted_cells
from rio_ci.core.state import (
    EVIDENCE_REF,
    EXECUTABLE,
    NOT_FINITE,
    compact,
    encoded_size,
    is_unresolved,
    json_equal,
    lenient,
    validate_cell,
)
from rio_ci.core.view import render, unbounded_size

_INDEX_PATH = re.compile(r"^/cells/(0|[1-9][0-9]*)\Z")
_OP_KEYS = {
    "test": {"op", "path", "value"},
    "add": {"op", "path", "value"},
    "replace": {"op", "path", "value"},
    "remove": {"op", "path"},
}
OPS = tuple(_OP_KEYS)  # the operations a patch may use (the model's step schema names them)


@dataclass(frozen=True)
class Facts:
    """What admission needs from the Journal beyond the projection (looked up by the caller).

    ``observations`` maps each cited event seq to its kind (absent: no such event);
    ``recorded_executions`` holds cancel targets whose Execution exists in history.
    """

    observations: dict[int, str] = field(default_factory=dict)
    recorded_executions: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Accepted:
    """Everything the commit stores: exactly the fields of a ``patch_accepted`` event
    besides the Turn id and the patch itself."""

    cells: list[dict[str, Any]]  # new Cell versions, in operation order
    heads: list[int]  # the candidate's cell ids, in array order
    removed: list[int]
    executions: list[int]  # one queued Execution per new code/cmd Cell
    controls: list[dict[str, Any]]
    consumed: list[str]
    pause_cleared: bool
    revision: int
    next_cell_id: int
    digest: str

    def stored(self, turn_id: str, patch: list[Any], encoded: Encoded) -> tuple[PatchAccepted, str]:
        """The event's data and its text for the Journal, the patch's one encoding spliced
        in. The data is handed to the fold with its own copy of what it keeps of the patch:
        the new Cells (validated: strings, integers, null and lists of strings)."""
        data = self.event_data(turn_id, patch)
        rest = compact({k: v for k, v in data.items() if k not in ("turn_id", "patch")})
        data["cells"] = [
            {k: list(v) if isinstance(v, list) else v for k, v in cell.items()}
            for cell in self.cells
        ]
        return data, f'{{"turn_id":{compact(turn_id)},"patch":{encoded.text},{rest[1:]}'

    def event_data(self, turn_id: str, patch: list[Any]) -> PatchAccepted:
        """The event's data; ``cells`` are not stored: the fold takes them from ``patch``."""
        return {
            "turn_id": turn_id,
            "patch": patch,
            "digest": self.digest,
            "revision": self.revision,
            "next_cell_id": self.next_cell_id,
            "heads": self.heads,
            "removed": self.removed,
            "executions": self.executions,
            "controls": self.controls,
            "consumed": self.consumed,
            "pause_cleared": self.pause_cleared,
        }


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
class Rejection:
    """Admission's answer to a patch it will not accept: the first rule it breaks."""

    reason: str


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
    except ValueError:  # NaN or Infinity: fingerprinted, then rejected by _well_formed
        text, finite = lenient(patch), False
    try:
        data, safe = text.encode(), True
    except UnicodeEncodeError:  # still fingerprinted (then rejected): surrogatepass
        data, safe = text.encode("utf-8", "surrogatepass"), False
    return Encoded(text, hashlib.sha256(data).hexdigest(), len(data), safe, finite)


def digest(patch: Any) -> str:
    """The fingerprint of a patch, for idempotent re-submission."""
    return encode(patch).digest


def decide(
    proj: Projection, turn: dict[str, Any], patch: Any, facts: Facts, encoded: Encoded | None = None
) -> Accepted | Rejection:
    """``encoded``: ``encode(unwrap(patch))`` if the caller has it already."""
    try:
        return _decide(proj, turn, patch, facts, encoded or encode(unwrap(patch)))
    except _Reject as exc:
        return Rejection(str(exc))


class _Reject(Exception):
    pass


def _decide(
    proj: Projection, turn: dict[str, Any], patch: Any, facts: Facts, encoded: Encoded
) -> Accepted:
    ops = _well_formed(patch, encoded)
    snapshot = turn["state"]
    _check_revision(ops[0], snapshot["revision"], proj.revision)
    work = _Work(proj, snapshot)
    for number, op in enumerate(ops[1:], start=1):  # the first, the revision test, passed
        work.apply(op, f"operation {number}")

    executions = [c["id"] for c in work.new_cells if c["kind"] in EXECUTABLE]
    controls = _controls(proj, work.new_cells, executions, facts)
    _check_budgets(proj, turn, work.cells, executions)
    delivered = list(turn["delivered"])
    return Accepted(
        cells=work.new_cells,
        heads=[c["id"] for c in work.cells],
        removed=work.removed,
        executions=executions,
        controls=controls,
        consumed=delivered,
        pause_cleared=proj.pause is not None and proj.pause in delivered,
        revision=proj.revision + 1,
        next_cell_id=work.expected_id,
        digest=encoded.digest,
    )


def _check_revision(first: dict[str, Any], shown: int, current: int) -> None:
    if first["op"] != "test" or first["path"] != "/revision":
        raise _Reject("the first operation must be {op: test, path: /revision, value: N}")
    value = first["value"]  # RFC 6902 compares numbers by value: 3.0 is 3, true is not 1
    if isinstance(value, bool) or not isinstance(value, int | float) or value != shown:
        raise _Reject(f"revision test failed: the Turn's snapshot is at revision {shown}")
    if shown != current:
        raise _Reject("stale Turn: the State has moved on since this snapshot")


class _Work:
    """The candidate ``cells`` as the operations after the revision test change them."""

    def __init__(self, proj: Projection, snapshot: dict[str, Any]) -> None:
        self.snapshot = snapshot
        self.cells: list[dict[str, Any]] = [dict(c) for c in proj.cells]
        self.original = {c["id"] for c in self.cells}
        self.busy = {e["cell_id"] for e in proj.pending()}
        self.new_cells: list[dict[str, Any]] = []
        self.removed: list[int] = []
        self.expected_id = proj.next_cell_id
        self.last_removed_index: int | None = None

    def apply(self, op: dict[str, Any], where: str) -> None:
        kind = op["op"]
        if kind == "test":
            self.test(op, where)
            return
        if kind == "add":
            cell = self.add(op, where)
        else:
            index = _index(op["path"], kind, where, len(self.cells))
            target = self.cells[index]
            # A replaced Cell's slot now holds its new version, and a removed Cell is gone
            # from ``cells``: so this one check also gives every existing Cell at most one
            # operation per patch.
            if target["id"] not in self.original:
                raise _Reject(
                    f"{where}: Cell {target['id']} was created in this patch; every "
                    "Cell takes at most one operation per patch"
                )
            if kind == "remove":
                self.remove(index, where)
                return
            cell = self.replace(op, index, where)
        self.new_cells.append(cell)
        self.expected_id += 1

    def test(self, op: dict[str, Any], where: str) -> None:
        try:
            actual = JsonPointer(op["path"]).resolve(self.snapshot)
            if isinstance(actual, EndOfList):  # "-" names no element, only a position
                raise JsonPointerException(op["path"])
        except JsonPointerException:
            raise _Reject(f"{where}: test path {op['path']} does not exist") from None
        if not json_equal(actual, op["value"]):
            raise _Reject(f"{where}: test failed at {op['path']}")

    def add(self, op: dict[str, Any], where: str) -> dict[str, Any]:
        if op["path"] != "/cells/-":
            raise _Reject(f"{where}: add is allowed only at /cells/- (a new lineage)")
        cell = _checked_cell(op["value"], self.expected_id, where)
        if cell["previous_id"] is not None:
            raise _Reject(f"{where}: an added Cell starts a lineage: previous_id must be null")
        self.cells.append(cell)
        return cell

    def remove(self, index: int, where: str) -> None:
        if self.last_removed_index is not None and index >= self.last_removed_index:
            raise _Reject(f"{where}: removals must go in strictly descending index order")
        self.last_removed_index = index
        self.removed.append(self.cells[index]["id"])
        del self.cells[index]

    def replace(self, op: dict[str, Any], index: int, where: str) -> dict[str, Any]:
        target = self.cells[index]
        cell = _checked_cell(op["value"], self.expected_id, where)
        if cell["previous_id"] != target["id"]:
            raise _Reject(
                f"{where}: stale predecessor: replacing Cell {target['id']} needs "
                f"previous_id {target['id']}, got {cell['previous_id']}"
            )
        if target["id"] in self.busy:
            raise _Reject(
                f"{where}: Cell {target['id']} has a queued or running Execution: "
                "wait or cancel first"
            )
        self.cells[index] = cell
        return cell


def cited_and_targets(ops: Any, last_seq: int) -> tuple[set[int], set[int]]:
    """What admission must look up in the Journal for ``ops``, before it is judged: the event
    seqs its notes cite as evidence, and its cancel notes' targets."""
    cited, targets = set[int](), set[int]()
    for op in ops if isinstance(ops, list) else []:
        value = op.get("value") if isinstance(op, dict) else None
        if not isinstance(value, dict) or value.get("kind") != "note":
            continue
        refs = value.get("evidence_refs")
        for ref in refs if isinstance(refs, list) else []:
            match = EVIDENCE_REF.match(ref) if isinstance(ref, str) else None
            # Only seqs up to the last event can name one (and fit an SQLite integer).
            if match and int(match.group(1)) <= last_seq:
                cited.add(int(match.group(1)))
        target = value.get("target_cell_id")
        if value.get("role") == "cancel" and isinstance(target, int):
            targets.add(target)
    return cited, targets


def unwrap(patch: Any) -> Any:
    """The operations of ``{"patch": [...]}`` or of a bare list (anything else as it is)."""
    if isinstance(patch, dict) and set(patch) == {"patch"}:
        return patch["patch"]
    return patch


def _well_formed(patch: Any, encoded: Encoded) -> list[dict[str, Any]]:
    patch = unwrap(patch)
    if not isinstance(patch, list):
        raise _Reject('a patch must be a list of operations (or {"patch": [...]})')
    if not patch:
        raise _Reject("a patch needs at least the /revision test")
    if not encoded.text_safe:
        raise _Reject("the patch holds a lone surrogate (\\ud800-\\udfff), which is not text")
    if not encoded.finite:
        raise _Reject(f"the patch is not JSON: {NOT_FINITE}")
    for number, op in enumerate(patch):
        _check_operation(op, f"operation {number}")
    return patch


def _check_operation(op: Any, where: str) -> None:
    if not isinstance(op, dict) or not isinstance(op.get("op"), str):
        raise _Reject(f"{where} must be an object with an 'op'")
    name = op["op"]
    if name in ("move", "copy"):
        raise _Reject(f"{where}: {name} is not allowed")
    if name not in _OP_KEYS:
        raise _Reject(f"{where}: unknown op {name!r}")
    if set(op) != _OP_KEYS[name]:
        raise _Reject(f"{where}: {name} takes exactly {', '.join(sorted(_OP_KEYS[name]))}")
    if not isinstance(op["path"], str):
        raise _Reject(f"{where}: path must be a string")
    if name != "test" and not op["path"].startswith("/cells/"):
        raise _Reject(
            f"{where}: only /cells may be changed; {op['path']} belongs to "
            "the harness (test it instead)"
        )


def _index(path: str, kind: str, where: str, length: int) -> int:
    match = _INDEX_PATH.match(path)
    if not match:
        raise _Reject(
            f"{where}: {kind} must name a whole Cell at /cells/N (no edits inside a Cell)"
        )
    index = int(match.group(1))
    if index >= length:
        raise _Reject(f"{where}: no Cell at {path}")
    return index


def _checked_cell(value: Any, expected_id: int, where: str) -> dict[str, Any]:
    problem = validate_cell(value)
    if problem:
        raise _Reject(f"{where}: {problem}")
    if value["id"] != expected_id:
        raise _Reject(
            f"{where}: the new Cell version must take id {expected_id} "
            f"(runtime.next_cell_id, then +1 per new version), got {value['id']}"
        )
    return dict(value)


def _controls(
    proj: Projection, new_cells: list[dict[str, Any]], new_executions: list[int], facts: Facts
) -> list[dict[str, Any]]:
    controls: list[dict[str, Any]] = []
    resolving: set[int] = set()
    for cell in new_cells:
        role = cell.get("role") if cell["kind"] == "note" else None
        if role is None:
            continue
        control: dict[str, Any] = {"note_id": cell["id"], "role": role}
        if role == "cancel":
            target = cell["target_cell_id"]
            if (
                str(target) not in proj.executions
                and target not in new_executions
                and target not in facts.recorded_executions
            ):
                raise _Reject(
                    f"Cell {cell['id']}: cancel target {target} has no recorded Execution"
                )
            control["target_cell_id"] = target
        elif role == "resolution":
            target = cell["target_cell_id"]
            execution = proj.executions.get(str(target))
            if execution is None or not is_unresolved(execution) or target in resolving:
                raise _Reject(
                    f"Cell {cell['id']}: resolution target {target} is not an unresolved "
                    "UnknownExecution"
                )
            own = execution["result_seq"]
            for ref in cell["evidence_refs"]:
                match = EVIDENCE_REF.match(ref)
                assert match is not None  # validate_cell checked the shape
                seq = int(match.group(1))
                if seq == own:
                    raise _Reject(
                        f"Cell {cell['id']}: {ref} is the UnknownExecution's own record; cite an "
                        "observation that shows what happened"
                    )
                if seq not in facts.observations:
                    raise _Reject(f"Cell {cell['id']}: {ref} is not a committed observation")
            resolving.add(target)
            control["target_cell_id"] = target
            control["evidence_refs"] = list(cell["evidence_refs"])
        else:
            control["result"] = cell["result"]
        controls.append(control)
    return controls


def _check_budgets(
    proj: Projection, turn: dict[str, Any], work: list[dict[str, Any]], executions: list[int]
) -> None:
    limits = proj.limits
    outstanding = len(proj.pending()) + len(proj.unresolved()) + len(executions)
    if outstanding > limits.pending_cells:
        raise _Reject(
            f"too much outstanding work: {outstanding} pending/unresolved/new executable Cells "
            f"exceeds pending_cells={limits.pending_cells}"
        )
    cells_size = encoded_size(work)
    if cells_size > limits.context_bytes // 2:
        raise _Reject(
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
        raise _Reject(
            f"context budget: the State would take {total} bytes, over "
            f"context_bytes={limits.context_bytes}; remove Cells whose output you no longer need"
        )
