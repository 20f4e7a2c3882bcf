"""Simulated power loss and I/O errors: an APSW VFS that records every write, sync and
truncate of a Session's files, crash images built from that record, and a Journal
connection over APSW so the real rio_ci write path runs through the VFS.

The storage model (what a power cut may leave on disk), stated once:

- ``xSync`` of a file makes every earlier write and truncate *of that file* durable, in order;
- a write or truncate not yet followed by a sync of its file may or may not have reached the
  disk, independently of the others: a crash image applies a random subset of them, **in
  their original order**, on top of the synced content (whole writes; SQLite's WAL frames
  carry checksums, so torn frames are a subset of this case for the WAL);
- deleting a file and creating one are durable at once (SQLite syncs the directory);
- ``-shm`` is not durable state: it is never part of an image, and SQLite rebuilds it.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import shutil
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from rio_ci.core.projection import Projection
from rio_ci.session.session import Session
from rio_ci.store.journal import Journal, _configure

_names = itertools.count()


@dataclass(frozen=True)
class Op:
    kind: str  # write | sync | truncate | delete
    file: str  # "db" | "wal"
    offset: int = 0  # write: offset; truncate: new size
    data: bytes = b""


Failure = Callable[[str, str], BaseException | None]


class RecordingVFS(apsw.VFS):
    """The default VFS plus a log of the I/O that changes the Session's files; ``fail``
    may turn an operation into an error before it happens (and then it is not logged)."""

    def __init__(self, db: Path):
        self.name = f"rio-recording-{next(_names)}"
        self.db = str(db)
        self.ops: list[Op] = []
        self.fail: Failure | None = None
        super().__init__(self.name, "")

    def file_key(self, path: str) -> str | None:
        return {self.db: "db", self.db + "-wal": "wal"}.get(path)

    def io(self, kind: str, path: str, offset: int = 0, data: bytes = b"") -> None:
        key = self.file_key(path)
        if key is None:
            return
        if self.fail is not None and (error := self.fail(kind, key)) is not None:
            raise error
        self.ops.append(Op(kind, key, offset, data))

    def xOpen(self, name: Any, flags: Any) -> apsw.VFSFile:
        return RecordingFile(self, name, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:
        self.io("delete", filename)
        super().xDelete(filename, syncdir)


class RecordingFile(apsw.VFSFile):
    def __init__(self, vfs: RecordingVFS, name: Any, flags: Any):
        self.vfs = vfs
        self.path = name.filename() if isinstance(name, apsw.URIFilename) else str(name)
        super().__init__("", name, flags)

    def xWrite(self, data: bytes, offset: int) -> None:
        self.vfs.io("write", self.path, offset, bytes(data))
        super().xWrite(data, offset)

    def xSync(self, flags: int) -> None:
        self.vfs.io("sync", self.path)
        super().xSync(flags)

    def xTruncate(self, newsize: int) -> None:
        self.vfs.io("truncate", self.path, newsize)
        super().xTruncate(newsize)


# --- the Journal's connection over APSW ------------------------------------------------------


def _translate(exc: apsw.Error) -> sqlite3.Error:
    """The sqlite3 exception the stdlib would raise for the same SQLite error."""
    if isinstance(exc, apsw.ConstraintError):
        return sqlite3.IntegrityError(str(exc))
    if isinstance(exc, apsw.CorruptError | apsw.NotADBError):
        return sqlite3.DatabaseError(str(exc))
    return sqlite3.OperationalError(str(exc))


class _Rows:
    def __init__(self, rows: list[tuple[Any, ...]]):
        self._rows = rows

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self._rows)


class ApswConnection:
    """The part of ``sqlite3.Connection`` (``isolation_level=None``) that rio_ci.store.journal
    uses, over an APSW connection: autocommit unless the caller says BEGIN; rows are read
    eagerly; APSW errors become the sqlite3 errors the stdlib would raise."""

    def __init__(self, path: Path, vfs: RecordingVFS):
        self._conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READWRITE, vfs=vfs.name)
        self._conn.set_busy_timeout(30_000)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> _Rows:
        try:
            return _Rows(list(self._conn.execute(sql, params or ())))
        except apsw.Error as exc:
            raise _translate(exc) from None

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> _Rows:
        try:
            self._conn.cursor().executemany(sql, rows)
        except apsw.Error as exc:
            raise _translate(exc) from None
        return _Rows([])

    def close(self) -> None:
        self._conn.close()


def recorded_session(path: Path, vfs: RecordingVFS, synchronous: str) -> Session:
    """A Session whose Journal writes through ``vfs`` (constructor injection). The pragmas
    are set and verified by rio_ci's own code, as on every real connection."""
    conn: Any = ApswConnection(path, vfs)
    _configure(conn, path, synchronous)
    journal = Journal(path, conn, Projection(), 0)
    journal.catch_up()
    return Session(journal)


# --- crash images ----------------------------------------------------------------------------


@dataclass
class _File:
    synced: bytearray | None
    pending: list[Op] = field(default_factory=list)


def _apply(content: bytearray, op: Op) -> None:
    if op.kind == "write":
        end = op.offset + len(op.data)
        if len(content) < op.offset:
            content.extend(bytes(op.offset - len(content)))
        content[op.offset : end] = op.data
    elif op.kind == "truncate":
        if len(content) > op.offset:
            del content[op.offset :]
        else:
            content.extend(bytes(op.offset - len(content)))


@dataclass(frozen=True)
class Image:
    at: int  # the crash happens before ops[at]
    how: str  # synced | everything | random
    files: dict[str, bytes]  # "db" / "wal" -> content (absent file: no key)

    def digest(self) -> str:
        h = hashlib.sha256()
        for key in sorted(self.files):
            h.update(key.encode() + b"\0" + hashlib.sha256(self.files[key]).digest())
        return h.hexdigest()


def crash_images(
    ops: list[Op], base_db: bytes, per_point: int, rng: random.Random
) -> Iterator[Image]:
    """For every I/O operation k (and the end): the synced content, the content with every
    unsynced write (what a process crash leaves), and ``per_point - 2`` random subsets."""
    files = {"db": _File(bytearray(base_db)), "wal": _File(None)}
    for k in range(len(ops) + 1):
        yield from _images_at(k, files, per_point, rng)
        if k == len(ops):
            break
        op = ops[k]
        state = files[op.file]
        if op.kind == "delete":
            state.synced, state.pending = None, []
        elif op.kind == "sync":
            content = state.synced if state.synced is not None else bytearray()
            for pending in state.pending:
                _apply(content, pending)
            state.synced, state.pending = content, []
        else:
            if state.synced is None:
                state.synced = bytearray()  # created: the (empty) file exists at once
            state.pending.append(op)


def _images_at(
    k: int, files: dict[str, _File], per_point: int, rng: random.Random
) -> Iterator[Image]:
    choices: list[tuple[str, Callable[[Op], bool]]] = [
        ("synced", lambda op: False),
        ("everything", lambda op: True),
    ]
    choices += [("random", lambda op: rng.random() < 0.5)] * max(0, per_point - 2)
    for how, keep in choices:
        content: dict[str, bytes] = {}
        for key, state in files.items():
            if state.synced is None:
                continue
            data = bytearray(state.synced)
            for op in state.pending:
                if keep(op):
                    _apply(data, op)
            content[key] = bytes(data)
        yield Image(k, how, content)


def materialise(image: Image, directory: Path, name: str) -> Path:
    """Write ``image`` as a fresh Session file (and its WAL) under ``directory``."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    db = directory / name
    db.write_bytes(image.files.get("db", b""))
    if "wal" in image.files:
        (directory / f"{name}-wal").write_bytes(image.files["wal"])
    return db
