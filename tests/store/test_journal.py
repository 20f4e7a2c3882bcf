"""The Journal (docs/sessions.md): WAL + synchronous=FULL, a pure rebuild, derived data that
can be deleted, opening by the tail, the owner lock, concurrent writers, and a COMMIT whose
outcome is uncertain."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    PY,
    accept,
    end_execution,
    journal_rows,
    record_unknown,
    sha256,
    start_execution,
    succeed,
)

from rio_ci.core.errors import OwnershipError, StorageError
from rio_ci.session.session import Receipt, Session
from rio_ci.session.settings import Settings
from rio_ci.store.journal import SAVE_EVERY
from tests.kit import Patch, cli_env, cmd_cell, code_cell, note_cell, run_cli


def sql(path: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run one statement through a fresh connection of our own."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(query, params).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def build_history(session: Session, rounds: int = 20) -> None:
    """A Session that has seen every common event kind, well past one snapshot."""
    accept(session, lambda p: p.add(note_cell("plan")).add(cmd_cell("deploy")).add(code_cell()))
    record_unknown(session, 2)
    start_execution(session, 3)
    end_execution(session, 3, {"type": "error", "exit_code": 1}, output="hi\n")
    comment = session.receive("c0", "comment", {"body": "nothing deployed"})["seq"]
    session.set_timer("t0", time.time() - 1, {"wake": 0})
    session.fire_timer("t0")
    turn = session.prepare_turn()
    session.step(turn["turn_id"], [{"op": "test", "path": "/revision", "value": 99}])
    accept(
        session,
        lambda p: p.add(
            note_cell(
                "resolved",
                role="resolution",
                target_cell_id=2,
                evidence_refs=[f"session:event:{comment}"],
            )
        ),
    )
    for i in range(rounds):
        session.receive(f"m{i}", "comment", {"i": i})
        receipt = accept(
            session,
            lambda p: (
                p.add(cmd_cell("true"))
                .add(note_cell("cancel it", role="cancel", target_cell_id=p.next_id - 1))
                .remove(0)
            ),
        )
        session.cancel_queued(receipt.cell_ids[1], receipt.cell_ids[0])
        session.set_timer(f"t{i + 1}", 4_000_000_000 + i, {"i": i})
    accept(session, lambda p: p.add(cmd_cell("true")))
    succeed(session, session.proj.next_cell_id - 1)


@pytest.fixture
def history(session: Session) -> Session:
    build_history(session)
    assert session.proj.last_seq > 2 * SAVE_EVERY
    return session


# --- pragmas -------------------------------------------------------------------------------


def test_sessions_use_wal_and_full_synchronous(session: Session, db: Path) -> None:
    assert sql(db, "PRAGMA journal_mode") == [("wal",)]  # persistent: seen by anyone
    # synchronous is per connection: ask the Journal's own connection.
    assert session.journal._conn.execute("PRAGMA synchronous").fetchone() == (2,)
    session.close()
    sql(db, "PRAGMA journal_mode = DELETE")  # someone switched the file away from WAL
    assert sql(db, "PRAGMA journal_mode") == [("delete",)]
    reopened = Session.open(db)
    assert sql(db, "PRAGMA journal_mode") == [("wal",)]
    assert reopened.journal._conn.execute("PRAGMA synchronous").fetchone() == (2,)
    reopened.close()


# --- rebuilding ----------------------------------------------------------------------------


def test_a_full_replay_equals_the_live_projection(history: Session) -> None:
    assert history.journal.replay().to_dict() == history.refresh().to_dict()


PURE_REBUILD = textwrap.dedent("""
    import json, os, socket, subprocess, sys

    def forbidden(*args, **kwargs):
        raise AssertionError("a rebuild tried to start a process or open a connection")

    subprocess.Popen.__init__ = forbidden
    os.fork = forbidden
    os.posix_spawn = forbidden
    os.posix_spawnp = forbidden
    socket.socket.connect = forbidden
    try:
        subprocess.run(["true"])
        guarded = False
    except AssertionError:
        guarded = True

    from rio_ci.session.session import Session

    session = Session.open(sys.argv[1])
    print(json.dumps({"guarded": guarded, "open": session.proj.to_dict(),
                      "replay": session.journal.replay().to_dict(),
                      "state": session.state()}, sort_keys=True))
""")


def test_rebuilding_starts_no_process_and_opens_no_connection(history: Session, db: Path) -> None:
    history.journal.drop_derived()  # so that opening is a full fold too
    done = subprocess.run(
        [PY, "-c", PURE_REBUILD, str(db)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout)
    assert child["guarded"] is True
    mine = json.loads(
        json.dumps(
            {
                "open": history.refresh().to_dict(),
                "replay": history.journal.replay().to_dict(),
                "state": history.state(),
            },
            sort_keys=True,
        )
    )
    assert {k: child[k] for k in mine} == mine


def test_deleting_derived_data_rebuilds_the_identical_state(history: Session, db: Path) -> None:
    proj, state = history.refresh().to_dict(), history.state()
    assert sql(db, "SELECT count(*) FROM snapshot") == [(1,)]
    history.journal.drop_derived()
    assert sql(db, "SELECT count(*) FROM snapshot") == [(0,)]
    history.close()
    reopened = Session.open(db)
    assert reopened.proj.to_dict() == proj
    assert reopened.state() == state
    reopened.close()


def test_a_long_session_opens_by_folding_only_the_tail(db: Path) -> None:
    # Built at synchronous=NORMAL for speed: what is measured is opening, not durability.
    session = Session.create(db, "long", Settings(cwd=str(db.parent)), synchronous="NORMAL")
    for i in range(2000):
        session.receive(f"m{i}", "comment", {"i": i})
        turn = session.prepare_turn()
        assert isinstance(session.step(turn["turn_id"], Patch(turn["state"]).build()), Receipt)
    state = session.state()
    session.close()
    ((saved_seq, size),) = sql(db, "SELECT seq, length(data) FROM snapshot")
    last_seq = sql(db, "SELECT max(seq) FROM events")[0][0]
    assert last_seq == 6001
    assert last_seq - saved_seq <= SAVE_EVERY
    assert size < 20_000  # the projection stays bounded however long the Journal grows
    # Proof that opening does not fold the head: make an early event unreadable.
    sql(db, "UPDATE events SET data = 'not json' WHERE seq = 2")
    reopened = Session.open(db)
    assert reopened.proj.last_seq == last_seq
    assert reopened.state() == state
    with pytest.raises(StorageError, match="event 2 is not strict JSON"):
        reopened.journal.replay()
    reopened.close()


# --- ownership and aliases -----------------------------------------------------------------


def test_a_symlink_alias_cannot_get_a_second_owner(session: Session, db: Path) -> None:
    from rio_ci.run.owner import Owner

    alias = db.parent / "alias.db"
    alias.symlink_to(db)
    first = Owner(str(db))
    try:
        for path in (alias, db):
            with pytest.raises(OwnershipError):
                Owner(str(path))
    finally:
        first.close()
    second = Owner(str(alias))  # the lock is free again
    second.close()


def test_a_hard_linked_session_is_refused(session: Session, db: Path) -> None:
    alias = db.parent / "hardlink.db"
    os.link(db, alias)
    digest = sha256(db)
    for path in (db, alias):
        with pytest.raises(StorageError, match="hard link"):
            Session.open(path)
    code, out, _ = run_cli("state", alias, cwd=db.parent)
    assert code == 4 and "hard link" in out["error"]
    assert sha256(db) == digest


# --- the file under its Owner (what the Owner asks of the Session) -------------------------


def wal_size(db: Path) -> int:
    return Path(f"{db}-wal").stat().st_size


def test_a_guard_that_finds_damage_stops_every_commit_for_good(
    make_session: Any, tmp_path: Path
) -> None:
    """The Session asks its guard before every commit. A problem stops it for good; the WAL
    is copied into the file first only when the guard says it may be (it was removed or
    replaced, not garbled)."""
    garbled, replaced = make_session("garbled.db"), make_session("replaced.db")
    findings: dict[Session, tuple[str, bool] | None] = {garbled: None, replaced: None}
    for session in findings:
        session.guard_file(lambda s=session: findings[s])
        session.set_watermark("before", 1)  # the guard found nothing
    findings[garbled] = ("its WAL is garbled", False)
    findings[replaced] = ("its WAL was replaced", True)
    with pytest.raises(StorageError, match=r"^its WAL is garbled$"):
        garbled.set_watermark("after", 2)
    with pytest.raises(
        StorageError,
        match=r"^its WAL was replaced; its commits were copied into the file \(a WAL checkpoint\)$",
    ):
        replaced.set_watermark("after", 2)
    assert wal_size(tmp_path / "garbled.db") > 0  # left alone
    assert wal_size(tmp_path / "replaced.db") == 0  # copied into the file, then truncated
    for session in findings:
        findings[session] = None  # for good: what the guard says now changes nothing
        with pytest.raises(StorageError, match="its WAL"):
            session.check_file()
        reopened = Session.open(session.path)
        assert "after" not in reopened.refresh().watermarks
        reopened.close()


def test_a_full_checkpoint_puts_what_is_committed_into_the_file_itself(
    session: Session, db: Path, tmp_path: Path
) -> None:
    """The Owner's checkpoint before a launch: the database file alone, without its WAL,
    holds the last commit."""
    session.set_watermark("launch", "recorded")
    assert wal_size(db) > 0
    session.wal_checkpoint_full()
    alone = tmp_path / "alone.db"
    alone.write_bytes(db.read_bytes())  # the file without its WAL
    conn = sqlite3.connect(f"file:{alone}?immutable=1", uri=True)
    try:
        (last,) = conn.execute("SELECT kind FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    assert last == "watermark"


# --- concurrent writers --------------------------------------------------------------------


RECEIVER = textwrap.dedent("""
    import contextlib, io, json, sys
    from rio_ci.cli import main

    db, who = sys.argv[1], sys.argv[2]
    sends = [f"{who}-{i}" for i in range(30)]
    sends += [f"{who}-{i}" for i in range(0, 30, 6)]  # duplicates of our own
    sends += [f"shared-{i}" for i in range(4)]  # everyone sends these, identically
    for message_id in sends:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["receive", db, message_id, "comment",
                         json.dumps({"id": message_id})])
        print(json.dumps({"id": message_id, "code": code, "out": json.loads(out.getvalue())}),
              flush=True)
""")

STEPPER = textwrap.dedent("""
    import contextlib, io, json, os, sys
    from rio_ci.cli import main
    from tests.kit import Patch

    db, stop, patch_file = sys.argv[1], sys.argv[2], sys.argv[3]
    accepted = 0

    def run(*args):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(list(args))
        return code, json.loads(out.getvalue())

    while accepted < 5 or not os.path.exists(stop):
        code, turn = run("turn", db)
        assert code == 0, turn
        state = turn["state"]
        patch = Patch(state).add({"kind": "note", "text": f"saw {len(turn['delivered'])}"})
        if len(state["cells"]) > 20:
            patch.remove(0)
        with open(patch_file, "w") as f:
            json.dump(patch.build(), f)
        code, receipt = run("step", db, turn["turn_id"], patch_file)
        assert code == 0, receipt
        accepted += 1
    print(accepted)
""")


def test_concurrent_appends_lose_and_duplicate_nothing(
    session: Session, db: Path, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    stepper = subprocess.Popen(
        [PY, "-c", STEPPER, str(db), str(stop), str(tmp_path / "p.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )
    receivers = [
        subprocess.Popen(
            [PY, "-c", RECEIVER, str(db), f"w{n}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        for n in range(6)
    ]
    acks = []
    for proc in receivers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        acks += [json.loads(line) for line in out.splitlines()]
    stop.touch()
    out, err = stepper.communicate(timeout=120)
    assert stepper.returncode == 0, err
    steps = int(out)

    assert len(acks) == 6 * (30 + 5 + 4)
    assert all(a["code"] == 0 for a in acks), [a for a in acks if a["code"]]
    rows = journal_rows(db)
    assert [r["seq"] for r in rows] == list(range(1, len(rows) + 1))
    received = {
        r["data"]["message"]["id"]: r["seq"] for r in rows if r["kind"] == "message_received"
    }
    assert len(received) == len([r for r in rows if r["kind"] == "message_received"])
    assert len(received) == 6 * 30 + 4
    for ack in acks:
        assert ack["out"] == {"id": ack["id"], "seq": received[ack["id"]]}
    consumed = [m for r in rows if r["kind"] == "patch_accepted" for m in r["data"]["consumed"]]
    assert consumed, "the stepper ran alongside the receivers and consumed messages"
    assert len(consumed) == len(set(consumed)) and set(consumed) <= set(received)
    assert session.refresh().revision == steps


# --- an uncertain COMMIT -------------------------------------------------------------------


UNCERTAIN = textwrap.dedent("""
    import json, resource, signal, sys
    from rio_ci.core.errors import UncertainCommit
    from rio_ci.session.session import Session

    session = Session.open(sys.argv[1])
    session.journal.wal_checkpoint()  # an empty WAL: the next COMMIT must grow it
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so a write past the limit fails (EFBIG)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    report = {}
    try:
        session.receive("big", "comment", {"body": "x" * 12000})
        report["first"] = "committed"
    except UncertainCommit as exc:
        report["first"] = "uncertain: " + str(exc)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # the disk has room again
    for name, call in [("receive", lambda: session.receive("small", "comment", {})),
                       ("turn", session.prepare_turn), ("state", session.state)]:
        try:
            call()
            report[name] = "ran"
        except UncertainCommit:
            report[name] = "refused"
    session.journal.reopen()
    report["inbox after reopen"] = [m["id"] for m in session.state()["runtime"]["inbox"]]
    report["retry"] = session.receive("big", "comment", {"body": "x" * 12000})
    print(json.dumps(report))
""")


def test_an_uncertain_commit_stops_everything_until_a_reopen(session: Session, db: Path) -> None:
    before = journal_rows(db)
    done = subprocess.run(
        [PY, "-c", UNCERTAIN, str(db)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["first"].startswith("uncertain: COMMIT failed"), report
    assert (report["receive"], report["turn"], report["state"]) == ("refused",) * 3
    assert report["inbox after reopen"] == []  # it had not committed; nothing was guessed
    after = journal_rows(db)
    assert after[:-1] == before
    assert after[-1]["kind"] == "message_received" and report["retry"]["seq"] == after[-1]["seq"]


def test_a_saved_projection_in_another_format_is_ignored_and_the_journal_replayed(
    tmp_path: Path,
) -> None:
    from rio_ci.session.session import Session
    from rio_ci.store.journal import SAVE_EVERY

    path = tmp_path / "s.db"
    session = Session.create(path, "formats")
    for n in range(SAVE_EVERY + 5):
        session.receive(f"m{n}", "note", {"n": n})
    expected = session.state()
    session.close()
    raw = sqlite3.connect(path)
    row = raw.execute("SELECT data FROM snapshot").fetchone()
    data = json.loads(row[0])
    data["format"] = -1
    data["projection"]["inbox"] = []  # a shape this rio-ci must not trust
    raw.execute("UPDATE snapshot SET data = ?", (json.dumps(data),))
    raw.commit()
    raw.close()
    assert Session.open(path).state() == expected


def test_concurrent_news_on_one_name_make_exactly_one_session(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "rio_ci", "new", str(path), "--goal", f"g{n}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(6)
    ]
    codes = sorted(p.wait(timeout=60) for p in procs)
    assert codes == [0, 1, 1, 1, 1, 1]
    assert sorted(p.name for p in tmp_path.iterdir() if "creating" in p.name) == []
