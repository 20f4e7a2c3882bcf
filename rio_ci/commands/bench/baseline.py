"""The baselines: one row inserted and committed with plain ``sqlite3`` (WAL,
``synchronous=FULL``, default page size), which every commit figure is divided by, and the
launch protocol done the same way, the floor under a ``cmd`` Cell. Nothing of rio_ci on top;
the only module of the bench that touches SQLite itself."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import psutil

from rio_ci.run.confinement.user import CellUser
from rio_ci.run.survivors import runs_as
from rio_ci.run.worker import GATE

SQLITE_VERSION = sqlite3.sqlite_version


class BareCommits:
    def __init__(self, path: Path):
        self._conn = sqlite3.connect(path, isolation_level=None)
        pragmas = ("journal_mode = WAL", "synchronous = FULL", "synchronous")
        if [self._conn.execute(f"PRAGMA {p}").fetchall() for p in pragmas] != [
            [("wal",)],
            [],
            [(2,)],
        ]:
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

    def wal_checkpoint(self) -> None:
        """What the Owner does before each launch: a WAL checkpoint, ``wal_checkpoint(FULL)``."""
        self._conn.execute("PRAGMA wal_checkpoint(FULL)").fetchall()

    def close(self) -> None:
        self._conn.close()


class BareLaunch:
    """The floor under a ``cmd`` Cell: the launch protocol of docs/sessions.md and the guarantees
    docs/performance.md names, done with plain ``sqlite3``, ``subprocess``, psutil and /proc
    reads, nothing of rio_ci's Session, Journal or Owner on top — ``started`` committed
    (FULL), the WAL checkpoint (``wal_checkpoint(FULL)``), the gated ``/bin/sh`` spawned in its own
    session, its start time read and committed unsynced, the gate released, the output read
    to EOF, the process table scanned for the Worker's token and group, the leader reaped,
    the result committed (FULL). Under a Cell user (``user``) as the Owner launches then: no
    WAL checkpoint, the gate started as that user, and its processes found by user too."""

    def __init__(self, path: Path, cwd: Path, user: CellUser | None = None):
        self._commits = BareCommits(path)
        self._cwd = cwd
        self._user = user
        env = {**os.environ, "RIO_WORKER_TOKEN": "rio-bench-floor"}
        self._env = user.environment(env) if user is not None else env
        self._spawn = user.spawn().options if user is not None else {}
        self._token = b"\0RIO_WORKER_TOKEN=rio-bench-floor\0"

    def run(self, argv: list[str]) -> float:
        """Seconds from the ``started`` commit to the result committed."""
        started = time.perf_counter()
        self._commits.commit("started")
        if self._user is None:
            self._commits.wal_checkpoint()
        pipe = subprocess.PIPE
        proc = subprocess.Popen(
            ["/bin/sh", "-c", GATE, "rio-worker", *argv],
            cwd=self._cwd,
            env=self._env,
            stdin=pipe,
            stdout=pipe,
            stderr=pipe,
            start_new_session=True,
            **self._spawn,
        )
        created = psutil.Process(proc.pid).create_time()
        self._commits.commit(f"{proc.pid} {created}", synchronous="NORMAL")
        out, err = proc.communicate(b"go\n")  # the gate's answer, then output to EOF
        self._leftovers(proc.pid)
        self._commits.commit(f"exit {proc.returncode} {len(out) + len(err)}")
        return time.perf_counter() - started

    def _leftovers(self, pgid: int) -> list[int]:
        found = []
        for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                if os.getpgid(int(name)) == pgid or (
                    self._user is not None and runs_as(int(name), self._user.uid)
                ):
                    found.append(int(name))
                    continue
                with open(f"/proc/{name}/environ", "rb") as block:
                    if self._token in b"\0" + block.read():
                        found.append(int(name))
            except OSError:
                continue
        return found

    def close(self) -> None:
        self._commits.close()


class BareSteps:
    """The SQL a step runs, with plain ``sqlite3``: ``BEGIN IMMEDIATE``, the catch-up
    ``SELECT``, one event row ``INSERT``ed, ``COMMIT`` (FULL), in a file of its own laid out
    as ``template`` (a Session file ``Session.create`` made: its tables, index and page
    size), which is only read. What a step costs beyond this is rio_ci's Python: admission,
    encoding, the fold of the event. No Session is written to here: events have one writer."""

    def __init__(self, path: Path, template: Path):
        with contextlib.closing(sqlite3.connect(f"file:{template}?mode=ro", uri=True)) as src:
            page = src.execute("PRAGMA page_size").fetchone()[0]
            schema = [
                row[0]
                for row in src.execute(
                    "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid"
                )
            ]
        self._conn = sqlite3.connect(path, isolation_level=None)
        self._conn.execute(f"PRAGMA page_size = {int(page)}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        for statement in schema:
            self._conn.execute(statement)
        self._last = 0

    def step(self, data: str) -> float:
        started = time.perf_counter()
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.execute(
            "SELECT seq, kind, data FROM events WHERE seq > ? ORDER BY seq", (self._last,)
        ).fetchall()
        self._last = (
            self._conn.execute(
                "INSERT INTO events (kind, at, ref, data) VALUES ('patch_accepted', ?, NULL, ?)",
                (time.time(), data),
            ).lastrowid
            or self._last
        )
        self._conn.execute("COMMIT")
        return time.perf_counter() - started

    def close(self) -> None:
        self._conn.close()
