"""Random patches against admission: ``decide()`` directly (pure, 10,000 patches) and
``Session.step`` on a real file (a state machine, ~300 steps).

Patches are built from the Turn's snapshot, so many are accepted; others mix in wrong ids,
stale predecessors, bad Cells, forbidden paths and plain garbage. Whatever comes in,
admission answers with an acceptance or a ``Rejection``, a rejection changes nothing, and an
acceptance keeps the invariants of docs/patches.md.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import accept, end_execution, journal_rows, record_unknown, start_execution, succeed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from rio_ci.core.admission import Accepted, Rejection, decide, digest
from rio_ci.core.errors import Rejected
from rio_ci.core.events import OBSERVATION_KINDS
from rio_ci.core.json_value import encoded_size
from rio_ci.core.limits import Limits
from rio_ci.core.projection import Projection
from rio_ci.core.reducer import apply
from rio_ci.core.state import EXECUTABLE, validate_cell
from rio_ci.session.session import Receipt, Session
from rio_ci.session.settings import Settings
from tests.kit import PEP723, cmd_cell, code_cell, note_cell

# --- building patches from a snapshot ------------------------------------------------------

WEIRD_TEXT = ["", " ", "\ud800", "\x00", "é", "/cells/-", "session:event:1", "ünïcødé ✓"]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-3, 2**70)
    | st.floats()
    | st.text(max_size=6)
    | st.sampled_from(WEIRD_TEXT)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
SOURCES = [
    PEP723 + "print('hi')\n",
    "print('no block')\n",
    PEP723 + "x = 1\n" + PEP723,
    "# /// script\n# requires-python = '>=3'\n# ///\n",
    "",
]
BAD_PATHS = [
    "/goal",
    "/revision",
    "/runtime",
    "/runtime/pause",
    "/schema",
    "/id",
    "",
    "/cells",
    "/cells/0/text",
    "/cells/0",
    "/cells/-",
    "/cells/99",
    "/cells/01",
    "cells/0",
    "/cells/-1",
]


@dataclass(frozen=True)
class TurnState:
    """What a patch author can read off a Turn's State."""

    state: dict[str, Any]
    last_seq: int

    @property
    def heads(self) -> list[int]:
        return [c["id"] for c in self.state["cells"]]

    @property
    def executions(self) -> list[int]:
        return [int(k) for k in self.state["runtime"]["cells"]]

    @property
    def unresolved(self) -> list[int]:
        return [
            int(k)
            for k, v in self.state["runtime"]["cells"].items()
            if (v["result"] or {}).get("type") == "UnknownExecution" and v["resolved_by"] is None
        ]

    @property
    def refs(self) -> list[str]:
        own = [
            r
            for v in self.state["runtime"]["cells"].values()
            for r in (v["result"] or {}).get("evidence_refs", [])
        ]
        inbox = [f"session:event:{m['seq']}" for m in self.state["runtime"]["inbox"]]
        return own + inbox + ["session:event:1", f"session:event:{self.last_seq + 7}"]

    def pointers(self) -> list[tuple[str, Any]]:
        """Some (path, value) pairs that hold in the snapshot."""
        found = [
            ("/revision", self.state["revision"]),
            ("/goal", self.state["goal"]),
            ("/runtime/next_cell_id", self.state["runtime"]["next_cell_id"]),
            ("/runtime/pause", self.state["runtime"]["pause"]),
            ("/runtime/inbox", self.state["runtime"]["inbox"]),
        ]
        for index, cell in enumerate(self.state["cells"]):
            found.append((f"/cells/{index}", cell))
            found.append((f"/cells/{index}/id", cell["id"]))
        for key, facts in self.state["runtime"]["cells"].items():
            found.append((f"/runtime/cells/{key}/phase", facts["phase"]))
        return found


def rarely(draw: st.DrawFn, one_in: int = 10) -> bool:
    return draw(st.integers(0, one_in - 1)) == 0


CELL_SHAPES = (
    ["note"] * 4 + ["cmd"] * 2 + ["code"] * 2 + ["cancel", "resolution", "conclusion", "garbage"]
)
CELL_DEFECTS = [None] * 16 + ["id", "previous", "extra", "pop"]
PATCH_DEFECTS = [None] * 24 + ["json", "no test", "bad revision", "swap", "wrap", "wrap"]
TEXTS = ["look at app.py", "x", "plan: run tests", "é ✓", "done", " padded ", "\ud800", "", "   "]
ARGVS = [["true"], ["python3", "-c", "print(1)"], ["ls", "-l"], [], [""], ["a", 1], "ls"]


SHAPE = st.sampled_from(CELL_SHAPES)
CELL_DEFECT = st.sampled_from(CELL_DEFECTS)
PATCH_DEFECT = st.sampled_from(PATCH_DEFECTS)
NOTE_TEXT = st.sampled_from(TEXTS[:6] * 8 + TEXTS[6:]) | st.text(max_size=5)
ARGV = st.sampled_from(ARGVS[:3] * 3 + ARGVS[3:])
SOURCE = st.sampled_from(SOURCES[:1] * 4 + SOURCES[1:])
OP_KIND = st.sampled_from(["add", "add", "replace", "remove", "test", "garbage"])
OP_NAME = st.sampled_from(["move", "copy", "add", "replace", "remove", "test", "nope", 3])
BAD_PATH = st.sampled_from(BAD_PATHS)
EXTRA_KEY = st.sampled_from(
    ["extra", "text", "role", "kind", "evidence_refs", "target_cell_id", "argv", "source"]
)


@st.composite
def cells(draw: st.DrawFn, seen: TurnState, new_id: int, previous: int | None) -> Any:
    """A Cell value, usually valid, with the given id and previous_id (usually)."""
    shape = draw(SHAPE)
    if shape == "garbage":
        return draw(JSON)
    cell: dict[str, Any] = {
        "id": new_id,
        "previous_id": previous,
        **draw(bodies(seen, shape, new_id)),
    }
    defect = draw(CELL_DEFECT)
    if defect == "id":
        cell["id"] = draw(st.sampled_from([new_id + 1, new_id - 1, 0, str(new_id), True]))
    elif defect == "previous":
        cell["previous_id"] = draw(st.sampled_from([None, 1, new_id, previous, "1"]))
    elif defect == "extra":
        cell[draw(EXTRA_KEY)] = draw(JSON)
    elif defect == "pop":
        cell.pop(draw(st.sampled_from(sorted(cell))))
    return cell


@st.composite
def bodies(draw: st.DrawFn, seen: TurnState, shape: str, new_id: int) -> dict[str, Any]:
    """A Cell's fields but ``id`` and ``previous_id``, of the given shape."""
    targets = seen.executions + seen.heads + [new_id - 1, 999]
    if shape == "note":
        return note_cell(draw(NOTE_TEXT))
    if shape == "cmd":
        return {"kind": "cmd", "argv": draw(ARGV)}
    if shape == "code":
        return code_cell(header=draw(SOURCE), body="")
    if shape == "cancel":
        return note_cell("stop", role="cancel", target_cell_id=draw(st.sampled_from(targets)))
    if shape == "resolution":
        refs = draw(st.lists(st.sampled_from(seen.refs), min_size=0, max_size=2))
        target = draw(st.sampled_from((seen.unresolved * 3) + targets))
        return note_cell("resolved", role="resolution", target_cell_id=target, evidence_refs=refs)
    return note_cell(
        "end", role="conclusion", result=draw(st.sampled_from(["success", "failure", "done"]))
    )


@dataclass
class _Drafting:
    """The array as a patch's operations so far leave it, while they are drawn."""

    ids: list[int]
    next_id: int
    last_removed: int | None = None


@st.composite
def patches(draw: st.DrawFn, seen: TurnState) -> Any:
    """A patch for the snapshot: mostly well-formed, sometimes subtly or grossly wrong."""
    defect = draw(PATCH_DEFECT)
    if defect == "json":
        return draw(JSON)
    state = seen.state
    drafting = _Drafting(list(seen.heads), state["runtime"]["next_cell_id"])
    ops: list[Any] = []
    if defect != "no test":
        value = state["revision"] if defect != "bad revision" else draw(JSON)
        ops.append({"op": "test", "path": "/revision", "value": value})
    for _ in range(draw(st.integers(0, 4))):
        ops += draw(operations(seen, drafting, draw(OP_KIND)))
    if defect == "swap" and len(ops) > 1:
        i = draw(st.integers(0, len(ops) - 1))
        j = draw(st.integers(0, len(ops) - 1))
        ops[i], ops[j] = ops[j], ops[i]
    return {"patch": ops} if defect == "wrap" else ops


@st.composite
def operations(draw: st.DrawFn, seen: TurnState, drafting: _Drafting, kind: str) -> list[Any]:
    """One operation of ``kind`` as a list (empty when the array has no Cell it could name)."""
    ids = drafting.ids
    if kind == "add":
        cell = draw(cells(seen, drafting.next_id, None))
        ids.append(drafting.next_id)
        drafting.next_id += 1
        return [{"op": "add", "path": "/cells/-", "value": cell}]
    if kind == "replace" and ids:
        index = draw(st.integers(0, len(ids) - 1))
        cell = draw(cells(seen, drafting.next_id, ids[index]))
        ids[index] = drafting.next_id
        drafting.next_id += 1
        return [{"op": "replace", "path": f"/cells/{index}", "value": cell}]
    if kind == "remove" and ids:
        last = drafting.last_removed
        upper = len(ids) - 1 if last is None else last - 1
        index = draw(st.integers(0, upper if upper >= 0 else len(ids) - 1))
        del ids[index]
        drafting.last_removed = index
        return [{"op": "remove", "path": f"/cells/{index}"}]
    if kind == "test":
        path, value = draw(st.sampled_from(seen.pointers()))
        if rarely(draw, 5):
            value = draw(JSON)
        return [{"op": "test", "path": path, "value": value}]
    if kind == "garbage":
        return [draw(garbage())]
    return []


@st.composite
def garbage(draw: st.DrawFn) -> Any:
    op: dict[str, Any] = {"op": draw(OP_NAME), "path": draw(BAD_PATH)}
    if draw(st.booleans()):
        op["value"] = draw(JSON)
    if rarely(draw, 4):
        op["from"] = draw(BAD_PATH)
    return op if not rarely(draw) else draw(JSON)


# --- what an acceptance must satisfy -------------------------------------------------------


def check_accepted(proj: Projection, turn: dict[str, Any], accepted: Accepted) -> None:
    d = accepted.data
    # The stored text is the data (the new Cells aside: derived from the patch) and its
    # digest is the patch's.
    assert json.loads(accepted.text) == {k: v for k, v in d.items() if k != "cells"}
    assert d["digest"] == digest(d["patch"])
    old_heads = [c["id"] for c in proj.cells]
    new_ids = [c["id"] for c in d["cells"]]
    assert d["revision"] == proj.revision + 1
    assert new_ids == list(range(proj.next_cell_id, proj.next_cell_id + len(new_ids)))
    assert d["next_cell_id"] == proj.next_cell_id + len(new_ids)
    assert len(set(d["heads"])) == len(d["heads"]), "heads are unique"
    assert set(d["heads"]) <= set(old_heads) | set(new_ids), "no id comes back"
    replaced = [c["previous_id"] for c in d["cells"] if c["previous_id"] is not None]
    assert len(set(replaced)) == len(replaced), "one successor per Cell"
    assert set(replaced) <= set(old_heads)
    assert set(d["removed"]) <= set(old_heads) and not set(d["removed"]) & set(d["heads"])
    assert set(old_heads) == (set(old_heads) & set(d["heads"])) | set(d["removed"]) | set(replaced)
    busy = {e["cell_id"] for e in proj.pending()}
    assert not busy & set(replaced), "a pending Cell was replaced"
    for cell in d["cells"]:
        assert validate_cell(cell) is None
    assert d["executions"] == [c["id"] for c in d["cells"] if c["kind"] in EXECUTABLE]
    by_id = {c["id"]: c for c in [*proj.cells, *d["cells"]]}
    assert encoded_size([by_id[i] for i in d["heads"]]) <= proj.limits.context_bytes // 2
    outstanding = len(proj.pending()) + len(proj.unresolved()) + len(d["executions"])
    assert outstanding <= proj.limits.pending_cells
    assert d["consumed"] == turn["delivered"]
    # The fold, handed the event's data as the Session hands it, agrees with the decision.
    assert d["turn_id"] == turn["turn_id"]
    folded = Projection.from_dict(json.loads(json.dumps(proj.__dict__)))
    apply(folded, folded.last_seq + 1, "patch_accepted", dict(d))
    assert [c["id"] for c in folded.cells] == d["heads"]
    for cell_id in d["executions"]:
        assert folded.executions[str(cell_id)]["phase"] == "queued"


# --- decide() directly ---------------------------------------------------------------------


@dataclass(frozen=True)
class Known:
    """The facts admission may ask of history (``admission.Facts``), read once from the
    file: every event's kind, and the Cells whose Execution finished."""

    kinds: dict[int, str]
    finished: frozenset[int]

    def kinds_of(self, seqs: set[int]) -> dict[int, str]:
        return {seq: self.kinds[seq] for seq in seqs if seq in self.kinds}

    def execution_recorded(self, cell_id: int) -> bool:
        return cell_id in self.finished


@dataclass(frozen=True)
class Base:
    proj: Projection
    turn: dict[str, Any]
    facts: Known

    @property
    def seen(self) -> TurnState:
        return TurnState(self.turn["state"], self.proj.last_seq)


def freeze(session: Session) -> Base:
    """The open Turn of ``session`` with every fact admission may look up."""
    session.prepare_turn()
    rows = journal_rows(session.path)
    kinds = {e["seq"]: e["kind"] for e in rows}
    assert set(kinds.values()) - OBSERVATION_KINDS, "admission must tell observations apart"
    recorded = frozenset(e["data"]["cell_id"] for e in rows if e["kind"] == "execution_finished")
    proj = Projection.from_dict(session.refresh().to_dict())
    assert proj.turn is not None
    return Base(proj, proj.turn, Known(kinds, recorded))


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> list[Base]:
    where = tmp_path_factory.mktemp("bases")
    found = []
    empty = Session.create(where / "empty.db", "fuzz", Settings(cwd=str(where)))
    found.append(freeze(empty))
    for name, limits in (
        ("rich", Limits()),
        ("tight", Limits(pending_cells=4, context_bytes=2400)),
    ):
        session = Session.create(
            where / f"{name}.db", "fuzz", Settings(cwd=str(where), limits=limits)
        )
        accept(
            session,
            lambda p: (
                p.add(note_cell("plan"))
                .add(cmd_cell("true"))
                .add(cmd_cell("deploy"))
                .add(code_cell())
                .add(cmd_cell("gone"))
            ),
        )
        succeed(session, 2)
        record_unknown(session, 3)
        succeed(session, 5)
        accept(session, lambda p: p.remove(4))  # 5 finished and left: history only
        accept(session, lambda p: p.add(cmd_cell("queued")).add(note_cell("more")))
        session.receive("c1", "comment", {"body": "hello"})
        found.append(freeze(session))
        session.close()
    empty.close()
    return found


def fingerprint(base: Base) -> str:
    return json.dumps([base.proj.__dict__, base.turn], sort_keys=True)


PER_EXAMPLE = 4  # patches per Hypothesis example: spreads the engine's per-example cost


def fuzz_decide(bases: list[Base], patches_wanted: int, *, derandomize: bool) -> Counter[str]:
    outcomes: Counter[str] = Counter()

    @settings(
        max_examples=patches_wanted // PER_EXAMPLE,
        deadline=None,
        database=None,
        derandomize=derandomize,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        base = data.draw(st.sampled_from(bases))
        for _ in range(PER_EXAMPLE):
            check_one(base, data.draw(patches(base.seen)), outcomes)

    run()
    # The generator must reach both outcomes often, or the test proves little.
    assert outcomes["accepted"] + outcomes["rejected"] >= patches_wanted
    assert outcomes["accepted"] >= patches_wanted // 10, outcomes
    assert outcomes["with cells"] >= patches_wanted // 20, outcomes
    assert outcomes["rejected"] >= patches_wanted * 3 // 10, outcomes
    return outcomes


def check_one(base: Base, patch: Any, outcomes: Counter[str]) -> None:
    before = fingerprint(base)
    result = decide(base.proj, base.turn, patch, base.facts)
    assert fingerprint(base) == before, "decide() changed its inputs"
    if isinstance(result, Rejection):
        assert isinstance(result.reason, str) and result.reason
        outcomes["rejected"] += 1
    else:
        assert isinstance(result, Accepted)
        check_accepted(base.proj, base.turn, result)
        outcomes["accepted"] += 1
        outcomes["with cells"] += bool(result.data["cells"])


@pytest.mark.slow
def test_decide_on_4000_random_patches(bases: list[Base]) -> None:
    fuzz_decide(bases, 4_000, derandomize=True)


@pytest.mark.long
def test_decide_on_200000_fresh_random_patches(bases: list[Base]) -> None:
    fuzz_decide(bases, 200_000, derandomize=False)


# --- Session.step on a real file -----------------------------------------------------------


def machine_session(folder: Path) -> Session:
    """The Session of one run of the machine: small budgets, so they are reached."""
    limits = Limits(pending_cells=5, context_bytes=12_000, inbox_messages=6)
    return Session.create(folder / "s.db", "fuzz", Settings(cwd=str(folder), limits=limits))


class StepMachine(RuleBasedStateMachine):
    """One Session per run; steps interleave with Executions finishing and messages."""

    where: ClassVar[Path] = Path()
    runs: ClassVar[int] = 0
    outcomes: ClassVar[Counter[str]] = Counter()

    def __init__(self) -> None:
        super().__init__()
        StepMachine.runs += 1
        self.dir = self.where / f"run-{self.runs}"
        self.dir.mkdir()
        self.session = machine_session(self.dir)
        self.ever: set[int] = set()

    def teardown(self) -> None:
        try:
            replayed = self.session.journal.replay()
            assert replayed.to_dict() == self.session.refresh().to_dict()
        finally:
            self.session.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        session = self.session
        turn = session.prepare_turn()
        patch = data.draw(patches(TurnState(turn["state"], session.proj.last_seq)))
        rows, state = journal_rows(session.path), session.state()
        result = session.step(turn["turn_id"], patch)
        after_rows, after = journal_rows(session.path), session.state()
        if isinstance(result, Rejection):
            StepMachine.outcomes["rejected"] += 1
            assert after_rows[:-1] == rows
            assert after_rows[-1]["kind"] == "patch_rejected"
            assert after == state
            assert session.prepare_turn() == turn
            return
        assert isinstance(result, Receipt)
        StepMachine.outcomes["accepted"] += 1
        new_ids = result.cell_ids
        first = state["runtime"]["next_cell_id"]
        assert after["revision"] == state["revision"] + 1 == result.revision
        assert new_ids == list(range(first, first + len(new_ids)))
        assert not self.ever & set(new_ids), "an id was reused"
        self.ever |= set(new_ids) | {c["id"] for c in state["cells"]}
        heads = [c["id"] for c in after["cells"]]
        assert len(heads) == len(set(heads))
        for cell in after["cells"]:
            if cell["id"] in new_ids and cell["kind"] in EXECUTABLE:
                assert after["runtime"]["cells"][str(cell["id"])]["phase"] == "queued"
        assert [e["kind"] for e in after_rows[len(rows) :]] == ["patch_accepted"]

    @rule(data=st.data())
    def step_again(self, data: st.DataObject) -> None:
        """Steps are the point: give them twice the weight of the other rules."""
        self.step(data)

    @rule(data=st.data())
    def an_execution_ends(self, data: st.DataObject) -> None:
        proj = self.session.refresh()
        pending = proj.pending()
        # An Owner applies committed Controls before it launches anything (docs/sessions.md),
        # and the Session refuses a launch while one waits: no Execution starts then.
        StepMachine.outcomes["other rules"] += 1
        if not pending or proj.controls:
            return
        cell_id = pending[0]["cell_id"]
        outcome = data.draw(st.sampled_from(["success", "success", "error", "unknown"]))
        if outcome == "unknown":
            record_unknown(self.session, cell_id)
        elif outcome == "success":
            succeed(self.session, cell_id)
        else:
            start_execution(self.session, cell_id)
            end_execution(self.session, cell_id, {"type": "error", "exit_code": 2})

    @rule(message_id=st.sampled_from(["a", "b", "c", "d"]), body=st.integers(0, 2))
    def a_message_arrives(self, message_id: str, body: int) -> None:
        StepMachine.outcomes["other rules"] += 1
        with contextlib.suppress(Rejected):  # a conflict or a full Inbox: nothing stored
            self.session.receive(message_id, "comment", {"body": body})

    @invariant()
    def revision_counts_accepted_patches(self) -> None:
        proj = self.session.refresh()
        assert proj.revision == proj.accepted_turns


def fuzz_steps(where: Path, examples: int, *, derandomize: bool) -> Counter[str]:
    StepMachine.where = where
    StepMachine.outcomes = Counter()
    run_state_machine_as_test(
        StepMachine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=30,
            deadline=None,
            database=None,
            derandomize=derandomize,
            suppress_health_check=list(HealthCheck),
        ),
    )
    # Hypothesis decides how long each run is (it may end one early), so the counts are
    # checked against the rules it did run: steps have half the rules' weight.
    steps = StepMachine.outcomes
    stepped = steps["accepted"] + steps["rejected"]
    assert stepped >= examples and stepped * 4 >= stepped + steps["other rules"], steps
    assert steps["accepted"] >= examples // 2 and steps["rejected"] >= examples // 2, steps
    return steps


@pytest.mark.slow
def test_session_step_on_about_300_random_patches(tmp_path: Path) -> None:
    fuzz_steps(tmp_path, 30, derandomize=True)


@pytest.mark.long
def test_session_step_on_many_fresh_random_patches(tmp_path: Path) -> None:
    fuzz_steps(tmp_path, 500, derandomize=False)
