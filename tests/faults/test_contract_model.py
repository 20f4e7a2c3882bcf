"""A hypothesis state machine over the public operations — receive, turn, step, work, kill,
reopen — checked after every operation against a small reference model of the contract
(docs/patches.md, docs/sessions.md): revision, Cells, Executions and their results, the Inbox in
receipt
order, the pause, and how often each Cell really ran (an external side-effect log).

``kill`` SIGKILLs a real ``rio-ci work`` process while it runs a slow Cell, leaving the
Worker alive; the next ``work`` must stop it and record an ``UnknownExecution``.
"""

from __future__ import annotations

import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rio_ci.core.admission import Rejection
from rio_ci.core.errors import Rejected
from rio_ci.run.owner import Owner
from rio_ci.session.session import Receipt, Session
from rio_ci.session.settings import Settings
from tests.faults import checks, runner
from tests.kit import cli_env, until

SCRIPT = """import os, sys, time
fd = os.open("effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, f"{os.environ['RIO_CELL_ID']} {sys.argv[1]} {os.getpid()}\\n".encode())
os.fsync(fd)
os.close(fd)
if sys.argv[1] == "slow":
    time.sleep(30)
sys.exit(1 if sys.argv[1] == "fail" else 0)
"""
PENDING_CELLS = 32  # the default limit


@dataclass
class Execution:
    tag: str
    phase: str = "queued"
    result: str | None = None
    resolved: bool = False


@dataclass
class Reference:
    """What the contract says the Session holds."""

    revision: int = 0
    next_id: int = 1
    heads: list[int] = field(default_factory=list)
    tags: dict[int, str] = field(default_factory=dict)  # cell id -> ok|fail|slow|note|...
    executions: dict[int, Execution] = field(default_factory=dict)
    inbox: list[str] = field(default_factory=list)
    received: dict[str, int] = field(default_factory=dict)
    turn: dict[str, Any] | None = None  # {turn_id, delivered}
    pause: str | None = None
    cancels: list[int] = field(default_factory=list)  # committed, not yet applied
    runs: collections.Counter[int] = field(default_factory=collections.Counter)

    def finish(self, cell: int, result: str) -> None:
        self.executions[cell].phase, self.executions[cell].result = "finished", result
        self.inbox.append(f"execution:{cell}")
        if result in ("error", "UnknownExecution"):
            self.pause = f"execution:{cell}"

    def before_dispatch(self) -> None:
        """Recovery, then Controls (docs/sessions.md steps 4-5)."""
        for cell in sorted(c for c, e in self.executions.items() if e.phase == "started"):
            self.finish(cell, "UnknownExecution")
        for target in self.cancels:
            if self.executions[target].phase == "queued":
                self.finish(target, "cancelled")
        self.cancels = []

    def queued(self) -> list[int]:
        return sorted(c for c, e in self.executions.items() if e.phase == "queued")

    def dispatch_order(self) -> list[int]:
        """The Cells a ``work`` would run after recovery and Controls, up to a pause."""
        trial = Reference(
            executions={c: Execution(e.tag, e.phase, e.result) for c, e in self.executions.items()},
            pause=self.pause,
            cancels=list(self.cancels),
        )
        trial.before_dispatch()
        order = []
        while trial.pause is None and trial.queued():
            cell = trial.queued()[0]
            order.append(cell)
            trial.finish(cell, "error" if trial.executions[cell].tag == "fail" else "success")
        return order

    def unresolved(self) -> list[int]:
        return sorted(
            c
            for c, e in self.executions.items()
            if e.result == "UnknownExecution" and not e.resolved
        )

    def visible(self) -> dict[str, tuple[str, str | None]]:
        shown = {c for c in self.executions if c in self.heads}
        shown |= {c for c, e in self.executions.items() if e.phase != "finished"}
        shown |= set(self.unresolved())
        return {
            str(c): (self.executions[c].phase, self.executions[c].result) for c in sorted(shown)
        }


class ContractMachine(RuleBasedStateMachine):
    base: ClassVar[Path]
    calls: ClassVar[collections.Counter[str]] = collections.Counter()

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(dir=self.base))
        (self.dir / "effect.py").write_text(SCRIPT)
        self.db = self.dir / "s.db"
        self.session = Session.create(self.db, "contract", Settings(cwd=str(self.dir)))
        self.session_id = str(self.session.proj.session["id"])
        self.ref = Reference()
        self.last_accepted: tuple[str, list[dict[str, Any]], Receipt] | None = None

    def teardown(self) -> None:
        self.session.close()
        for pid in checks.leftover_workers(self.session_id):
            runner.kill_tree(pid)
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- receive and turn ---------------------------------------------------------------

    @rule(message=st.sampled_from(["a", "b", "c"]), payload=st.integers(0, 1))
    def receive(self, message: str, payload: int) -> None:
        self.calls["receive"] += 1
        known = self.ref.received.get(message)
        if known is not None and known != payload:
            with pytest.raises(Rejected):
                self.session.receive(message, "comment", {"v": payload})
            return
        ack = self.session.receive(message, "comment", {"v": payload})
        assert ack["duplicate"] == (known is not None)
        if known is None:
            self.ref.received[message] = payload
            self.ref.inbox.append(message)

    @rule()
    def turn(self) -> None:
        self.calls["turn"] += 1
        turn = self.session.prepare_turn()
        if self.ref.turn is not None:
            assert turn["turn_id"] == self.ref.turn["turn_id"]  # the open Turn, unchanged
        else:
            assert turn["delivered"] == self.ref.inbox
            self.ref.turn = {"turn_id": turn["turn_id"], "delivered": list(self.ref.inbox)}
        assert turn["state"]["revision"] == self.ref.revision
        assert [c["id"] for c in turn["state"]["cells"]] == self.ref.heads

    # --- step -----------------------------------------------------------------------------

    def submit(
        self,
        ops: list[dict[str, Any]],
        valid: bool,
        new: list[tuple[int, str]],
        heads: list[int],
        cancel: int | None = None,
        resolve: int | None = None,
    ) -> None:
        """Step ``ops`` on the open Turn; if ``valid``, the State must become ``heads``."""
        ref = self.ref
        assert ref.turn is not None
        head = [{"op": "test", "path": "/revision", "value": ref.revision}]
        outstanding = (
            sum(e.phase != "finished" for e in ref.executions.values())
            + len(ref.unresolved())
            + sum(t in ("ok", "fail", "slow") for _, t in new)
        )
        valid = valid and outstanding <= PENDING_CELLS
        decision = self.session.step(ref.turn["turn_id"], head + ops)
        if not valid:
            assert isinstance(decision, Rejection), decision
            return
        assert isinstance(decision, Receipt), decision
        assert decision.revision == ref.revision + 1
        assert decision.cell_ids == [cell for cell, _ in new]
        ref.revision += 1
        ref.next_id += len(new)
        ref.heads = heads
        for cell, tag in new:
            ref.tags[cell] = tag
            if tag in ("ok", "fail", "slow"):
                ref.executions[cell] = Execution(tag)
        consumed = set(ref.turn["delivered"])
        ref.inbox = [m for m in ref.inbox if m not in consumed]
        if ref.pause in consumed:
            ref.pause = None
        if cancel is not None:
            ref.cancels.append(cancel)
        if resolve is not None:
            ref.executions[resolve].resolved = True
        self.last_accepted = (ref.turn["turn_id"], head + ops, decision)
        ref.turn = None

    def cell(self, cell_id: int, tag: str) -> dict[str, Any]:
        if tag in ("ok", "fail", "slow"):
            return {
                "id": cell_id,
                "previous_id": None,
                "kind": "cmd",
                "argv": [sys.executable, "effect.py", tag],
            }
        return {"id": cell_id, "previous_id": None, "kind": "note", "text": tag}

    @rule(
        kind=st.sampled_from(
            ["add", "add", "add", "replace", "remove", "stale", "cancel", "resolve", "again"]
        ),
        tags=st.lists(
            st.sampled_from(["ok", "ok", "fail", "slow", "note"]), min_size=1, max_size=3
        ),
        pick=st.integers(0, 1000),
    )
    def step(self, kind: str, tags: list[str], pick: int) -> None:
        """A patch of one kind on the open Turn (opening one first if none is open)."""
        self.calls[f"step {kind}"] += 1
        if kind == "again":
            if self.last_accepted is not None:
                turn_id, ops, receipt = self.last_accepted
                assert self.session.step(turn_id, ops) == receipt  # nothing committed
            return
        if self.ref.turn is None:
            self.turn()
        ref = self.ref
        cell = ref.next_id
        if kind == "add":
            new = [(cell + i, tag) for i, tag in enumerate(tags)]
            ops = [{"op": "add", "path": "/cells/-", "value": self.cell(c, t)} for c, t in new]
            self.submit(ops, True, new, ref.heads + [c for c, _ in new])
        elif kind == "replace" and ref.heads:
            index = pick % len(ref.heads)
            old = ref.heads[index]
            value = {**self.cell(cell, "note"), "previous_id": old}
            busy = old in ref.executions and ref.executions[old].phase != "finished"
            heads = list(ref.heads)
            heads[index] = cell
            self.submit(
                [{"op": "replace", "path": f"/cells/{index}", "value": value}],
                not busy,
                [(cell, "note")],
                heads,
            )
        elif kind == "remove" and ref.heads:
            index = pick % len(ref.heads)
            self.submit(
                [{"op": "remove", "path": f"/cells/{index}"}],
                True,
                [],
                ref.heads[:index] + ref.heads[index + 1 :],
            )
        elif kind == "cancel" and ref.executions:
            target = sorted(ref.executions)[pick % len(ref.executions)]
            value = {**self.cell(cell, "cancel"), "role": "cancel", "target_cell_id": target}
            self.submit(
                [{"op": "add", "path": "/cells/-", "value": value}],
                True,
                [(cell, "cancel")],
                [*ref.heads, cell],
                cancel=target,
            )
        elif kind == "resolve" and ref.unresolved():
            target = ref.unresolved()[0]
            open_turn = self.session.proj.turn
            assert open_turn is not None
            evidence = [
                f"session:event:{m['seq']}"
                for m in open_turn["state"]["runtime"]["inbox"]
                if m["id"] != f"execution:{target}"
            ]
            own = self.session.find(str(target), "execution_finished")
            assert own is not None
            value = {
                **self.cell(cell, "resolved"),
                "role": "resolution",
                "target_cell_id": target,
                "evidence_refs": evidence or [f"session:event:{own['seq']}"],
            }
            self.submit(
                [{"op": "add", "path": "/cells/-", "value": value}],
                bool(evidence),
                [(cell, "resolved")],
                [*ref.heads, cell],
                resolve=target,
            )
        else:  # stale, or nothing to act on: a patch testing the wrong revision
            ops = [{"op": "test", "path": "/revision", "value": ref.revision + 7}]
            self.submit(ops, False, [], ref.heads)

    # --- the Owner ----------------------------------------------------------------------

    @precondition(
        lambda self: all(self.ref.executions[c].tag != "slow" for c in self.ref.dispatch_order())
    )
    @rule()
    def work(self) -> None:
        self.calls["work"] += 1
        expected = self.ref.dispatch_order()
        owner = Owner(str(self.db))
        try:
            status = owner.work(timeout=60)
        finally:
            owner.close()
        assert status["ran"] == expected
        self.ref.before_dispatch()
        for cell in expected:
            self.ref.runs[cell] += 1
            self.ref.finish(cell, "error" if self.ref.executions[cell].tag == "fail" else "success")
        assert checks.leftover_workers(self.session_id) == []

    @precondition(
        lambda self: (
            self.ref.dispatch_order()[:1]
            and self.ref.executions[self.ref.dispatch_order()[0]].tag == "slow"
        )
    )
    @rule(tree=st.booleans())
    def kill(self, tree: bool) -> None:
        self.calls["kill"] += 1
        slow = self.ref.dispatch_order()[0]
        proc = subprocess.Popen(
            [sys.executable, "-m", "rio_ci", "work", str(self.db)],
            cwd=self.dir,
            env=cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            until(lambda: checks.effects(self.dir)[slow] == 1, 30)
        finally:
            if tree:
                runner.kill_tree(proc.pid)
            else:
                os.kill(proc.pid, signal.SIGKILL)  # the Worker survives its Owner
            proc.wait()
        self.ref.before_dispatch()
        self.ref.executions[slow].phase = "started"
        self.ref.runs[slow] += 1

    @rule()
    def reopen(self) -> None:
        self.calls["reopen"] += 1
        self.session.close()
        self.session = Session.open(self.db, verify=True)

    # --- the contract, after every operation ---------------------------------------------

    @invariant()
    def matches_the_reference(self) -> None:
        ref = self.ref
        self.calls["checks"] += 1
        state = self.session.state()
        runtime = state["runtime"]
        assert state["revision"] == ref.revision
        assert [c["id"] for c in state["cells"]] == ref.heads
        assert runtime["next_cell_id"] == ref.next_id
        assert [m["id"] for m in runtime["inbox"]] == ref.inbox
        assert runtime["pause"] == ref.pause
        shown = {
            k: (v["phase"], (v["result"] or {}).get("type")) for k, v in runtime["cells"].items()
        }
        assert shown == ref.visible()
        assert checks.effects(self.dir) == +ref.runs
        assert self.session.journal.replay().to_dict() == self.session.proj.to_dict()


def test_public_operations_follow_the_reference_model(
    disk_path: Path, long_run: bool, fault_report: dict[str, Any]
) -> None:
    ContractMachine.base = disk_path
    examples, steps = (400, 50) if long_run else (80, 30)
    ContractMachine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    ContractMachine.TestCase().runTest()
    fault_report["state machine"] = {
        "examples": examples,
        "max_steps": steps,
        "operations": dict(sorted(ContractMachine.calls.items())),
    }
