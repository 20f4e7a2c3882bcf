"""The Journal: the only module that runs SQL.

A Session is one SQLite file with three tables: ``meta`` (schema version, Session id),
``events`` (the append-only Journal) and ``snapshot`` (a derived projection at some seq, so
opening a long Session folds only the tail). Every connection sets and verifies
``journal_mode=WAL`` and ``synchronous=FULL``. Every write is one ``BEGIN IMMEDIATE``
transaction that first catches up with events other processes committed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from rio_ci.core.events import KINDS, Event
from rio_ci.core.projection import PROJECTION_FORMAT, Projection
from rio_ci.core.reducer import apply, readable
from rio_ci.core.state import compact
from rio_ci.crashpoints import crash_point
from rio_ci.errors import StorageError, UncertainCommit

SCHEMA_VERSION = 1
SNAPSHOT_EVERY = 64  # events folded on top of the snapshot before it is rewritten ...
SNAPSHOT_OPEN_TURN = 4 * SNAPSHOT_EVERY  # ... or, while a Turn is open, before it must be
PAGE_SIZE = 8192  # rows of 1-3 KB left a third of each 4 KiB page empty (docs/performance.md)
# Kinds looked up by ref, the only ones indexed (patch_accepted: after its turn_prepared)
LOOKED_UP = ("message_received", "turn_prepared", "timer_set", "execution_started", "output",
             "execution_finished")
_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, at REAL NOT NULL,
                     ref TEXT, data TEXT NOT NULL);
CREATE INDEX events_ref ON events (ref, kind)
    WHERE {" OR ".join(f"kind = '{k}'" for k in LOOKED_UP)};
CREATE TABLE snapshot (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL,
                       data TEXT NOT NULL);
"""


def resolve(path: str | os.PathLike[str]) -> Path:
    """The real path of a Session file: aliases (symlinks) all name one file."""
    return Path(path).resolve()


class Journal:
    """An open Session file plus its projection, kept caught up on every read and write."""

    def __init__(self, path: Path, conn: sqlite3.Connection, proj: Projection,
                 snapshot_seq: int, synchronous: str = "FULL"):
        self.path = path
        self._synchronous = synchronous
        self._conn, self.proj, self._snapshot_seq = conn, proj, snapshot_seq
        self.poisoned: str | None = None
        self.commits = 0  # write transactions committed through this handle

    # --- opening -------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike[str], session_id: str, first: Event,
               *, synchronous: str = "FULL") -> Journal:
        real = resolve(path)
        if real.exists() or Path(path).is_symlink():
            raise FileExistsError(f"{path} already exists; a Session is never overwritten")
        # Built under a temporary name and linked into place whole: a crash leaves either no
        # Session or a complete one, and two concurrent `new`s cannot both win.
        partial = real.with_name(f".{real.name}.{uuid.uuid4().hex[:8]}.creating")
        try:
            conn = _connect(partial, synchronous, create=True, page_size=PAGE_SIZE)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot create {path}: {exc}") from None
        try:
            conn.execute("BEGIN IMMEDIATE")
            for statement in filter(str.strip, _SCHEMA.split(";")):
                conn.execute(statement)
            conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                ("schema_version", str(SCHEMA_VERSION)), ("session_id", session_id)])
            conn.execute("INSERT INTO events VALUES (1, ?, ?, NULL, ?)",
                         (first.kind, time.time(), compact(first.data)))
            conn.execute("COMMIT")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()  # the last connection: SQLite folds the WAL into the file
        try:
            _fsync(partial)
            os.link(partial, real)
            _fsync(real.parent)
        except FileExistsError:
            raise FileExistsError(f"{path} already exists; a Session is never overwritten") \
                from None
        finally:
            for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
                leftover.unlink(missing_ok=True)
        return cls.open(real, synchronous=synchronous)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, verify: bool = False,
             synchronous: str = "FULL") -> Journal:
        """Open an existing Session. ``verify`` adds SQLite's ``quick_check`` (an Owner
        starting on a file in doubt, ``rio_ci.run.owner.in_doubt``)."""
        real = resolve(path)
        if not real.is_file():
            raise StorageError(f"{path}: no such Session file")
        if real.stat().st_nlink > 1:
            raise StorageError(
                f"{path} has {real.stat().st_nlink} hard links; SQLite's WAL files are per "
                "name, so a hard-linked Session could be written through two names. Copy it "
                "instead."
            )
        try:
            # Check what the file is before any PRAGMA that writes: setting WAL on a foreign
            # SQLite file would rewrite its header.
            conn = _connect(real, synchronous, create=False, configure=False)
            try:
                version = _schema_version(conn, path)
                if version != SCHEMA_VERSION:
                    raise StorageError(
                        f"{path} has Session schema version {version}; this rio-ci reads "
                        f"version {SCHEMA_VERSION}. Use a matching rio-ci."
                    )
            except BaseException:
                conn.close()
                raise
            _configure(conn, real, synchronous)
            if verify:
                problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
                if problems != ["ok"]:
                    raise StorageError(f"{path} failed quick_check: {problems[0]}")
            proj, snapshot_seq = _load(conn)
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"{path} is not a readable Session: {exc}") from None
        journal = cls(real, conn, proj, snapshot_seq, synchronous)
        journal.catch_up()
        return journal

    def close(self) -> None:
        self._conn.close()

    def reopen(self) -> None:
        """Drop the in-memory projection and read what really committed."""
        self._conn.close()
        fresh = Journal.open(self.path, synchronous=self._synchronous)
        self._conn, self.proj, self._snapshot_seq = fresh._conn, fresh.proj, fresh._snapshot_seq
        self.poisoned = None

    # --- reading -------------------------------------------------------------------------

    def catch_up(self) -> None:
        """Fold events committed by any process since the projection's last seq."""
        self._check()
        try:
            _fold(self._conn, self.proj)
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"cannot read {self.path}: {exc}") from None

    def events(self, after: int = 0, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """Committed events after seq ``after``, as readers see them (``readable``)."""
        yield from self._rows("SELECT seq, kind, at, data FROM events WHERE seq > ? ORDER BY "
                              "seq LIMIT ?", (after, -1 if limit is None else limit))

    def find(self, ref: str, kind: str, after: int = 0) -> dict[str, Any] | None:
        """The first event of ``kind`` after seq ``after`` whose ref is ``ref`` (an id)."""
        return next(self.find_all(ref, kind, after), None)

    def find_all(self, ref: str, kind: str, after: int = 0) -> Iterator[dict[str, Any]]:
        """Every such event, in order: through the index for ``LOOKED_UP`` kinds (the kind
        is spelled out so SQLite can use a partial index), else scanning from ``after``."""
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        yield from self._rows("SELECT seq, kind, at, data FROM events WHERE seq > ? AND ref = "
                              f"? AND kind = '{kind}' ORDER BY seq", (after, ref))

    def _rows(self, query: str, params: tuple[Any, ...]) -> Iterator[dict[str, Any]]:
        for seq, kind, at, data in self._conn.execute(query, params):
            yield {"seq": seq, "kind": kind, "at": at, **readable(kind, json.loads(data))}

    def kinds_of(self, seqs: set[int]) -> dict[int, str]:
        return dict(self._conn.execute("SELECT seq, kind FROM events WHERE seq IN "
                                       f"({','.join('?' * len(seqs))})", sorted(seqs)))

    def size_bytes(self) -> int:
        return int(self._conn.execute("SELECT page_count * page_size FROM pragma_page_count(), "
                                      "pragma_page_size()").fetchone()[0])

    def replay(self) -> Projection:
        """Fold the whole Journal from scratch: the verifier of every derived table."""
        return _fold(self._conn, Projection())

    def drop_derived(self) -> None:
        """Delete the snapshot (tests and ``rio-ci`` maintenance); the next open replays."""
        self._conn.executescript("BEGIN IMMEDIATE; DELETE FROM snapshot; COMMIT;")

    # --- writing -------------------------------------------------------------------------

    @contextmanager
    def write(self, crash_before: str | None = None, *,
              synced: bool = True) -> Iterator[Writer]:
        """One ``BEGIN IMMEDIATE`` transaction, caught up with the Journal first. An exception
        inside rolls back and re-reads the projection. An error at COMMIT leaves the outcome
        unknown: the Journal is poisoned until ``reopen()``. ``synced=False``: no fsync at
        COMMIT (``synchronous=NORMAL``); it survives any process's crash, a power cut once a
        later synced commit covers it (the WAL is written in order, checksummed)."""
        relaxed = not synced and self._synchronous != "NORMAL"
        if relaxed:  # the level can change only between transactions
            self._set_synchronous("NORMAL")
        try:
            yield from self._transaction(crash_before)
        finally:
            if relaxed:
                self._set_synchronous(self._synchronous)

    def _transaction(self, crash_before: str | None) -> Iterator[Writer]:
        self._check()
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StorageError(f"cannot start a transaction on {self.path}: {exc}") from None
        writer = Writer(self)
        try:
            self.catch_up()
            yield writer
            behind = self.proj.last_seq - self._snapshot_seq
            # An open Turn's whole State would go into the snapshot: wait, within bounds.
            if writer.appended and (behind >= SNAPSHOT_OPEN_TURN or (
                    behind >= SNAPSHOT_EVERY and self.proj.turn is None)):
                # compact reads without keeping references: no deep copy (to_dict) needed
                self._conn.execute("INSERT OR REPLACE INTO snapshot VALUES (1, ?, ?)", (
                    self.proj.last_seq,
                    compact({"format": PROJECTION_FORMAT, "projection": vars(self.proj)})))
                self._snapshot_seq = self.proj.last_seq
            if crash_before:
                crash_point(crash_before)
            crash_point("journal_before_commit")
        except BaseException:
            self._rollback()
            raise
        try:
            self._conn.execute("COMMIT")
            self.commits += 1
        except sqlite3.Error as exc:
            self.poisoned = f"COMMIT failed on {self.path}: {exc}"
            raise UncertainCommit(f"{self.poisoned}; the outcome is unknown: stop, reopen and "
                                  "inspect") from None
        crash_point("journal_after_commit")

    def _set_synchronous(self, level: str) -> None:
        try:  # a level not restored poisons the Journal: reopen() sets it again
            self._conn.execute(f"PRAGMA synchronous = {level}")
        except sqlite3.Error as exc:
            self.poisoned = self.poisoned or f"cannot set synchronous on {self.path}: {exc}"
            raise UncertainCommit(f"{self.poisoned}; reopen the Session") from None

    def _rollback(self) -> None:
        with suppress(sqlite3.Error):
            self._conn.execute("ROLLBACK")
        self.proj, self._snapshot_seq = _load(self._conn)
        self.catch_up()

    def checkpoint(self) -> None:
        crash_point("checkpoint")
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _check(self) -> None:
        if self.poisoned:
            raise UncertainCommit(f"{self.poisoned}; reopen the Session before going on")


class Writer:
    """Appends events inside one ``Journal.write()`` transaction; only the Session holds
    one, and builds every event with a constructor of ``rio_ci.core.events``."""

    def __init__(self, journal: Journal):
        self._journal = journal
        self.proj = journal.proj  # caught up in place, replaced only after a rollback
        self.appended = 0

    def append(self, event: Event, *, text: str | None = None) -> int:
        """Insert one event and fold it; returns its seq. Giving ``text`` (``event.data``
        encoded as ``compact`` does) hands the data over: the fold keeps it uncopied."""
        seq, data = self.proj.last_seq + 1, event.data
        if text is None:  # the fold's own copy: nothing the caller holds can change it later
            text = compact(data)
            data = json.loads(text)
        apply(self.proj, seq, event.kind, data)
        self._journal._conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                                    (seq, event.kind, time.time(), event.ref, text))
        self.appended += 1
        return seq


def _connect(path: Path, synchronous: str, *, create: bool, configure: bool = True,
             page_size: int | None = None) -> sqlite3.Connection:
    uri = f"file:{path}?mode={'rwc' if create else 'rw'}"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30.0,
                           check_same_thread=False)
    conn.execute("PRAGMA busy_timeout = 30000")
    if page_size:  # only before the first table exists (and before WAL)
        conn.execute(f"PRAGMA page_size = {page_size}")
    if configure:
        _configure(conn, path, synchronous)
    return conn


def _configure(conn: sqlite3.Connection, path: Path, synchronous: str) -> None:
    """Set and verify WAL and the synchronous level (SPEC §10)."""
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    level = conn.execute("PRAGMA synchronous").fetchone()[0]
    expected = {"FULL": 2, "NORMAL": 1, "EXTRA": 3}[synchronous]
    if str(mode).lower() != "wal" or level != expected:
        conn.close()
        raise StorageError(f"{path}: could not set journal_mode=WAL and synchronous="
                           f"{synchronous} (got {mode}, {level}); the file system may not "
                           "support WAL")


def _schema_version(conn: sqlite3.Connection, path: str | os.PathLike[str]) -> int:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not {"meta", "events", "snapshot"} <= tables:
        raise StorageError(f"{path} is an SQLite file but not a rio_ci Session")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or not str(row[0]).isdigit():
        raise StorageError(f"{path} has no valid schema_version")
    return int(row[0])


def _fold(conn: sqlite3.Connection, proj: Projection) -> Projection:
    for seq, kind, data in conn.execute(
            "SELECT seq, kind, data FROM events WHERE seq > ? ORDER BY seq", (proj.last_seq,)):
        apply(proj, seq, kind, json.loads(data))
    return proj


def _load(conn: sqlite3.Connection) -> tuple[Projection, int]:
    row = conn.execute("SELECT seq, data FROM snapshot WHERE id = 1").fetchone()
    data = json.loads(row[1]) if row is not None else None
    if not isinstance(data, dict) or data.get("format") != PROJECTION_FORMAT:
        return Projection(), 0  # none, or by another rio-ci: replay, don't trust its shape
    # json.loads built fresh objects: from_dict's deep copy would cost a third of an open
    return Projection(**data["projection"]), int(row[0])


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)




def copy_single_file(source: Path, target: Path) -> None:
    """A consistent copy of a live (WAL) Session as one self-contained file (rollback
    journal), made with SQLite's backup API while an Owner may keep writing."""
    try:
        src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True)
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
            mode = dst.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
            check = [r[0] for r in dst.execute("PRAGMA integrity_check")]
        finally:
            src.close()
            dst.close()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot copy {source}: {exc}") from None
    if mode != "delete":
        raise StorageError(f"the copy of {source} stayed in journal_mode={mode}")
    if check != ["ok"]:
        raise StorageError(f"the copy of {source} fails integrity_check: {check[0]}")


def single_file_problem(path: Path) -> str | None:
    """Why ``path`` is not a usable single-file Session copy, or None."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            check = [r[0] for r in db.execute("PRAGMA integrity_check")]
            if check != ["ok"]:
                return f"integrity_check failed: {check[0]}"
            version = _schema_version(db, path)
        finally:
            db.close()
    except StorageError as exc:
        return str(exc)
    except sqlite3.Error as exc:
        return f"not a valid SQLite database: {exc}"
    if version != SCHEMA_VERSION:
        return f"Session schema version {version}, this rio-ci reads {SCHEMA_VERSION}"
    return None
