"""The shortcuts of the hot paths give exactly what the long way gives: the State's size
added up from parts, a Turn's State rendered once, a patch stored through its one encoding,
a re-submission recognised by value, an Owner's integrity check only for a file in doubt."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from rio_ci.commands.bench.drive import new_session, patch_for, play_round
from rio_ci.core import events as ev
from rio_ci.core.admission import Receipt
from rio_ci.core.errors import StorageError
from rio_ci.core.json_value import compact, encoded_size
from rio_ci.core.view import _unbounded, next_turn, render, select_inbox, unbounded_size
from rio_ci.run.owner import Owner, in_doubt
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests.kit import run_cli


@pytest.fixture
def played(tmp_path: Path) -> Session:
    """A Session after a few realistic rounds (output, Inbox messages, replaced Cells)."""
    session = new_session(tmp_path / "s.db")
    head = None
    for n in range(1, 12):
        head, _ = play_round(session, n, head)
    session.receive("extra", "comment", {"body": "one more message " * 20})
    return session


def test_the_state_size_from_parts_is_the_encoded_size(played: Session) -> None:
    proj = played.proj
    assert unbounded_size(proj, proj.cells) == encoded_size(_unbounded(proj, []))
    fewer = proj.cells[1:]
    assert unbounded_size(proj, fewer) == encoded_size(_unbounded(proj, [], cells=fewer))


def test_a_turn_state_rendered_once_is_the_one_render_gives(played: Session) -> None:
    proj = played.proj
    delivered, state = next_turn(proj)
    assert delivered == select_inbox(proj) and delivered
    assert state == render(proj, delivered)
    turn = played.prepare_turn()
    assert turn["state"] == state
    assert played.journal.replay().turn["state"] == state  # the fold renders it the same


def test_the_stored_patch_is_its_one_encoding(played: Session) -> None:
    turn = played.prepare_turn()
    ops = patch_for(turn["state"], [{"kind": "cmd", "argv": ["echo", "é \u2603"]}], replace=False)
    receipt = played.step(turn["turn_id"], ops)
    assert isinstance(receipt, Receipt)
    row = (
        sqlite3.connect(played.path)
        .execute("SELECT data FROM events WHERE seq = ?", (receipt.event,))
        .fetchone()[0]
    )
    stored = json.loads(row)
    assert stored["patch"] == ops and "cells" not in stored
    assert row == compact(stored)  # spliced text = what encoding the data gives
    (event,) = [e for e in played.events(receipt.event - 1) if e["seq"] == receipt.event]
    assert event["cells"] == [op["value"] for op in ops[1:]]  # derived for readers
    assert played.journal.replay().to_dict() == played.proj.to_dict()


def test_a_resubmission_with_keys_in_another_order_is_the_same_patch(played: Session) -> None:
    turn = played.prepare_turn()
    ops = patch_for(turn["state"], [{"kind": "note", "text": "same"}], replace=False)
    first = played.step(turn["turn_id"], ops)
    reordered = [dict(reversed(list(op.items()))) for op in ops]
    assert compact(reordered) != compact(ops)
    assert played.step(turn["turn_id"], reordered) == first
    assert sum(e["kind"] == "patch_accepted" for e in played.events()) == 13


def test_an_owner_checks_integrity_only_when_in_doubt(tmp_path: Path) -> None:
    db, cut = tmp_path / "s.db", tmp_path / "cut.db"
    Session.create(db, "g").close()
    with db.open("rb") as stream:
        assert not in_doubt(db, stream.fileno())  # closed cleanly: no WAL, header agrees
        held = Session.open(db)
        with held.journal.write() as w:  # another process holds it and wrote: a WAL
            w.append(ev.watermark("x", 1))
        assert in_doubt(db, stream.fileno())
        held.close()
        assert not in_doubt(db, stream.fileno())
    shutil.copyfile(db, cut)
    with cut.open("r+b") as stream:
        stream.truncate(cut.stat().st_size - 100)  # not a whole number of pages
        assert in_doubt(cut, stream.fileno())
        # whole pages but fewer than the header says
        stream.truncate(cut.stat().st_size - cut.stat().st_size % 8192 - 8192)
        assert in_doubt(cut, stream.fileno())


def test_an_owner_leaves_the_locks_of_this_process_s_other_connections_alone(
    tmp_path: Path,
) -> None:
    """Closing any descriptor of a file drops every POSIX lock the process holds on it,
    SQLite's included: an Owner that read the header through a descriptor it then closed
    left a Session open in the same process blind to what other processes commit."""
    db = tmp_path / "s.db"
    reader = Session.create(db, "g", Settings(cwd=str(tmp_path)))
    try:
        Owner(str(db)).close()
        turn = reader.prepare_turn()
        cell = {"id": 1, "previous_id": None, "kind": "cmd", "argv": ["true"]}
        reader.step(
            turn["turn_id"],
            [
                {"op": "test", "path": "/revision", "value": 0},
                {"op": "add", "path": "/cells/-", "value": cell},
            ],
        )
        done = run_cli("work", db)  # another process launches (and checkpoints) and finishes
        assert done.code == 0, done.err
        assert reader.state()["runtime"]["cells"]["1"]["phase"] == "finished"
    finally:
        reader.close()


def test_an_owner_refuses_a_damaged_file_that_is_in_doubt(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    session = Session.create(db, "g")
    for n in range(200):
        session.set_watermark(f"w{n}", "x" * 500)
    session.close()
    data = bytearray(db.read_bytes())
    # The header of an early page of events, which opening the Session does not read.
    data[8192 * 7 : 8192 * 7 + 8] = b"\x0d\xff\xff\x00\x05\xff\xff\x00"
    db.write_bytes(bytes(data))
    Owner(str(db)).close()  # closed cleanly before: trusted (SQLite checks what it reads)
    Path(f"{db}-wal").write_bytes(b"\0" * 32)  # as a crashed process leaves it: in doubt
    with pytest.raises(StorageError, match="failed quick_check"):
        Owner(str(db))


def test_an_owner_takes_over_a_file_left_with_a_zero_filled_wal(tmp_path: Path) -> None:
    """A crash on a file system that zero-fills unwritten blocks leaves an invalid WAL that
    SQLite ignores: the Owner checks the file (it is in doubt), then owns it and commits —
    the stale WAL is not damage done under it."""
    db = tmp_path / "s.db"
    Session.create(db, "g").close()
    Path(f"{db}-wal").write_bytes(b"\0" * 4096)
    owner = Owner(str(db))
    try:
        assert owner.guard.problem() is None
        owner.session.set_watermark("after", "the crash")
        assert owner.guard.problem() is None
    finally:
        owner.close()
    reopened = Session.open(db)
    assert reopened.refresh().watermarks["after"] == "the crash"
    reopened.close()


def test_the_owner_sees_its_wal_replaced_or_garbled_through_the_descriptor_it_keeps(
    tmp_path: Path,
) -> None:
    """The guard reads the WAL through a kept descriptor and re-sums a header only when it
    changed. Still damage: a WAL replaced by an identical copy (another file: SQLite's frames
    are only reachable through its own descriptor, so they can be checkpointed into the
    file), one replaced by garbage (its header is read from the new file, not the kept one)
    and a header garbled in place after it was found valid (neither can be checkpointed)."""
    db = tmp_path / "s.db"
    wal = Path(f"{db}-wal")
    Session.create(db, "g").close()
    with_copy, with_garbage = tmp_path / "copy", tmp_path / "garbage"

    def replace_with_copy() -> None:
        shutil.copyfile(wal, with_copy)
        with_copy.replace(wal)

    def replace_with_garbage() -> None:
        with_garbage.write_bytes(b"\x5a" * wal.stat().st_size)
        with_garbage.replace(wal)

    def garble_in_place() -> None:
        with open(wal, "r+b") as stream:
            stream.seek(8)
            stream.write(b"\x00\x00\x00\x00")  # the page size: the checksum no longer fits

    for damage, found in (
        (replace_with_copy, (f"{wal} was replaced under the Owner", True)),
        (
            replace_with_garbage,
            (f"{wal}: its header is not a WAL header (garbage was written over it)", False),
        ),
        (garble_in_place, (f"{wal}: its header checksum is wrong (it was overwritten)", False)),
    ):
        owner = Owner(str(db))
        try:
            owner.session.set_watermark(damage.__name__, "before")
            assert owner.guard.problem() is None
            damage()
            assert owner.guard.problem() == found, damage.__name__
        finally:
            owner.close()
        wal.unlink(missing_ok=True)  # what a damaged WAL left: the next Owner starts afresh
