"""``rio-ci bench``: the performance figures of SPEC §14, measured on this machine.

Every figure is measured in this run. A ratio compares two things measured side by side,
interleaved (A B A B …) on the same disk, so a shared machine's drift hits both alike.
Commit figures mean nothing where ``fsync`` costs nothing, so a memory-backed file system
(tmpfs) is refused. See docs/performance.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from rio_ci.core import events as ev
from rio_ci.core.admission import Refused
from rio_ci.core.state import encoded_size
from rio_ci.errors import UsageError
from rio_ci.github.record import measure_launch_record  # GitHub's launch record, §13.1
from rio_ci.run.environment import uv_binary
from rio_ci.run.owner import Owner
from rio_ci.run.survivors import TOKEN_VAR
from rio_ci.session import Session

MEMORY_FILE_SYSTEMS = {"tmpfs", "ramfs", "devtmpfs", "hugetlbfs"}
# (figure, comparison, goal) from the performance issue; the figures are never assumed.
GOALS = (("ratio_step_commit", "<=", 1.5), ("ratio_open_100k_1k", "<=", 3.0),
         ("ratio_code_cell_vs_uv", "<=", 1.3), ("overhead_ms_cmd_cell", "<=", 3.0),
         ("idle_owner_rss_mib", "<=", 30.0), ("idle_worker_processes", "==", 0))
SCRIPT = "# /// script\n# dependencies = []\n# ///\nprint('hello from a trivial Cell')\n"
CODE: dict[str, Any] = {"kind": "code", "runtime": "python", "source": SCRIPT}  # trivial
CMD: dict[str, Any] = {"kind": "cmd", "argv": ["true"]}
OPEN_SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000}
NOTE = "A note of ordinary length, standing in for what a model writes between rounds. " * 4


def bench_command(*, as_json: bool, quick: bool, directory: str | None,
                  emit: Callable[[Any], None]) -> int:
    base = Path(directory or os.getcwd()).resolve()
    if not base.is_dir():
        raise UsageError(f"--dir {base}: not a directory")
    fs = file_system(base)
    if fs["type"] in MEMORY_FILE_SYSTEMS:
        raise UsageError(
            f"refusing to measure durability on {fs['type']} ({base}, mounted at "
            f"{fs['mount']}): fsync costs nothing in memory, so commit figures would be "
            "meaningless. Give --dir a folder on a disk-backed file system.")
    say: Callable[[str], None] = (lambda line: None) if as_json else print
    say(f"rio-ci bench ({'quick' if quick else 'full'}) in {base}: file system {fs['type']} "
        f"({fs['device']} mounted at {fs['mount']})")
    figures: dict[str, Any] = {"filesystem": fs, "quick": quick, "machine": {
        "cpus": os.cpu_count(), "python": sys.version.split()[0], "sqlite": sqlite3.sqlite_version}}
    root = Path(tempfile.mkdtemp(prefix="rio-bench-", dir=base))
    try:
        for measure in (measure_steps, measure_open, measure_cells, measure_inbox,
                        measure_recovery, measure_idle, measure_launch_record):
            started = time.monotonic()
            figures.update(measure(root, quick))
            say(f"  measured {measure.__name__.removeprefix('measure_')} in "
                f"{time.monotonic() - started:.1f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures["goals"] = {
        name: {"goal": f"{op} {limit}",
               "met": figures[name] <= limit if op == "<=" else figures[name] == limit}
        for name, op, limit in GOALS}
    if as_json:
        emit(figures)
    else:
        print(table(figures))
    return 0


def measure_steps(root: Path, quick: bool) -> dict[str, Any]:
    """A step (admission + commit) vs a bare one-row WAL+FULL commit, interleaved; the
    ratio of medians (on a busy disk a pair can straddle two latency modes)."""
    session = Session.create(root / "steps.sqlite3", "bench: step admission", cwd=str(root))
    bare = sqlite3.connect(root / "bare.sqlite3", isolation_level=None)  # no rio_ci on top
    pragmas = ("journal_mode = WAL", "synchronous = FULL", "synchronous")
    if [bare.execute(f"PRAGMA {p}").fetchall() for p in pragmas] != [[("wal",)], [], [(2,)]]:
        raise RuntimeError("bench: cannot set WAL + synchronous=FULL for the bare commit")
    bare.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, data TEXT NOT NULL)")
    accept(session, [{"kind": "note", "text": NOTE}])
    pairs = []
    for i in range((200 if quick else 2000) + 20):
        turn = session.prepare_turn()
        ops = patch_for(turn["state"], [{"kind": "note", "text": f"{NOTE}{i}"}], replace=True)
        started = time.perf_counter()
        receipt = session.step(turn["turn_id"], ops)
        step = time.perf_counter() - started
        if isinstance(receipt, Refused):
            raise RuntimeError(f"bench: patch rejected: {receipt.reason}")
        row, started = json.dumps(ops), time.perf_counter()
        bare.execute("BEGIN IMMEDIATE")
        bare.execute("INSERT INTO t (data) VALUES (?)", (row,))
        bare.execute("COMMIT")
        pairs.append((step, time.perf_counter() - started))
    session.close()
    bare.close()
    pairs = pairs[20:]  # warm-up
    steps, commits = [a for a, _ in pairs], [b for _, b in pairs]
    return {"step_commit_ms_p50": ms(pct(steps, 50)), "step_commit_ms_p95": ms(pct(steps, 95)),
            "bare_commit_ms_p50": ms(pct(commits, 50)),
            "bare_commit_ms_p95": ms(pct(commits, 95)),
            "ratio_step_commit": round(pct(steps, 50) / pct(commits, 50), 3),
            "ratio_step_commit_p95": round(pct(steps, 95) / pct(commits, 95), 3),
            "step_samples": len(pairs)}


def measure_open(root: Path, quick: bool) -> dict[str, Any]:
    """Session open at 1k/10k/100k events (copies of one long Session), plain and as an
    Owner opens it (with SQLite's quick_check)."""
    started = time.perf_counter()
    copies = build_long_session(root, OPEN_SIZES)
    out: dict[str, Any] = {"open_build_seconds": round(time.perf_counter() - started, 2)}
    for verify, prefix in ((False, "open_ms"), (True, "owner_open_ms")):
        times: dict[str, list[float]] = {name: [] for name in copies}
        for _ in range(7 if quick else 31):
            for name, path in copies.items():  # interleaved: drift hits every size alike
                started = time.perf_counter()
                Session.open(path, verify=verify).close()
                times[name].append(time.perf_counter() - started)
        for name, samples in times.items():
            out[f"{prefix}_{name}"] = ms(statistics.median(samples))
    out["ratio_open_100k_1k"] = round(out["open_ms_100k"] / out["open_ms_1k"], 3)
    out["ratio_owner_open_100k_1k"] = round(out["owner_open_ms_100k"] / out["owner_open_ms_1k"], 3)
    for name, path in copies.items():  # the context stays bounded as the Journal grows
        session = Session.open(path)
        out[f"events_{name}"] = session.proj.last_seq
        out[f"state_bytes_{name}"] = encoded_size(session.state())
        out[f"session_bytes_{name}"] = session.journal.size_bytes()
        session.close()
    return out


def build_long_session(root: Path, sizes: dict[str, int]) -> dict[str, Path]:
    """One Session grown by realistic rounds (a message, a Turn, a patch replacing a cmd
    Cell, its Execution's four events) through the Session and Journal APIs, copied as it
    passes each size. Built with synchronous=NORMAL (building is not what is measured)."""
    path = root / "long.sqlite3"
    session = Session.create(path, "bench: a long Session", cwd=str(root),
                             synchronous="NORMAL")
    accept(session, [{"kind": "note", "text": f"{NOTE} ({n})"} for n in range(6)])
    copies: dict[str, Path] = {}
    head: int | None = None
    for name, size in sorted(sizes.items(), key=lambda item: item[1]):
        while session.proj.last_seq < size:
            n = session.proj.last_seq
            session.receive(f"comment-{n}", "comment", {"body": f"comment {n}: {NOTE}"})
            head = accept(session, [{"kind": "cmd", "argv": ["echo", str(n)]}],
                          replace=head is not None)[0]
            # what the Owner commits for one Execution (no process: building is not measured)
            token = f"rio-bench-{head}"
            who = {"pid": 1, "pgid": 1, "create_time": 0.0, "boot_time": 0.0, "token": token}
            session.authorize_launch(head, token)
            session.register_worker(head, who)
            session.finish(head, ev.exited(head, 0), output=[ev.OutputPiece("stdout", f"{n}\n")])
        session.journal.checkpoint()  # everything in the main file: a plain copy is whole
        copies[name] = root / f"open-{name}.sqlite3"
        shutil.copyfile(path, copies[name])
    session.close()
    return copies


def measure_cells(root: Path, quick: bool) -> dict[str, Any]:
    """A trivial code and cmd Cell through an Owner (queued → result committed) vs the
    same script with bare ``uv run --script`` and the same argv as a bare subprocess."""
    (work := root / "work").mkdir()
    db = root / "cells.sqlite3"
    Session.create(db, "bench: per-Execution overhead", cwd=str(work)).close()
    (script := root / "script.py").write_text(SCRIPT)
    uv_argv = [uv_binary(), "run", "--quiet", "--script", str(script)]
    owner = Owner(str(db))
    owner.recover()
    head: list[int] = []

    def through_owner(cell: dict[str, Any]) -> float:
        head[:] = accept(owner.session, [cell], replace=bool(head))
        started = time.perf_counter()
        while (execution := owner.session.proj.executions[str(head[0])])["phase"] != "finished":
            owner.tick(wait=0.05)
        elapsed = time.perf_counter() - started
        if execution["result"]["type"] != "success":
            raise RuntimeError(f"bench: a trivial Cell did not succeed: {execution['result']}")
        return elapsed

    def bare(argv: list[str]) -> float:
        started = time.perf_counter()
        subprocess.run(argv, cwd=work, capture_output=True, check=True)
        return time.perf_counter() - started

    try:
        out: dict[str, Any] = {"code_cell_ms_owner_first": ms(through_owner(CODE)),
                               "code_cell_ms_uv_first": ms(bare(uv_argv))}  # uv builds envs
        pairs: dict[str, list[tuple[float, float]]] = {"code": [], "cmd": []}
        for i in range(-2, 12 if quick else 40):  # two rounds of warm-up
            if i == 0:
                pairs = {"code": [], "cmd": []}
            pairs["code"].append((through_owner(CODE), bare(uv_argv)))
            pairs["cmd"].extend((through_owner(CMD), bare(["true"])) for _ in range(2))
    finally:
        owner.close()
    for kind, baseline in (("code", "uv"), ("cmd", "bare")):
        out[f"{kind}_cell_ms_owner"] = ms(statistics.median(a for a, _ in pairs[kind]))
        out[f"{kind}_cell_ms_{baseline}"] = ms(statistics.median(b for _, b in pairs[kind]))
    out["ratio_code_cell_vs_uv"] = round(statistics.median(a / b for a, b in pairs["code"]), 3)
    out["overhead_ms_cmd_cell"] = ms(statistics.median(a - b for a, b in pairs["cmd"]))
    out["cell_pairs"] = {kind: len(samples) for kind, samples in pairs.items()}
    return out


def measure_inbox(root: Path, quick: bool) -> dict[str, Any]:
    """One Session handle receives a message; another prepares the next Turn, showing it."""
    db = root / "inbox.sqlite3"
    Session.create(db, "bench: Inbox to Turn", cwd=str(root)).close()
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
    return {"inbox_to_turn_ms_p50": ms(pct(latencies, 50)),
            "inbox_to_turn_ms_p95": ms(pct(latencies, 95))}


def measure_recovery(root: Path, quick: bool) -> dict[str, Any]:
    """``rio-ci work`` is SIGKILLed while a Cell runs; the time for the next Owner to open
    the Session and recover (stop the survivor, commit the UnknownExecution)."""
    times = []
    for i in range(1 if quick else 5):
        db = root / f"recovery-{i}.sqlite3"
        session = Session.create(db, "bench: recovery", cwd=str(root))
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
        if result["type"] != "UnknownExecution":
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
    session = Session.create(db, "bench: an idle Owner", cwd=str(root / "idle-work"))
    session.set_timer("bench-wake", time.time() + 90, {"why": "keeps the harness waiting"})
    token_prefix = f"rio-{session.proj.session['id']}-"
    session.close()
    script = root / "idle-model.yaml"  # JSON is YAML
    rounds = [[CMD, CODE], [{"kind": "note", "text": "waiting for the Timer"}]]
    script.write_text(json.dumps([[{"op": "add", "path": "/cells/-", "value": cell}
                                   for cell in cells] for cells in rounds]))
    harness = cli("run", str(db), "--model", f"scripted:{script}", "--deadline", "120")
    try:
        wait_for(lambda: harness.poll() is not None or _waiting(db), "the harness to idle")
        time.sleep(0.5)
        if harness.poll() is not None:
            raise RuntimeError(f"bench: the harness exited ({harness.returncode}) instead "
                               "of waiting for its Timer")
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
    return {"idle_owner_rss_mib": round(rss / 2**20, 1),
            "idle_owner_cpu_percent": round(100 * busy / elapsed, 2),
            "idle_worker_processes": workers}


def _waiting(db: Path) -> bool:
    session = Session.open(db)
    session.close()
    return session.proj.accepted_turns >= 2 and not session.proj.pending()


def token_holders(prefix: str) -> int:
    """Live processes whose RIO_WORKER_TOKEN starts with ``prefix`` (one Session's)."""
    count = 0
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            count += (proc.environ().get(TOKEN_VAR, "").startswith(prefix)
                      and proc.status() != psutil.STATUS_ZOMBIE)
    return count


def cli(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "rio_ci.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def accept(session: Session, cells: list[dict[str, Any]], *, replace: bool = False) -> list[int]:
    """Prepare a Turn and get ``cells`` accepted (the first replacing the first head if
    ``replace``); returns their ids."""
    turn = session.prepare_turn()
    receipt = session.step(turn["turn_id"], patch_for(turn["state"], cells, replace=replace))
    if isinstance(receipt, Refused):
        raise RuntimeError(f"bench: patch rejected: {receipt.reason}")
    return receipt.cell_ids


def patch_for(state: dict[str, Any], cells: list[dict[str, Any]], *,
              replace: bool) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/revision", "value": state["revision"]}]
    next_id = state["runtime"]["next_cell_id"]
    for n, cell in enumerate(cells):
        if replace and n == 0:
            value = {**cell, "id": next_id, "previous_id": state["cells"][0]["id"]}
            ops.append({"op": "replace", "path": "/cells/0", "value": value})
        else:
            ops.append({"op": "add", "path": "/cells/-",
                        "value": {**cell, "id": next_id + n, "previous_id": None}})
    return ops


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"bench: timed out waiting for {what}")
        time.sleep(0.02)


def file_system(path: Path) -> dict[str, str]:
    """The mount holding ``path``: the longest mount point that contains it."""
    best = max((p for p in psutil.disk_partitions(all=True)
                if path == Path(p.mountpoint) or Path(p.mountpoint) in path.parents),
               key=lambda p: len(p.mountpoint), default=None)
    return {"path": str(path), "type": best.fstype if best else "unknown",
            "device": best.device if best else "unknown",
            "mount": best.mountpoint if best else "unknown"}


def pct(samples: list[float], q: int) -> float:
    ordered = sorted(samples)
    return ordered[round(q / 100 * (len(ordered) - 1))]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def table(figures: dict[str, Any]) -> str:
    lines = [f"measured in {figures['filesystem']['path']}", f"{'figure':<28} {'value':>12}  goal"]
    for key, value in figures.items():
        goal = figures["goals"].get(key)
        mark = "" if goal is None else f"{goal['goal']}  {'met' if goal['met'] else 'MISSED'}"
        if key not in ("filesystem", "goals", "machine", "quick"):
            lines.append(f"{key:<28} {json.dumps(value):>12}  {mark}")
    return "\n".join(lines)
