"""The invariants every fault test checks on a workload directory after recovery.

Each check returns human-readable violations (empty when the Session keeps its promises):

- the Session opens with ``quick_check``; the derived projection equals a full replay; the
  Journal has no gap (nothing half-applied);
- every acknowledgement in ``acks.log`` is in the Journal (receive, timer), and every State
  shown to the model is exactly the one committed for its Turn (published only if committed);
- no Cell ran twice, and none ran without a committed launch authorisation (``effects.log``);
  a Cell whose result was committed ran exactly once; a cancelled-while-queued Cell never
  started;
- no Timer fired twice; no Inbox message was committed or consumed twice;
- at the end of a completed workload: the run succeeded, every Timer fired exactly once,
  every message (acknowledged ones included) was consumed exactly once, nothing is pending,
  and no Worker process of the Session is left.
"""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from typing import Any

import psutil

from rio_ci.core import events as ev
from rio_ci.core.projection import Projection
from rio_ci.core.reducer import apply
from rio_ci.run.survivors import TOKEN_VAR
from rio_ci.session.session import Session
from tests.faults.workload import DB, EXTERNAL, state_digest


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def acks(directory: Path) -> list[dict[str, Any]]:
    # A line torn by a SIGKILL mid-write cannot have been acknowledged: skip it.
    out = []
    for line in read_lines(directory / "acks.log"):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def effects(directory: Path) -> collections.Counter[int]:
    runs: collections.Counter[int] = collections.Counter()
    for line in read_lines(directory / "effects.log"):
        parts = line.split()
        if len(parts) == 3 and parts[0].isdigit():
            runs[int(parts[0])] += 1
    return runs


def events_of(directory: Path) -> list[dict[str, Any]]:
    session = Session.open(directory / DB)
    try:
        return list(session.events())
    finally:
        session.close()


def identity(directory: Path) -> tuple[str, int]:
    """The Session id and the seq of its last committed event."""
    session = Session.open(directory / DB)
    try:
        return str(session.proj.session["id"]), session.proj.last_seq
    finally:
        session.close()


def started_cells(directory: Path) -> set[int]:
    """Cells whose Execution is ``started`` in the Journal as it is now (read only)."""
    session = Session.open(directory / DB)
    try:
        return {e["cell_id"] for e in session.proj.pending() if e["phase"] == "started"}
    finally:
        session.close()


def message_of(event: dict[str, Any]) -> dict[str, Any] | None:
    """The Inbox message an event commits, if any (its id is all these checks need)."""
    return ev.message_of(event["kind"], event)


def turn_states(events: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Each Turn's committed State, as a fold of the Journal up to its event renders it
    (the event stores what identifies the State, not a copy)."""
    proj, found = Projection(), []
    for event in events:
        data = {k: v for k, v in event.items() if k not in ("seq", "kind", "at")}
        apply(proj, event["seq"], event["kind"], data)
        if event["kind"] == "turn_prepared" and proj.turn is not None:
            found.append((event["turn_id"], proj.turn["state"]))
    return found


def violations(directory: Path, *, final: bool) -> list[str]:
    found: list[str] = []
    try:
        session = Session.open(directory / DB, verify=True)
    except Exception as exc:  # any failure to open is itself the violation
        return [f"the Session does not open: {exc}"]
    try:
        if session.journal.replay().to_dict() != session.proj.to_dict():
            found.append("the derived projection differs from a full replay")
        events = list(session.events())
        proj = session.proj
    finally:
        session.close()
    if [e["seq"] for e in events] != list(range(1, len(events) + 1)):
        found.append("the Journal has a gap")
    found += _lost_acknowledgements(directory, events)
    found += _execution_violations(directory, events)
    found += _timer_and_inbox_violations(events)
    if final:
        found += _unfinished_business(proj, events)
    return found


def _lost_acknowledgements(directory: Path, events: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    by_seq = {e["seq"]: e for e in events}
    turns = {turn_id: state_digest(state) for turn_id, state in turn_states(events)}
    timers_set = collections.Counter(e["id"] for e in events if e["kind"] == "timer_set")
    for ack in acks(directory):
        if ack["kind"] == "receive":
            event = by_seq.get(ack["seq"])
            if (
                not event
                or event["kind"] != "message_received"
                or event["message"]["id"] != ack["id"]
            ):
                found.append(f"acknowledged message {ack['id']} (seq {ack['seq']}) is lost")
        elif ack["kind"] == "timer" and not timers_set[ack["id"]]:
            found.append(f"acknowledged Timer {ack['id']} is lost")
        elif ack["kind"] == "seen":
            found += _seen_problems(ack, turns)
    return found


def _seen_problems(ack: dict[str, Any], turns: dict[str, str]) -> list[str]:
    if ack["turn_id"] not in turns:
        return [f"the model was shown Turn {ack['turn_id']}, which is not in the Journal"]
    if turns[ack["turn_id"]] != ack["state"]:
        return [
            f"the model was shown a State for Turn {ack['turn_id']} that "
            "differs from the one committed"
        ]
    return []


def _execution_violations(directory: Path, events: list[dict[str, Any]]) -> list[str]:
    """Executions against the external side-effect log: at most one run per Cell."""
    found: list[str] = []
    started = collections.Counter(e["cell_id"] for e in events if e["kind"] == "execution_started")
    results = {e["cell_id"]: e["result"] for e in events if e["kind"] == "execution_finished"}
    finishes = collections.Counter(
        e["cell_id"] for e in events if e["kind"] == "execution_finished"
    )
    runs = effects(directory)
    for cell, n in sorted(runs.items()):
        if n > 1:
            found.append(f"Cell {cell} ran {n} times")
        if not started[cell]:
            found.append(f"Cell {cell} ran without a committed launch authorisation")
    found += [
        f"Cell {c} was authorised to launch {n} times" for c, n in sorted(started.items()) if n > 1
    ]
    found += [f"Cell {c} has {n} results" for c, n in sorted(finishes.items()) if n > 1]
    for cell, result in sorted(results.items()):
        kind = result["type"]
        if kind in ("success", "error") and result.get("exit_code") is not None and runs[cell] != 1:
            found.append(f"Cell {cell} has a committed {kind} but ran {runs[cell]} times")
        if kind == "cancelled" and (runs[cell] or started[cell]):
            found.append(f"Cell {cell} was cancelled before launch but started")
    queued_cancels = _cancelled_while_queued(events)
    for cell in sorted(queued_cancels & set(started)):
        found.append(f"Cell {cell} started although a cancel was committed while it was queued")
    return found


def _timer_and_inbox_violations(events: list[dict[str, Any]]) -> list[str]:
    timers_set = collections.Counter(e["id"] for e in events if e["kind"] == "timer_set")
    fired = collections.Counter(e["id"] for e in events if e["kind"] == "timer_fired")
    found = [f"Timer {t} fired {n} times" for t, n in sorted(fired.items()) if n > 1]
    found += [f"Timer {t} fired without being set" for t in sorted(fired) if not timers_set[t]]
    delivered = collections.Counter(m["id"] for e in events if (m := message_of(e)))
    found += [f"message {m} committed {n} times" for m, n in sorted(delivered.items()) if n > 1]
    consumed = _consumed(events)
    found += [f"message {m} consumed {n} times" for m, n in sorted(consumed.items()) if n > 1]
    found += [
        f"message {m} consumed but never received" for m in sorted(consumed) if not delivered[m]
    ]
    return found


def _consumed(events: list[dict[str, Any]]) -> collections.Counter[str]:
    return collections.Counter(
        m for e in events if e["kind"] == "patch_accepted" for m in e["consumed"]
    )


def _unfinished_business(proj: Projection, events: list[dict[str, Any]]) -> list[str]:
    """What must hold once the workload has run to its end after the last recovery."""
    found: list[str] = []
    ended = proj.ended or {}
    if ended.get("result") != "success":
        found.append(f"the workload did not succeed after recovery: {ended or 'not ended'}")
    timers_set = {e["id"] for e in events if e["kind"] == "timer_set"}
    fired = {e["id"] for e in events if e["kind"] == "timer_fired"}
    delivered = {m["id"] for e in events if (m := message_of(e))}
    consumed = _consumed(events)
    found += [f"Timer {t} set but never fired" for t in sorted(timers_set - fired)]
    found += [f"message {m} never consumed" for m in sorted(delivered) if not consumed[m]]
    found += [f"external message {m} never received" for m in EXTERNAL if m not in delivered]
    if proj.pending():
        found.append(f"Executions still pending: {[e['cell_id'] for e in proj.pending()]}")
    if leftovers := leftover_workers(str(proj.session["id"])):
        found.append(f"Worker processes left behind: {leftovers}")
    return found


def _cancelled_while_queued(events: list[dict[str, Any]]) -> set[int]:
    """Targets of cancel Controls that were committed while the target had not started."""
    started: set[int] = set()
    out: set[int] = set()
    for event in events:
        if event["kind"] == "execution_started":
            started.add(event["cell_id"])
        elif event["kind"] == "patch_accepted":
            for control in event["controls"]:
                if control["role"] == "cancel" and control["target_cell_id"] not in started:
                    out.add(control["target_cell_id"])
    return out


def leftover_workers(session_id: str) -> list[int]:
    """Live processes carrying a Worker token of this Session."""
    prefix = f"rio-{session_id}-"
    pids = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if (
                proc.pid != os.getpid()
                and proc.status() != psutil.STATUS_ZOMBIE
                and proc.environ().get(TOKEN_VAR, "").startswith(prefix)
            ):
                pids.append(proc.pid)
        except psutil.Error:
            continue
    return pids


def landing(directory: Path) -> str:
    """Where a kill landed, read from what the Journal holds right after it."""
    session = Session.open(directory / DB)
    try:
        proj = session.proj
        last = next(session.events(after=proj.last_seq - 1), {"kind": "none"})
        started = [e for e in proj.pending() if e["phase"] == "started"]
    finally:
        session.close()
    if proj.ended:
        return "after the run ended"
    if started:
        return (
            "while a script ran (Worker registered)"
            if started[0]["identity"]
            else "between launch authorisation and Worker registration"
        )
    if proj.turn is not None:
        return "during a model round (Turn open)"
    return f"between commits, after {last['kind']}"
