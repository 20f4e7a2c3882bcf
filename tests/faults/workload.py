"""The fault suite's workload: one mixed run of the real round loop, Owner, Inbox and Timers,
with everything the checks need recorded *outside* SQLite.

    python -m tests.faults.workload run DIR      the driver: Owner + round loop + Inbox client
    python -m tests.faults.workload recover DIR  two Owner recoveries in a row; prints counts

``DIR`` holds ``session.db`` (made by :func:`setup`), ``effect.py`` (the script every ``cmd``
Cell runs), and two append-only, fsynced logs the Session never sees:

- ``effects.log``: one line ``CELL_ID TAG PID`` written by a script the moment it starts,
  so it shows how often each Cell really ran;
- ``acks.log``: one JSON line per acknowledgement a caller received — ``receive`` returned,
  ``timer()`` returned inside a Cell, the model was shown a Turn's State (its digest).
  Everything acknowledged must survive any crash, and a State shown must be the one the
  Journal committed for that Turn.

The driver reads ``RIO_CRASH_AT`` once, when ``rio_ci.faults.crashpoints`` is imported, and
removes it from its environment, so only the driver itself can hit a crash point (never a
Worker). With ``RIO_FAULT_COUNT=FILE`` it writes how often it passed each crash point (observed
with ``sys.setprofile``; nothing of rio_ci is replaced).

The model is deterministic and adaptive: it reads only its Turn's State, like an agent would,
so a run resumed after any crash carries on to a successful conclusion. Its plan: a ``code``
Cell (``uv run``) that sets a Timer through ``rio_ci.api``; two quick ``cmd`` Cells; a slow one
that prints for a while; a Cell cancelled in the patch that adds it; a failing one; then the
conclusion (with a validator). An ``UnknownExecution`` is investigated (an inspection Cell)
and resolved with evidence first.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.kit import Patch

DB = "session.db"
EXTERNAL = ("ext-0", "ext-1", "ext-2")  # messages the Inbox client delivers
TIMER_ID = "t1"
EFFECT = '''"""Append one line to effects.log, then behave as the tag says."""
import os
import sys
import time

tag = sys.argv[1]
fd = os.open("effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, f"{os.environ.get('RIO_CELL_ID')} {tag} {os.getpid()}\\n".encode())
os.fsync(fd)
os.close(fd)
if tag == "slow":
    for i in range(6):
        print("tick", i, flush=True)
        time.sleep(0.1)
elif tag == "wait":
    time.sleep(0.2)
print("done", tag, flush=True)
sys.exit(1 if tag == "fail" else 0)
'''
CODE = """# /// script
# dependencies = []
# ///
import json
import os
import time

from rio_ci.api import timer

fd = os.open("effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, f"{os.environ.get('RIO_CELL_ID')} code {os.getpid()}\\n".encode())
os.fsync(fd)
os.close(fd)
print("setting a timer", flush=True)
ack = timer("TIMER_ID", time.time() + 0.3, {"from": "code"})
fd = os.open("acks.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, (json.dumps({"kind": "timer", "id": "TIMER_ID", "seq": ack["seq"]}) + "\\n").encode())
os.fsync(fd)
os.close(fd)
time.sleep(0.2)
print("timer committed", flush=True)
""".replace("TIMER_ID", TIMER_ID)


def state_digest(state: Any) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def append_line(path: Path, text: str) -> None:
    """One atomic, fsynced append (O_APPEND): survives a SIGKILL of the writer."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (text + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def setup(directory: Path) -> Path:
    """A fresh workload directory with its Session; returns the Session path."""
    from rio_ci.core.limits import Limits
    from rio_ci.session.session import Session
    from rio_ci.session.settings import Settings

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "effect.py").write_text(EFFECT)
    db = directory / DB
    session = Session.create(
        db,
        "fault workload",
        Settings(
            cwd=str(directory),
            validators=((sys.executable, "-c", "pass"),),
            limits=Limits(flush_seconds=0.05, execution_seconds=60, rounds=60),
        ),
    )
    session.close()
    return db


# --- the model -----------------------------------------------------------------------------


def tag_of(cell: dict[str, Any]) -> str:
    if cell["kind"] == "cmd":
        argv = cell["argv"]
        return str(argv[2]) if len(argv) >= 3 and argv[1] == "effect.py" else "cmd"
    if cell["kind"] == "code":
        return "code"
    return str(cell.get("role") or ("seen" if cell["text"].startswith("seen:") else "note"))


class Plan:
    """Builds one patch of additions on a Turn's State, ids and revision test included."""

    def __init__(self, state: dict[str, Any]):
        self.patch = Patch(state)
        self.work = False

    @property
    def ops(self) -> list[dict[str, Any]]:
        return self.patch.build()

    def add(self, cell: dict[str, Any]) -> int:
        """Add ``cell``; returns its id."""
        self.patch.add(cell)
        self.work = self.work or cell["kind"] in ("cmd", "code")
        return self.patch.next_id - 1

    def effect(self, tag: str) -> int:
        return self.add({"kind": "cmd", "argv": [sys.executable, "effect.py", tag]})


def decide(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The next patch, from the State alone."""
    runtime = state["runtime"]
    inbox = runtime["inbox"]
    plan = Plan(state)
    if inbox:
        plan.add({"kind": "note", "text": "seen: " + " ".join(m["id"] for m in inbox)})
    unresolved = _unresolved(runtime["cells"])
    if unresolved:
        _investigate(plan, unresolved[0], inbox)
    elif _next_step(plan, state):
        return plan.ops
    if not plan.work:
        plan.effect("wait")  # never leave the Session idle without a wake-up source
    return plan.ops


def _unresolved(facts: dict[str, Any]) -> list[int]:
    return sorted(
        int(k)
        for k, v in facts.items()
        if (v["result"] or {}).get("type") == "UnknownExecution" and v["resolved_by"] is None
    )


def _investigate(plan: Plan, target: int, inbox: list[dict[str, Any]]) -> None:
    """Resolve ``target`` citing what this Turn delivered, or look first if nothing was."""
    evidence = [f"session:event:{m['seq']}" for m in inbox if m["id"] != f"execution:{target}"]
    if not evidence:
        plan.effect("inspect")
        return
    plan.add(
        {
            "kind": "note",
            "role": "resolution",
            "target_cell_id": target,
            "evidence_refs": evidence,
            "text": "inspected; carrying on",
        }
    )


def _next_step(plan: Plan, state: dict[str, Any]) -> bool:
    """Add the workload's next step to ``plan``; True when that step is the conclusion."""
    cells, inbox, facts = state["cells"], state["runtime"]["inbox"], state["runtime"]["cells"]
    seen = {m["id"] for m in inbox}
    for cell in cells:
        if tag_of(cell) == "seen":
            seen.update(cell["text"].split()[1:])
    done = {tag_of(c) for c in cells}
    rejected = [m for m in inbox if m["kind"] == "control_rejected"]
    if "code" not in done:
        plan.add({"kind": "code", "runtime": "python", "source": CODE})
    elif "a" not in done:
        plan.effect("a")
        plan.effect("b")
    elif "slow" not in done:
        plan.effect("slow")
    elif "doomed" not in done:
        doomed = plan.effect("doomed")
        plan.add({"kind": "note", "role": "cancel", "target_cell_id": doomed, "text": "never mind"})
    elif "fail" not in done:
        plan.effect("fail")
    elif not set(EXTERNAL) <= seen or any("Timers" in m["payload"]["reason"] for m in rejected):
        plan.effect("wait")
    elif _timer_set(cells, facts) and f"timer:{TIMER_ID}" not in seen:
        plan.effect("wait")  # the Timer is known to exist: wait for it
    else:
        plan.add(
            {"kind": "note", "role": "conclusion", "result": "success", "text": "every step done"}
        )
        return True
    return False


def _timer_set(cells: list[dict[str, Any]], facts: dict[str, Any]) -> bool:
    """True when the Timer-setting Cell is known to have finished successfully."""
    code = next((c["id"] for c in cells if c["kind"] == "code"), None)
    result = (facts.get(str(code)) or {}).get("result") or {}
    return bool(result.get("type") == "success")


class AdaptiveModel:
    """A Model (rio_ci.model.base.Model) that answers from the State; no network."""

    def __init__(self, directory: Path):
        self.name = "fault-workload"
        self.acks = directory / "acks.log"

    def price(self) -> Any:
        from rio_ci.model.base import Price

        return Price(0.0, 0.0, 0.0, 0.0)

    def cost(self, usage: Any) -> float:
        return 0.0

    def ask(self, request: Any) -> Any:
        from rio_ci.model.base import ModelReply, Usage

        state = request.state
        append_line(
            self.acks,
            json.dumps({"kind": "seen", "turn_id": request.turn_id, "state": state_digest(state)}),
        )
        patch = decide(state)
        return ModelReply(patch=patch, usage=Usage(10, 10, cost_usd=0.0), raw={"patch": patch})


# --- the driver ----------------------------------------------------------------------------


def send_external(db: Path, directory: Path, stop: threading.Event) -> None:
    """The Inbox client: another connection committing external messages while the Owner
    works. Each acknowledgement is logged only after ``receive`` returned."""
    from rio_ci.core.errors import Rejected, RunEnded
    from rio_ci.session.session import Session

    session = Session.open(db)
    try:
        for message_id in EXTERNAL:
            while not stop.is_set():
                try:
                    ack = session.receive(message_id, "comment", {"body": message_id})
                except RunEnded:
                    return
                except Rejected:  # a full Inbox: back-pressure, retry
                    time.sleep(0.05)
                    continue
                append_line(
                    directory / "acks.log",
                    json.dumps({"kind": "receive", "id": message_id, "seq": ack["seq"]}),
                )
                break
            time.sleep(0.1)
    finally:
        session.close()


def _count_crash_points(out: Path) -> None:
    """Count passes through crash_point by name, without replacing anything."""
    import atexit

    from rio_ci.faults import crashpoints

    code = crashpoints.crash_point.__code__
    counts: collections.Counter[str] = collections.Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code:
            counts[frame.f_locals["name"]] += 1

    sys.setprofile(profile)
    threading.setprofile(profile)
    atexit.register(lambda: out.write_text(json.dumps(dict(counts))))


def run(directory: Path) -> int:
    import rio_ci.faults.crashpoints  # noqa: F401  (reads RIO_CRASH_AT now)
    from rio_ci.rounds.loop import RoundLoop
    from rio_ci.run.owner import Owner

    os.environ.pop("RIO_CRASH_AT", None)  # Workers and validators never crash on purpose
    count = os.environ.pop("RIO_FAULT_COUNT", None)
    if count:
        _count_crash_points(Path(count))
    db = directory / DB
    owner = Owner(str(db))
    stop = threading.Event()
    client = threading.Thread(target=send_external, args=(db, directory, stop), daemon=True)
    client.start()
    status = "deadline"
    try:
        loop = RoundLoop(owner, AdaptiveModel(directory))
        give_up = time.monotonic() + 120
        while time.monotonic() < give_up:
            outcome = loop.run(time.monotonic() + 20)
            status = outcome.status
            if status in ("succeeded", "failed", "interrupted"):
                break
        stop.set()
        client.join(10)
        owner.session.wal_checkpoint()
    finally:
        owner.close()
    print(json.dumps({"status": status, "ran": owner.ran}), flush=True)
    return 0 if status == "succeeded" else 1


def recover_twice(directory: Path) -> int:
    """docs/sessions.md: recovery, then recovery again by a new Owner, which must commit nothing.
    Exit 3 with ``{"failed_closed": reason}`` when recovery refuses to go on (docs/sessions.md: a
    lost
    leader with a surviving group, a recycled pid, processes that will not die)."""
    from rio_ci.core.errors import RecoveryError
    from rio_ci.run.owner import Owner

    counts = []
    for _ in range(2):
        owner = Owner(str(directory / DB))
        try:
            before = owner.session.proj.last_seq
            owner.recover()
            counts.append(owner.session.refresh().last_seq - before)
        except RecoveryError as exc:
            print(json.dumps({"failed_closed": str(exc)}), flush=True)
            return 3
        finally:
            owner.close()
    print(json.dumps({"first": counts[0], "second": counts[1]}), flush=True)
    return 0


def main(argv: list[str]) -> int:
    verb, directory = argv
    if verb == "run":
        return run(Path(directory))
    if verb == "recover":
        return recover_twice(Path(directory))
    raise SystemExit(f"unknown verb {verb}")


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        raise SystemExit(main(sys.argv[1:]))
