"""Commit figures: a step, and one round's durable bookkeeping, each interleaved one by one
with a bare commit on the same disk (``baseline.BareCommits``); and what an unsynced commit
costs right after the WAL checkpoint an Owner makes before each launch."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rio_ci.commands.bench.baseline import BareCommits, BareSteps
from rio_ci.commands.bench.common import NOTE, accept, ms, patch_for, pct
from rio_ci.commands.bench.drive import execute
from rio_ci.core.admission import Rejection
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings

WARM_UP = 20


def measure_steps(root: Path, quick: bool) -> dict[str, Any]:
    """A step (admission + commit) vs a bare one-row WAL+FULL commit, interleaved; the
    ratio of medians (on a busy disk a pair can straddle two latency modes). Interleaved
    with them, the step's SQL alone (``BareSteps``): the floor under a step."""
    session = Session.create(
        root / "steps.sqlite3", "bench: step admission", Settings(cwd=str(root))
    )
    bare = BareCommits(root / "bare-steps.sqlite3")
    sql = BareSteps(root / "sql-steps.sqlite3", template=root / "steps.sqlite3")
    accept(session, [{"kind": "note", "text": NOTE}])
    triples = []
    for i in range((200 if quick else 2000) + WARM_UP):
        turn = session.prepare_turn()
        ops = patch_for(turn["state"], [{"kind": "note", "text": f"{NOTE}{i}"}], replace=True)
        started = time.perf_counter()
        receipt = session.step(turn["turn_id"], ops)
        step = time.perf_counter() - started
        if isinstance(receipt, Rejection):
            raise RuntimeError(f"bench: patch rejected: {receipt.reason}")
        row = json.dumps(ops)
        triples.append((step, bare.commit(row), sql.step(row)))
    session.close()
    bare.close()
    sql.close()
    steps, commits, sqls = (list(column) for column in zip(*triples[WARM_UP:], strict=True))
    return {
        "step_commit_ms_p50": ms(pct(steps, 50)),
        "step_commit_ms_p95": ms(pct(steps, 95)),
        "bare_commit_ms_p50": ms(pct(commits, 50)),
        "bare_commit_ms_p95": ms(pct(commits, 95)),
        "ratio_step_commit": round(pct(steps, 50) / pct(commits, 50), 3),
        "ratio_step_commit_p95": round(pct(steps, 95) / pct(commits, 95), 3),
        "step_sql_ms_p50": ms(pct(sqls, 50)),
        "ratio_step_sql_commit": round(pct(sqls, 50) / pct(commits, 50), 3),
        "step_samples": len(steps),
    }


def measure_rounds(root: Path, quick: bool) -> dict[str, Any]:
    """One round's durable bookkeeping through the Session, as the harness and the Owner
    call it — prepare a Turn, step (a patch replacing a ``cmd`` Cell), dispatch (launch
    authorised, Worker registered), result — with no model and no process, vs one bare
    commit, interleaved."""
    session = Session.create(root / "rounds.sqlite3", "bench: bookkeeping", Settings(cwd=str(root)))
    bare = BareCommits(root / "bare-rounds.sqlite3")
    execute(session, accept(session, [{"kind": "cmd", "argv": ["echo", "0"]}])[0], "0\n")
    pairs, commits = [], 0
    for n in range((100 if quick else 1000) + WARM_UP):
        before, started = session.commits, time.perf_counter()
        turn = session.prepare_turn()
        receipt = session.step(
            turn["turn_id"],
            patch_for(turn["state"], [{"kind": "cmd", "argv": ["echo", str(n)]}], replace=True),
        )
        if isinstance(receipt, Rejection):
            raise RuntimeError(f"bench: patch rejected: {receipt.reason}")
        head = receipt.cell_ids[0]
        execute(session, head, f"{n}\n", token=f"rio-bench-{head}")
        elapsed, commits = time.perf_counter() - started, session.commits - before
        pairs.append((elapsed, bare.commit(f"round {n}")))
    session.close()
    bare.close()
    rounds, bares = [a for a, _ in pairs[WARM_UP:]], [b for _, b in pairs[WARM_UP:]]
    return {
        "round_bookkeeping_ms_p50": ms(pct(rounds, 50)),
        "round_bookkeeping_ms_p95": ms(pct(rounds, 95)),
        "round_bookkeeping_commits": commits,
        "ratio_round_bookkeeping": round(pct(rounds, 50) / pct(bares, 50), 3),
        "round_samples": len(rounds),
    }


def measure_wal_checkpoint(root: Path, quick: bool) -> dict[str, Any]:
    """An unsynced commit (``synchronous=NORMAL``) just after a complete checkpoint vs one
    after an ordinary commit, interleaved, plain ``sqlite3``: the first writer after the
    checkpoint restarts the WAL and syncs its new header, so the Worker registration that
    follows the Owner's WAL checkpoint pays an fsync although it asks for none."""
    bare = BareCommits(root / "bare-checkpoint.sqlite3")
    after_checkpoint, plain = [], []
    for i in range((100 if quick else 400) + WARM_UP):
        bare.commit(f"started {i}")
        bare.wal_checkpoint()
        after_checkpoint.append(bare.commit(f"registered {i}", synchronous="NORMAL"))
        plain.append(bare.commit(f"output {i}", synchronous="NORMAL"))
    bare.close()
    return {
        # the figure keeps the name it was first published under
        "unsynced_commit_ms_after_fold": ms(pct(after_checkpoint[WARM_UP:], 50)),
        "unsynced_commit_ms": ms(pct(plain[WARM_UP:], 50)),
    }
