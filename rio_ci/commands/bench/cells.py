"""Execution figures: a trivial Cell through an Owner against the same work done bare, the
write transactions of a Cell that prints nothing, Inbox to Turn, recovery and an idle Owner."""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil

from rio_ci.commands.bench.baseline import BareLaunch
from rio_ci.commands.bench.common import (
    CMD,
    CODE,
    SCRIPT,
    accept,
    cli,
    ms,
    patch_for,
    pct,
    token_holders,
    wait_for,
)
from rio_ci.run.confinement.settings import ConfinementSettings
from rio_ci.run.environment import uv_binary
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings


def measure_cells(root: Path, quick: bool, cell_user: str | None = None) -> dict[str, Any]:
    """A trivial code and cmd Cell through an Owner (queued → result committed) vs the
    same script with bare ``uv run --script`` and the same argv as a bare subprocess; and
    the floor under the ``cmd`` Cell (``BareLaunch``) against the same bare subprocess.
    With ``cell_user`` the Cells (and the floor's) run as that user where rio-ci is root."""
    (work := root / "work").mkdir()
    db = root / "cells.sqlite3"
    Session.create(db, "bench: per-Execution overhead", Settings(cwd=str(work))).close()
    (script := root / "script.py").write_text(SCRIPT)
    uv_argv = [uv_binary(), "run", "--quiet", "--script", str(script)]
    owner = Owner(str(db), confinement=ConfinementSettings(cell_user))
    owner.recover()
    head: list[int] = []

    def through_owner(cell: dict[str, Any]) -> float:
        head[:] = accept(owner.session, [cell], replace=bool(head))
        started = time.perf_counter()
        while (execution := owner.session.proj.executions[str(head[0])])["phase"] != "finished":
            owner.tick(wait=0.05)
        elapsed = time.perf_counter() - started
        if execution["result"] is None or execution["result"]["type"] != "success":
            raise RuntimeError(f"bench: a trivial Cell did not succeed: {execution['result']}")
        return elapsed

    def bare(argv: list[str]) -> float:
        started = time.perf_counter()
        subprocess.run(argv, cwd=work, capture_output=True, check=True)
        return time.perf_counter() - started

    cells_user = owner.confinement.user
    floor = BareLaunch(root / "floor.sqlite3", work, cells_user)
    try:
        out: dict[str, Any] = {
            "cell_user": cells_user.name if cells_user else None,
            "code_cell_ms_owner_first": ms(through_owner(CODE)),
            "code_cell_ms_uv_first": ms(bare(uv_argv)),
        }  # the first of each: uv builds the script's venv
        pairs: dict[str, list[tuple[float, float]]] = {"code": [], "cmd": []}
        floors: list[float] = []
        for i in range(-2, 12 if quick else 40):  # two rounds of warm-up
            if i == 0:
                pairs, floors = {"code": [], "cmd": []}, []
            pairs["code"].append((through_owner(CODE), bare(uv_argv)))
            for _ in range(2):
                pairs["cmd"].append((through_owner(CMD), bare(["true"])))
                floors.append(floor.run(["true"]) - pairs["cmd"][-1][1])
    finally:
        owner.close()
        floor.close()
    for kind, baseline in (("code", "uv"), ("cmd", "bare")):
        out[f"{kind}_cell_ms_owner"] = ms(statistics.median(a for a, _ in pairs[kind]))
        out[f"{kind}_cell_ms_{baseline}"] = ms(statistics.median(b for _, b in pairs[kind]))
    out["ratio_code_cell_vs_uv"] = round(statistics.median(a / b for a, b in pairs["code"]), 3)
    out["overhead_ms_cmd_cell"] = ms(statistics.median(a - b for a, b in pairs["cmd"]))
    out["overhead_ms_cmd_cell_floor"] = ms(statistics.median(floors))
    # what rio_ci adds to a cmd Cell against what the launch protocol alone costs (the goal)
    out["ratio_cmd_cell_vs_floor"] = round(
        out["overhead_ms_cmd_cell"] / max(out["overhead_ms_cmd_cell_floor"], 0.001), 3
    )
    out["cell_pairs"] = {kind: len(samples) for kind, samples in pairs.items()}
    return out


def measure_silent(root: Path, quick: bool) -> dict[str, Any]:
    """Write transactions (``Journal.commits``: every COMMIT through the Owner's handle)
    from dispatch to result of a ``cmd`` Cell that prints nothing for one second."""
    (work := root / "silent-work").mkdir()
    db = root / "silent.sqlite3"
    Session.create(db, "bench: a silent Cell", Settings(cwd=str(work))).close()
    owner = Owner(str(db))
    try:
        owner.recover()
        cell_id = accept(owner.session, [{"kind": "cmd", "argv": ["sleep", "1"]}])[0]
        before = owner.session.commits
        while owner.session.proj.executions[str(cell_id)]["phase"] != "finished":
            owner.tick(wait=0.05)
        return {"write_transactions_silent_cell": owner.session.commits - before}
    finally:
        owner.close()


def measure_inbox(root: Path, quick: bool) -> dict[str, Any]:
    """One Session handle receives a message; another prepares the next Turn, showing it."""
    db = root / "inbox.sqlite3"
    Session.create(db, "bench: Inbox to Turn", Settings(cwd=str(root))).close()
    outside, harness = Session.open(db), Session.open(db)
    latencies = []
    for i in range(100 if quick else 500):
        started = time.perf_counter()
        outside.receive(f"bench-{i}", "comment", {"body": f"comment {i}"})
        turn = harness.prepare_turn()
        latencies.append(time.perf_counter() - started)
        if not any(m["id"] == f"bench-{i}" for m in turn["state"]["runtime"]["inbox"]):
            raise RuntimeError("bench: a received message was missing from the next Turn")
        harness.step(turn["turn_id"], patch_for(turn["state"], [], replace=False))  # consumes
    for session in (outside, harness):
        session.close()
    return {
        "inbox_to_turn_ms_p50": ms(pct(latencies, 50)),
        "inbox_to_turn_ms_p95": ms(pct(latencies, 95)),
    }


def measure_recovery(root: Path, quick: bool) -> dict[str, Any]:
    """``rio-ci work`` is SIGKILLed while a Cell runs; the time for the next Owner to open
    the Session and recover (stop the survivor, commit the UnknownExecution)."""
    times = []
    for i in range(1 if quick else 5):
        db = root / f"recovery-{i}.sqlite3"
        session = Session.create(db, "bench: recovery", Settings(cwd=str(root)))
        cell_id = accept(session, [{"kind": "cmd", "argv": ["sleep", "60"]}])[0]
        session.close()
        first = cli("work", str(db))
        try:
            wait_for(functools.partial(_sleeping, db, cell_id), "the Cell to start")
        finally:
            first.kill()
            first.wait()
        started = time.perf_counter()
        owner = Owner(str(db))
        owner.recover()
        times.append(time.perf_counter() - started)
        result = owner.session.proj.executions[str(cell_id)]["result"]
        owner.close()
        if result is None or result["type"] != "UnknownExecution":
            raise RuntimeError(f"bench: recovery recorded {result}, not an UnknownExecution")
    return {"recovery_ms": ms(statistics.median(times)), "recovery_samples": len(times)}


def _sleeping(db: Path, cell_id: int) -> bool:
    session = Session.open(db)
    session.close()
    identity = session.proj.executions[str(cell_id)]["identity"]
    with contextlib.suppress(psutil.Error):
        return identity is not None and psutil.Process(identity["pid"]).name() == "sleep"
    return False


def measure_idle(root: Path, quick: bool) -> dict[str, Any]:
    """A real harness (``rio-ci run``) that ran a code and a cmd Cell and now waits for a
    Timer: its resident memory and CPU while idle, and the Worker processes left."""
    (root / "idle-work").mkdir()
    db = root / "idle.sqlite3"
    session = Session.create(db, "bench: an idle Owner", Settings(cwd=str(root / "idle-work")))
    session.set_timer("bench-wake", time.time() + 90, {"why": "keeps the harness waiting"})
    token_prefix = f"rio-{session.proj.session['id']}-"
    session.close()
    script = root / "idle-model.yaml"  # JSON is YAML
    rounds = [[CMD, CODE], [{"kind": "note", "text": "waiting for the Timer"}]]
    script.write_text(
        json.dumps(
            [
                [{"op": "add", "path": "/cells/-", "value": cell} for cell in cells]
                for cells in rounds
            ]
        )
    )
    harness = cli("run", str(db), "--model", f"scripted:{script}", "--deadline", "120")
    try:
        wait_for(lambda: harness.poll() is not None or _waiting(db), "the harness to idle")
        time.sleep(0.5)
        if harness.poll() is not None:
            raise RuntimeError(
                f"bench: the harness exited ({harness.returncode}) instead of waiting for its Timer"
            )
        proc = psutil.Process(harness.pid)
        before, started = proc.cpu_times(), time.monotonic()
        time.sleep(1.0 if quick else 3.0)
        after, elapsed = proc.cpu_times(), time.monotonic() - started
        rss = proc.memory_info().rss
        workers = token_holders(token_prefix)
    finally:
        harness.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            harness.wait(10)
        harness.kill()  # only if SIGTERM was not enough
        harness.wait()
    busy = after.user + after.system - before.user - before.system
    return {
        "idle_owner_rss_mib": round(rss / 2**20, 1),
        "idle_owner_cpu_percent": round(100 * busy / elapsed, 2),
        "idle_worker_processes": workers,
    }


def _waiting(db: Path) -> bool:
    session = Session.open(db)
    session.close()
    return session.proj.accepted_turns >= 2 and not session.proj.pending()
