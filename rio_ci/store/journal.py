"""The Journal: the only module that writes a Session file. A Session is one SQLite file: ``meta``
(schema version, Session id), ``events`` (the append-only Journal) and ``snapshot`` (the saved
projection at some seq, so opening folds only the tail). Every connection sets and verifies
WAL and ``synchronous=FULL``; every write is one ``BEGIN IMMEDIATE`` transaction that first
catches up with what other processes committed."""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from rio_ci.core.errors import StorageError, UncertainCommit
from rio_ci.core.events import KINDS, Event
from rio_ci.core.json_value import compact
from rio_ci.core.projection import PROJECTION_FORMAT, Projection
from rio_ci.core.reducer import apply, readable
from rio_ci.faults.crashpoints import crash_point
from rio_ci.store import migrations, sessionfile
from rio_ci.store.at_rest import SCHEMA_VERSION
from rio_ci.store.sessionfile import resolve

# The Owner's check for damage, asked before every write: None, or why the file cannot be
# trusted and whether our WAL may still be copied into it (a WAL checkpoint) before the
# Journal refuses every further write.
Guard = Callable[[], tuple[str, bool] | None]
SAVE_EVERY = 64  # events folded on top of the saved projection before it is saved again ...
SAVE_OPEN_TURN = 4 * SAVE_EVERY  # ... or, while a Turn is open, before it must be
PAGE_SIZE = 8192  # rows of 1-3 KB left a third of each 4 KiB page empty (docs/performance.md)
# Kinds looked up by ref, the only ones indexed (patch_accepted: after its turn_prepared);
# image_stored, looked up by its digest, has an index of its own (format 2, migrations.py)
LOOKED_UP = (
    "message_received",
    "turn_prepared",
    "timer_set",
    "execution_started",
    "output",
    "execution_finished",
)
_SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, at REAL NOT NULL, ref TEXT,
                     data TEXT NOT NULL);
CREATE INDEX events_ref ON events (ref, kind)
    WHERE {" OR ".join(f"kind = '{k}'" for k in LOOKED_UP)};
CREATE TABLE snapshot (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL,
                       data TEXT NOT NULL);
{migrations.IMAGE_INDEX};
"""


class Journal:
    """An open Session file plus its projection, kept caught up on every read and write."""

    def __init__(
        self,
        path: Path,
        conn: sqlite3.Connection,
        proj: Projection,
        saved_seq: int,
        identity: sessionfile.Identity | None = None,
        synchronous: str = "FULL",
    ):
        self.path, self._synchronous = path, synchronous
        self._conn, self.proj, self._saved_seq = conn, proj, saved_seq
        self.poisoned: str | None = None
        self.commits = 0  # write transactions committed through this handle
        self.refused: str | None = None  # why this Journal commits nothing more
        self.guard: Guard | None = None  # asked before every write (``check_file``)
        self.identity = identity or sessionfile.identity_of(path)
        self.migrated_from: int | None = None  # the format the file had, when opening migrated it

    # --- opening -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        session_id: str,
        first: Event,
        *,
        synchronous: str = "FULL",
    ) -> Journal:
        real = resolve(path)
        sessionfile.creatable(real, path)
        # Built under a temporary name and linked into place whole: a crash leaves either no
        # Session or a complete one, two `new`s cannot both win, and a failure leaves nothing.
        partial = real.with_name(f".{real.name}.{uuid.uuid4().hex[:8]}.creating")
        try:
            _build(partial, session_id, first, synchronous)
            _fsync(partial)
            os.link(partial, real)
            _fsync(real.parent)
        except FileExistsError:
            raise FileExistsError(
                f"{path} already exists; a Session is never overwritten"
            ) from None
        except OSError as exc:
            raise StorageError(f"cannot create {path}: {exc.strerror}") from None
        except sqlite3.Error as exc:
            raise StorageError(f"cannot create {path}: {exc}") from None
        finally:
            for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
                with suppress(OSError):
                    leftover.unlink(missing_ok=True)
        return cls.open(real, synchronous=synchronous)

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, verify: bool = False, synchronous: str = "FULL"
    ) -> Journal:
        """Open an existing Session. ``verify`` adds SQLite's ``quick_check`` (Owner start).
        Nothing is created beside ``path`` before it is known to be one this rio-ci reads
        (``sessionfile``: a file of a newer format is refused untouched); a file of an older
        format is migrated first, one transaction per step (``migrations``)."""
        real = resolve(path)
        identity = sessionfile.check(real, path)
        problem = sessionfile.recognise(real, path)
        if problem:
            raise StorageError(problem)
        try:
            conn = _connect(real, synchronous, create=False, configure=False)
            try:
                # Judged again through this connection, which sees the WAL, before any PRAGMA
                # that writes (WAL mode would rewrite a foreign file's header).
                problem = sessionfile.schema_problem(conn, path)
                if problem:
                    raise StorageError(problem)
                _configure(conn, real, synchronous)
                if verify:
                    problems = [r[0] for r in conn.execute("PRAGMA quick_check")]
                    if problems != ["ok"]:
                        raise StorageError(f"{path} failed quick_check: {problems[0]}")
                migrated_from = migrations.upgrade(conn, path)
                proj, saved_seq = _load(conn)
            except BaseException:
                conn.close()
                raise
        except sqlite3.DatabaseError as exc:
            raise StorageError(sessionfile.open_problem(real, path, exc)) from None
        if sessionfile.identity_of(real) != identity:
            conn.close()
            raise StorageError(f"{path} was replaced while it was being opened; try again")
        journal = cls(real, conn, proj, saved_seq, identity, synchronous)
        journal.migrated_from = migrated_from
        journal.catch_up()
        return journal

    def close(self) -> None:
        self._conn.close()

    def reopen(self) -> None:
        """Drop the in-memory projection and read what really committed."""
        self._conn.close()
        fresh = Journal.open(self.path, synchronous=self._synchronous)
        if fresh.identity != self.identity:
            fresh.close()
            raise StorageError(f"{self.path} now names another file; not reopening it")
        self._conn, self.proj, self._saved_seq = fresh._conn, fresh.proj, fresh._saved_seq
        self.poisoned = None

    def check_file(self) -> None:
        """Raise StorageError, for good, once the path no longer names the file this Journal
        opened (renamed, removed, replaced; SQLite keeps the WAL per *name*, so ours is first
        copied into the file: a WAL checkpoint) or ``guard`` (the Owner's checks for damage)
        found a problem."""
        if self.refused is None:
            now = sessionfile.identity_of(self.path)
            if now != self.identity:
                self.refuse(sessionfile.moved_message(self.path, now), wal_checkpoint=True)
            elif self.guard is not None and (found := self.guard()) is not None:
                problem, wal_checkpoint = found
                self.refuse(problem, wal_checkpoint=wal_checkpoint)
        if self.refused is not None:
            raise StorageError(self.refused)

    def refuse(self, reason: str, *, wal_checkpoint: bool) -> None:
        """Commit nothing more through this Journal. ``wal_checkpoint`` (unless the WAL is
        what was damaged): first copy our WAL into the file through the open connection (a
        TRUNCATE WAL checkpoint)."""
        if wal_checkpoint and self.refused is None:
            try:
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                reason += "; its commits were copied into the file (a WAL checkpoint)"
            except sqlite3.Error as exc:
                reason += f"; its WAL could not be copied into the file ({exc})"
        self.refused = reason

    def wal_checkpoint_full(self) -> None:
        """Copy every committed WAL frame into the database file and sync it (a FULL WAL
        checkpoint, which waits for readers of older data)."""
        try:
            self._conn.execute("PRAGMA wal_checkpoint(FULL)").fetchall()
        except sqlite3.Error as exc:
            raise StorageError(f"cannot checkpoint {self.path}: {exc}") from None

    # --- reading -------------------------------------------------------------------------

    def _rows(self, query: str, params: Any = ()) -> Iterator[Any]:
        """Rows of ``query``; a file SQLite cannot read (damaged, removed) is a StorageError."""
        try:
            yield from self._conn.execute(query, params)
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"cannot read {self.path}: {exc}") from None

    def _event(self, seq: int, kind: str, at: float, data: str) -> dict[str, Any]:
        # as readers see it: derived fields filled in
        return {
            "seq": seq,
            "kind": kind,
            "at": at,
            **readable(kind, sessionfile.decode(data, seq, self.path)),
        }

    def catch_up(self) -> None:
        """Fold events committed by any process since the projection's last seq."""
        self._check()
        for seq, kind, data in self._rows(
            "SELECT seq, kind, data FROM events WHERE seq > ? ORDER BY seq", (self.proj.last_seq,)
        ):
            sessionfile.fold(self.proj, seq, kind, data, self.path)

    def events(
        self, after: int = 0, limit: int | None = None, kinds: Sequence[str] = ()
    ) -> Iterator[dict[str, Any]]:
        """Events after seq ``after``, in order; only those of ``kinds`` when any are given."""
        only = f" AND kind IN ({','.join('?' * len(kinds))})" if kinds else ""
        for row in self._rows(
            f"SELECT seq, kind, at, data FROM events WHERE seq > ?{only} ORDER BY seq LIMIT ?",
            (after, *kinds, -1 if limit is None else limit),
        ):
            yield self._event(*row)

    def find(self, ref: str, kind: str, after: int = 0) -> dict[str, Any] | None:
        """The first event of ``kind`` after seq ``after`` whose ref is ``ref`` (an id)."""
        return next(self.find_all(ref, kind, after), None)

    def find_all(self, ref: str, kind: str, after: int = 0) -> Iterator[dict[str, Any]]:
        """Every such event, in order: through a partial index for ``LOOKED_UP`` kinds and
        ``image_stored`` (the kind is spelled out so SQLite can use one), else scanning from
        ``after``."""
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        for row in self._rows(
            "SELECT seq, kind, at, data FROM events WHERE seq > ? AND ref = ?"
            f" AND kind = '{kind}' ORDER BY seq",
            (after, ref),
        ):
            yield self._event(*row)

    def kinds_of(self, seqs: set[int]) -> dict[int, str]:
        return dict(
            self._rows(
                "SELECT seq, kind FROM events WHERE seq IN "  # () is valid SQL
                f"({','.join('?' * len(seqs))})",
                sorted(seqs),
            )
        )

    def size_bytes(self) -> int:
        count, size = (next(self._rows(f"PRAGMA {n}"))[0] for n in ("page_count", "page_size"))
        return int(count * size)

    def replay(self) -> Projection:
        """Fold the whole Journal from scratch: the verifier of every derived table."""
        proj = Projection()
        for seq, kind, data in self._rows("SELECT seq, kind, data FROM events ORDER BY seq"):
            sessionfile.fold(proj, seq, kind, data, self.path)
        return proj

    def drop_derived(self) -> None:
        """Delete the saved projection (tests and ``rio-ci`` maintenance); the next open replays."""
        self._conn.executescript("BEGIN IMMEDIATE; DELETE FROM snapshot; COMMIT;")

    # --- writing -------------------------------------------------------------------------

    @contextmanager
    def write(self, crash_before: str | None = None, *, synced: bool = True) -> Iterator[Writer]:
        """One ``BEGIN IMMEDIATE`` transaction, caught up with the Journal first. An exception
        inside rolls back and re-reads the projection. An error at COMMIT leaves the outcome
        unknown: the Journal is poisoned until ``reopen()``. ``synced=False``: no fsync at
        COMMIT (``synchronous=NORMAL``); it survives any process's crash, and a power cut once
        a later synced commit covers it (the WAL is written in order, and checksummed)."""
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
        self.check_file()
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StorageError(f"cannot start a transaction on {self.path}: {exc}") from None
        writer = Writer(self)
        try:
            self.catch_up()
            yield writer
            behind = self.proj.last_seq - self._saved_seq
            # An open Turn's whole State would go into the saved projection: wait, within bounds.
            if writer.appended and (
                behind >= SAVE_OPEN_TURN or (behind >= SAVE_EVERY and self.proj.turn is None)
            ):
                # compact reads without keeping references: no deep copy (to_dict) needed
                self._conn.execute(
                    "INSERT OR REPLACE INTO snapshot VALUES (1, ?, ?)",
                    (
                        self.proj.last_seq,
                        compact({"format": PROJECTION_FORMAT, "projection": vars(self.proj)}),
                    ),
                )
                self._saved_seq = self.proj.last_seq
            if crash_before:
                crash_point(crash_before)
            crash_point("journal_before_commit")
        except sqlite3.Error as exc:  # read-only file, full disk, damaged file: nothing committed
            self._rollback()
            raise StorageError(f"cannot write {self.path}: {exc}") from None
        except BaseException:
            self._rollback()
            raise
        try:
            self._conn.execute("COMMIT")
            self.commits += 1
        except sqlite3.Error as exc:
            self.poisoned = f"COMMIT failed on {self.path}: {exc}"
            raise UncertainCommit(
                f"{self.poisoned}; the outcome is unknown: stop, reopen and inspect"
            ) from None
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
        try:
            proj, self._saved_seq = _load(self._conn)
        except (sqlite3.Error, StorageError) as exc:
            self.poisoned = f"cannot re-read {self.path} after a rollback: {exc}"
            return
        self.proj = proj
        self.catch_up()

    def wal_checkpoint(self) -> None:
        """Copy the WAL into the file and truncate it (a TRUNCATE WAL checkpoint)."""
        crash_point("wal_checkpoint")
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _check(self) -> None:
        if self.refused:
            raise StorageError(self.refused)
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
        self._journal._conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?)",
            (seq, event.kind, time.time(), event.ref, text),
        )
        self.appended += 1
        return seq


def _connect(
    path: Path,
    synchronous: str,
    *,
    create: bool,
    configure: bool = True,
    page_size: int | None = None,
) -> sqlite3.Connection:
    # as_uri: a name holding "?", "#" or "%" is a file name, not URI syntax
    uri = f"{path.as_uri()}?mode={'rwc' if create else 'rw'}"
    conn = sqlite3.connect(
        uri, uri=True, isolation_level=None, timeout=30.0, check_same_thread=False
    )
    conn.execute("PRAGMA busy_timeout = 30000")
    if page_size:  # only before the first table exists (and before WAL)
        conn.execute(f"PRAGMA page_size = {page_size}")
    if configure:
        _configure(conn, path, synchronous)
    return conn


def _build(partial: Path, session_id: str, first: Event, synchronous: str) -> None:
    conn = _connect(partial, synchronous, create=True, page_size=PAGE_SIZE)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for statement in filter(str.strip, _SCHEMA.split(";")):
            conn.execute(statement)
        conn.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("schema_version", str(SCHEMA_VERSION)), ("session_id", session_id)],
        )
        conn.execute(
            "INSERT INTO events VALUES (1, ?, ?, NULL, ?)",
            (first.kind, time.time(), compact(first.data)),
        )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()  # the last connection: SQLite copies the WAL into the file


def _configure(conn: sqlite3.Connection, path: Path, synchronous: str) -> None:
    """Set and verify WAL and the synchronous level (docs/sessions.md)."""
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    level = conn.execute("PRAGMA synchronous").fetchone()[0]
    expected = {"FULL": 2, "NORMAL": 1, "EXTRA": 3}[synchronous]
    if str(mode).lower() != "wal" or level != expected:
        conn.close()
        raise StorageError(
            f"{path}: could not set journal_mode=WAL and synchronous="
            f"{synchronous} (got {mode}, {level}); the file system may not "
            "support WAL"
        )


def _load(conn: sqlite3.Connection) -> tuple[Projection, int]:
    row = conn.execute("SELECT seq, data FROM snapshot WHERE id = 1").fetchone()
    if row is None:
        return Projection(), 0
    try:
        data = sessionfile.DECODER.decode(row[1])
        # json built fresh objects: from_dict's deep copy would cost a third of an open
        if isinstance(data, dict) and data.get("format") == PROJECTION_FORMAT:
            return Projection(**data["projection"]), int(row[0])
    except (ValueError, TypeError, KeyError):
        pass  # derived data that does not decode is not trusted: replay instead
    return Projection(), 0  # written by another rio-ci, or damaged: replay


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
