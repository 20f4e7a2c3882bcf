"""The baseline every commit figure is divided by: one row inserted and committed with plain
``sqlite3`` (WAL, ``synchronous=FULL``, default page size), nothing of rio_ci on top. The only
module of the bench that touches SQLite itself."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

SQLITE_VERSION = sqlite3.sqlite_version


class BareCommits:
    def __init__(self, path: Path):
        self._conn = sqlite3.connect(path, isolation_level=None)
        pragmas = ("journal_mode = WAL", "synchronous = FULL", "synchronous")
        if [self._conn.execute(f"PRAGMA {p}").fetchall() for p in pragmas] != \
                [[("wal",)], [], [(2,)]]:
            raise RuntimeError("bench: cannot set WAL + synchronous=FULL for the bare commit")
        self._conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, data TEXT NOT NULL)")

    def commit(self, row: str, *, synchronous: str = "FULL") -> float:
        """Seconds for one ``BEGIN IMMEDIATE``, ``INSERT``, ``COMMIT`` (``NORMAL``: a commit
        with no fsync of its own, as rio_ci's unsynced ones)."""
        if synchronous != "FULL":
            self._conn.execute(f"PRAGMA synchronous = {synchronous}")
        started = time.perf_counter()
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute("INSERT INTO t (data) VALUES (?)", (row,))
        self._conn.execute("COMMIT")
        elapsed = time.perf_counter() - started
        if synchronous != "FULL":
            self._conn.execute("PRAGMA synchronous = FULL")
        return elapsed

    def fold(self) -> None:
        """What the Owner does before each launch: ``wal_checkpoint(FULL)``."""
        self._conn.execute("PRAGMA wal_checkpoint(FULL)").fetchall()

    def close(self) -> None:
        self._conn.close()
