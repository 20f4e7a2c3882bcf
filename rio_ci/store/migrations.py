"""The Session file's format, and the ordered migrations that bring an older file up to it.

A Session file says which format it is (``meta.schema_version``, ``at_rest.SCHEMA_VERSION``
for the one this rio-ci writes). Format 1 is the first; ``MIGRATIONS[n - 1]`` moves a file
from format ``n`` to ``n + 1``, in one ``BEGIN IMMEDIATE`` transaction that also records the
new format, so a file is always wholly one format or the next: a crash or a second process
in the middle finds it in one of the two and ``upgrade`` goes on from there. A migration
never rewrites an event (the Journal is append-only, and what it says is history); it adds
or changes what is derived from the events (indexes, tables rebuilt from them).

``objects(format)`` is what a Session file of that format holds in ``sqlite_master``: format
1's objects, and what each migration added. An artifact's snapshot is checked against its
own format's objects (``sessionfile.foreign_objects``), so an older generation is valid with
the objects its release made, and migrated once it is opened.

A file of a newer format than this rio-ci's is never opened for writing: ``sessionfile``
refuses it first (``newer_message``), before anything is created beside it.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

import rio_ci
from rio_ci.core.errors import StorageError
from rio_ci.faults.crashpoints import crash_point
from rio_ci.store.at_rest import SCHEMA_VERSION

Objects = frozenset[tuple[str, str, str]]  # (type, name, table) as sqlite_master lists them

# Format 1's objects (rio-ci 0.1.0): the three tables, SQLite's index of meta's key, and the
# partial index of ref over the kinds looked up by it.
FIRST: Objects = frozenset(
    {
        ("table", "meta", "meta"),
        ("index", "sqlite_autoindex_meta_1", "meta"),
        ("table", "events", "events"),
        ("index", "events_ref", "events"),
        ("table", "snapshot", "snapshot"),
    }
)

# Format 2: pictures are found by their digest through an index of their own (before, the
# Journal was scanned for them; journal.py creates the same index in a new file).
IMAGE_INDEX = "CREATE INDEX events_image ON events (ref) WHERE kind = 'image_stored'"


@dataclass(frozen=True)
class Migration:
    """Moves a Session file from format ``to - 1`` to ``to``: ``run`` executes inside the
    migration's transaction; ``adds`` is what it leaves in ``sqlite_master``."""

    to: int
    what: str
    run: Callable[[sqlite3.Connection], None]
    adds: Objects = frozenset()


def _index_image_stored(conn: sqlite3.Connection) -> None:
    conn.execute(IMAGE_INDEX)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        2,
        "index image_stored events by their digest",
        _index_image_stored,
        frozenset({("index", "events_image", "events")}),
    ),
)


def objects(version: int) -> Objects:
    """What a Session file of format ``version`` (1 … ``SCHEMA_VERSION``) holds."""
    found = FIRST
    for migration in MIGRATIONS:
        if migration.to <= version:
            found |= migration.adds
    return found


NEWER = "was written by a newer rio-ci"  # in every refusal of a newer format


def newer_message(given: str | os.PathLike[str], version: int) -> str:
    """The one line that refuses a Session of a newer format, naming both versions."""
    return (
        f"{given} {NEWER} (Session format {version}; this rio-ci "
        f"{rio_ci.__version__} reads up to {SCHEMA_VERSION}): upgrade rio-ci"
    )


def upgrade(conn: sqlite3.Connection, given: str | os.PathLike[str]) -> int | None:
    """Run every migration the file of ``conn`` (autocommit, WAL set) still needs, each in
    its own transaction; returns the format it had when it was older, else None. Another
    process may migrate the same file at the same time: each transaction reads the format
    again once it holds the write lock, and skips a step already made."""
    before = _version(conn)
    if before >= SCHEMA_VERSION:
        return None
    for migration in MIGRATIONS:
        _migrate(conn, given, migration)
    return before


def _migrate(conn: sqlite3.Connection, given: str | os.PathLike[str], migration: Migration) -> None:
    """One migration, one transaction: skipped when the file is past it already."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if _version(conn) == migration.to - 1:
                migration.run(conn)
                conn.execute(
                    "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(migration.to),)
                )
                crash_point("migration_before_commit")
            conn.execute("COMMIT")
        except BaseException:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise StorageError(
            f"{given}: cannot migrate the Session from format {migration.to - 1} to "
            f"{migration.to} ({migration.what}): {exc}; the file is left at format "
            f"{migration.to - 1}"
        ) from None


def _version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0])
