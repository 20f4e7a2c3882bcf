"""The Session file's format and its migrations (docs/journal.md, "Formats and migrations"):
an ordered list, each migration one transaction, run when an older Session is opened; the
history it holds is the same after; a Session from a newer rio-ci is refused with one line
naming both versions and is left exactly as it was, nothing created beside it.

The older files are the golden Sessions of tests/golden/ (written by earlier releases), always
copied to ``tmp_path`` first."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import rio_ci
from rio_ci.core.errors import StorageError
from rio_ci.session.session import Session
from rio_ci.store import migrations
from rio_ci.store.at_rest import SCHEMA_VERSION, session_secret_names_at_rest
from rio_ci.store.sessionfile import SCHEMA_OBJECTS, single_file_problem
from tests.kit import cli_env, run_cli

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
FIRST = GOLDEN / "0.1.0"  # written by rio-ci 0.1.0: Session format 1


def rows(path: Path) -> list[tuple[Any, ...]]:
    """Every stored event as SQLite holds it, read without rio_ci (and without changing
    anything: an immutable connection)."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
    try:
        return conn.execute("SELECT seq, kind, at, ref, data FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()


def schema(path: Path) -> tuple[str, set[tuple[str, str, str, str | None]]]:
    """(meta.schema_version, sqlite_master's objects with their SQL) of a file at rest."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
    try:
        (version,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        found = set(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
        return version, found
    finally:
        conn.close()


def copy_of(source: Path, target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target


def state_of(directory: Path) -> dict[str, str]:
    """Every file in ``directory`` and its sha256: a listing and a checksum at once."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


def newer(tmp_path: Path) -> Path:
    """A Session one format past this rio-ci's, made by hand: a copy of a golden Session with
    its schema_version raised (then closed, so nothing but the file is left)."""
    path = copy_of(FIRST / "local" / "session.sqlite3", tmp_path / "future" / "s.db")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    conn.close()
    return path


# --- the list ---------------------------------------------------------------------------------


def test_the_migrations_are_one_ordered_list_up_to_this_format() -> None:
    assert [m.to for m in migrations.MIGRATIONS] == list(range(2, SCHEMA_VERSION + 1))
    assert all(m.what for m in migrations.MIGRATIONS)
    assert migrations.objects(1) == migrations.FIRST
    assert migrations.objects(SCHEMA_VERSION) == SCHEMA_OBJECTS


@pytest.mark.parametrize("story", ["local", "artifact"])
def test_the_golden_files_are_format_1_with_format_1s_objects(story: str) -> None:
    version, found = schema(FIRST / story / "session.sqlite3")
    assert version == "1"
    assert {(t, n, tbl) for t, n, tbl, _ in found} == migrations.objects(1)


# --- migrating in place --------------------------------------------------------------------------


@pytest.mark.parametrize("story", ["local", "artifact"])
def test_opening_a_format_1_session_migrates_it_and_keeps_its_history(
    tmp_path: Path, story: str
) -> None:
    golden = FIRST / story / "session.sqlite3"
    path = copy_of(golden, tmp_path / "s.db")
    before = rows(golden)

    session = Session.open(path)
    assert session.migrated_from == 1
    assert session.proj.last_seq == before[-1][0]
    session.close()

    assert rows(path) == before  # not one event rewritten
    version, found = schema(path)
    assert version == str(SCHEMA_VERSION)
    fresh = Session.create(tmp_path / "fresh.db", "goal")
    fresh.close()
    # exactly what a new Session of this rio-ci holds, statements included
    assert found == schema(tmp_path / "fresh.db")[1]
    again = Session.open(path)
    assert again.migrated_from is None  # migrated once
    again.close()
    assert golden.read_bytes() != path.read_bytes()


def test_a_migrated_session_finds_its_pictures_through_the_new_index(tmp_path: Path) -> None:
    """What format 2 is for: ``image_stored`` was found by scanning the Journal."""
    golden = FIRST / "artifact" / "session.sqlite3"
    meta = json.loads((FIRST / "artifact-meta.json").read_text())
    (digest,) = [r[3] for r in rows(golden) if r[1] == "image_stored"]
    path = copy_of(golden, tmp_path / "s.db")
    session = Session.open(path)
    try:
        found = session.image(digest)
    finally:
        session.close()
    assert found is not None and found[0] == "image/png" and "image_stored" in meta["kinds"]
    conn = sqlite3.connect(path)
    try:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT seq FROM events WHERE seq > 0 AND ref = ? "
            "AND kind = 'image_stored' ORDER BY seq",
            (digest,),
        ).fetchall()
    finally:
        conn.close()
    assert "USING INDEX events_image" in " ".join(str(row[3]) for row in plan)


def test_any_command_migrates_and_reads_the_same_events(tmp_path: Path) -> None:
    golden = FIRST / "artifact" / "session.sqlite3"
    path = copy_of(golden, tmp_path / "s.db")
    done = run_cli("events", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(e["seq"], e["kind"], e["at"]) for e in events] == [
        (r[0], r[1], r[2]) for r in rows(golden)
    ]
    assert schema(path)[0] == str(SCHEMA_VERSION)


def test_a_crash_inside_a_migration_leaves_the_older_format_and_the_next_open_migrates(
    tmp_path: Path,
) -> None:
    """One transaction: killed before its COMMIT, the file is wholly format 1 still."""
    golden = FIRST / "local" / "session.sqlite3"
    path = copy_of(golden, tmp_path / "s.db")
    env = cli_env(RIO_CRASH_AT="migration_before_commit")
    done = run_cli("events", str(path), env=env)
    assert done.returncode == -9, done.stdout + done.stderr  # SIGKILLed at the point
    conn = sqlite3.connect(path)  # reads through the WAL the killed process left
    try:
        (version,) = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert version == "1" and "events_image" not in names
    session = Session.open(path)
    assert session.migrated_from == 1
    session.close()
    assert schema(path)[0] == str(SCHEMA_VERSION) and rows(path) == rows(golden)


def test_a_migration_that_fails_changes_nothing_and_says_why(tmp_path: Path) -> None:
    """A format-1 file where the new index's name is taken: the migration cannot run, the
    error is one line, and the file keeps its format and its events."""
    golden = FIRST / "local" / "session.sqlite3"
    path = copy_of(golden, tmp_path / "s.db")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE events_image (x)")
    conn.close()
    done = run_cli("show", str(path))
    assert done.returncode == 4
    (line,) = done.stdout.splitlines()
    error = json.loads(line)["error"]
    assert "cannot migrate the Session from format 1 to 2" in error and "left at format 1" in error
    version, found = schema(path)
    assert version == "1" and ("index", "events_image", "events") not in {f[:3] for f in found}
    assert rows(path) == rows(golden)


def test_the_at_rest_read_takes_an_older_format_too(tmp_path: Path) -> None:
    path = copy_of(FIRST / "local" / "session.sqlite3", tmp_path / "s.db")
    listing = state_of(tmp_path)
    assert session_secret_names_at_rest(str(path)) == []
    assert state_of(tmp_path) == listing  # nothing migrated or created at rest
    assert session_secret_names_at_rest(str(newer(tmp_path))) is None


# --- newer than this rio-ci -------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["events"],
        ["show"],
        ["state"],
        ["turn"],
        ["receive", "m1", "comment", "{}"],
        ["work", "--timeout", "5"],
        ["run", "--model", "scripted:nowhere.yaml", "--deadline", "5"],
    ],
    ids=lambda c: c[0],
)
def test_a_session_from_a_newer_rio_ci_is_refused_in_one_line_and_left_untouched(
    tmp_path: Path, command: list[str]
) -> None:
    path = newer(tmp_path)
    before = state_of(path.parent)
    done = run_cli(command[0], str(path), *command[1:])
    assert done.returncode == 4, done.stdout + done.stderr
    (line,) = done.stdout.splitlines()
    assert json.loads(line) == {
        "error": f"{path} was written by a newer rio-ci (Session format {SCHEMA_VERSION + 1}; "
        f"this rio-ci {rio_ci.__version__} reads up to {SCHEMA_VERSION}): upgrade rio-ci"
    }
    assert state_of(path.parent) == before  # the same bytes, and no -wal, -shm or lock beside


def test_opening_a_newer_session_in_process_raises_and_changes_nothing(tmp_path: Path) -> None:
    path = newer(tmp_path)
    before = state_of(path.parent)
    with pytest.raises(StorageError, match="written by a newer rio-ci"):
        Session.open(path)
    assert state_of(path.parent) == before


def test_a_snapshot_is_judged_by_the_objects_of_its_own_format(tmp_path: Path) -> None:
    """An artifact's format-1 snapshot is valid with format 1's objects; one holding what only
    a later format has (or a newer format altogether) is refused with the reason."""
    plain = copy_of(FIRST / "artifact" / "session.sqlite3", tmp_path / "plain.sqlite3")
    assert single_file_problem(plain) is None
    mixed = copy_of(plain, tmp_path / "mixed.sqlite3")
    conn = sqlite3.connect(mixed)
    with conn:
        conn.execute(migrations.IMAGE_INDEX)
    conn.close()
    problem = single_file_problem(mixed)
    assert problem is not None
    assert "no rio Session of format 1 holds: index 'events_image'" in problem
    future = newer(tmp_path)
    conn = sqlite3.connect(future)
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    problem = single_file_problem(future)
    assert problem is not None and "written by a newer rio-ci" in problem
