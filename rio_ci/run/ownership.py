"""Ownership of a Session, keyed on the file itself: ``flock`` on the database file.

A lock on a sidecar *name* (``s.db.lock``) is keyed on a path: ``mv s.db t.db`` and the next
``work t.db`` takes ``t.db.lock`` and becomes a second Owner. The file keeps its identity
(device, inode) under every name, so the lock is taken on the file: an exclusive, non-blocking
``flock`` on a descriptor of the database itself. ``flock`` locks are independent of the POSIX
record locks SQLite takes on the same file, held by the open file description (so not
inherited by Workers, whose spawn closes every descriptor), and released by the kernel when
the Owner dies.

One rule comes with it: **this descriptor is never closed.** Closing *any* descriptor of a
file drops every POSIX lock the process holds on it, SQLite's included (SQLite's
"How To Corrupt" §2.2): another process would then take itself for the last connection and
delete the WAL under this one. So the descriptor is opened once per file and kept for the
life of the process (``release`` only unlocks it); the path is first opened with ``O_PATH``,
whose close drops no lock, to learn which file it names. Nothing is created: not a lock
file, not a ``-wal``. (This is why rio_ci no longer uses the ``filelock`` package: its Unix
lock opens the path it is given with ``O_TRUNC``, which must never touch a database.)
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path
from typing import Literal

from rio_ci.core.errors import OwnershipError, StorageError
from rio_ci.store.sessionfile import Identity, os_problem

_HELD: dict[Identity, int] = {}  # one descriptor per file, kept open (see the docstring)
_OWNED: set[Identity] = set()  # files an Owner of this process holds now


class FileOwnership:
    """An exclusive lock on one Session file. ``acquire`` raises OwnershipError when another
    process (or another Owner in this one) holds it, StorageError when ``real`` is not a
    regular file."""

    def __init__(self, real: Path, identity: Identity, fd: int):
        self.path = real
        self.identity = identity
        self.fd = fd  # never closed (see the module's docstring)
        self.held = True

    @classmethod
    def acquire(cls, real: Path, given: str) -> FileOwnership:
        identity, fd = _descriptor(real, given)
        if identity in _OWNED:  # flock would say yes: this process holds it already
            raise OwnershipError(f"{given} already has an Owner in this process")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OwnershipError(
                    f"{given} already has an Owner (another process holds "
                    "the lock on this file, under this or any other name)"
                ) from None
            raise StorageError(f"{given}: cannot lock it: {exc.strerror}") from None
        _OWNED.add(identity)
        return cls(real, identity, fd)

    def release(self) -> None:
        if self.held:
            self.held = False
            _OWNED.discard(self.identity)
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def names_the_file(self) -> bool:
        """True while ``self.path`` still names the locked file."""
        try:
            info = os.stat(self.path)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == self.identity


def _descriptor(real: Path, given: str) -> tuple[Identity, int]:
    """The kept descriptor of the regular file ``real`` names, opened once per file."""
    o_path = getattr(os, "O_PATH", 0)  # Linux; elsewhere the file itself is opened (and kept)
    try:
        probe = os.open(real, (o_path or os.O_RDONLY) | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise StorageError(os_problem(given, exc)) from None
    try:
        info = os.fstat(probe)
        if not stat.S_ISREG(info.st_mode):
            raise StorageError(f"{given} is not a regular file, so it is not a Session")
        identity = (info.st_dev, info.st_ino)
        if identity not in _HELD:
            # Reopened through the probe: the very file it names, even if the name moves.
            _HELD[identity] = (
                os.open(f"/proc/self/fd/{probe}", os.O_RDONLY | os.O_CLOEXEC) if o_path else probe
            )
    except OSError as exc:
        raise StorageError(os_problem(given, exc)) from None
    finally:
        if o_path:
            os.close(probe)  # an O_PATH descriptor: closing it drops no lock
    return identity, _HELD[identity]


# --- watching the file while owning it ------------------------------------------------------

SQLITE_MAGIC = b"SQLite format 3\x00"
WAL_MAGIC = (0x377F0682, 0x377F0683)


class FileGuard:
    """What the Owner checks about its file before every commit and every tick: it still
    has SQLite's header (WAL mode, same page size), it did not shrink (a WAL-mode database
    never does: rio_ci never vacuums), and its WAL is the same file, with a valid header,
    not cut short. A script of the same user can still forge a Session it takes care to keep
    valid; what this catches is damage — garbage written over the file, a truncation, a
    rewritten or removed WAL — before the Owner commits anything after it.

    ``problem`` returns ``(why, checkpoint)`` or None; ``checkpoint`` says whether our WAL can
    still be copied into the file by a WAL checkpoint (it was removed or replaced, so only
    our open descriptor reaches its intact frames) or must be left alone (the WAL or the
    file itself is garbled).

    The WAL is read through a descriptor kept while its path names the same file (``stat``
    of the path, then ``pread`` of 32 bytes): opening it for every check cost more than the
    rest of the check. SQLite keeps no lock on the ``-wal`` file itself, so this descriptor
    may be closed at any time; :meth:`close` does."""

    def __init__(self, ownership: FileOwnership):
        self._fd = ownership.fd
        self.path = ownership.path
        self.wal = Path(f"{self.path}-wal")
        self._page_size = os.pread(self._fd, 100, 0)[16:18]
        self._size = os.fstat(self._fd).st_size
        self._wal_fd: int | None = None
        self._wal_ino = -1
        self._valid = b""  # the last WAL header found valid: unchanged, it is not re-summed
        # A WAL that is already invalid when the Owner opens the file (a crash on a file
        # system that zero-fills unwritten blocks leaves one) is ignored by SQLite until its
        # first commit rewrites it: while its header stays the same, it is not damage.
        self._stale: bytes | None = None
        self._wal: tuple[int, int, bytes] | None = None  # (inode, size, salts)
        try:
            self._wal = self._wal_state()
        except ValueError:
            self._stale = _head(self.wal)

    def close(self) -> None:
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None

    def problem(self) -> tuple[str, bool] | None:
        header = os.pread(self._fd, 100, 0)
        if (
            header[:16] != SQLITE_MAGIC
            or header[16:18] != self._page_size
            or header[18:20] != b"\x02\x02"
        ):
            return f"{self.path}: its SQLite header was overwritten under the Owner", False
        size = os.fstat(self._fd).st_size
        if size < self._size:
            return f"{self.path} shrank from {self._size} to {size} bytes under the Owner", False
        self._size = size
        try:
            now = self._wal_state()
        except ValueError as exc:
            if self._stale is not None and _head(self.wal) == self._stale:
                return None
            return f"{self.wal}: {exc}", False
        if now is not None:
            self._stale = None
        before, self._wal = self._wal, now or self._wal
        if before is None:
            return None
        if now is None or now[0] != before[0]:
            how = "removed" if now is None else "replaced"
            return f"{self.wal} was {how} under the Owner", True
        if 0 < now[1] < before[1] and now[2] == before[2]:
            return f"{self.wal} shrank from {before[1]} to {now[1]} bytes under the Owner", False
        return None

    def _wal_state(self) -> tuple[int, int, bytes] | None:
        """(inode, size, salts) of the WAL file, None when there is none; ValueError when
        its header is not a WAL header (bad magic or checksum)."""
        try:
            info = os.stat(self.wal)
            if info.st_ino != self._wal_ino:  # first look, or the path names another file
                self.close()
                self._wal_fd = os.open(self.wal, os.O_RDONLY | os.O_CLOEXEC)
                info = os.fstat(self._wal_fd)  # the file opened, if it moved meanwhile
                self._wal_ino = info.st_ino
            assert self._wal_fd is not None
            header = os.pread(self._wal_fd, 32, 0)
        except FileNotFoundError:
            self.close()
            self._wal_ino = -1
            return None
        if header != self._valid:
            _check_wal_header(header)
            self._valid = header
        return info.st_ino, info.st_size, header[16:24]


def _head(wal: Path) -> bytes | None:
    try:
        with open(wal, "rb") as stream:
            return stream.read(32)
    except FileNotFoundError:
        return None


def _check_wal_header(header: bytes) -> None:
    """ValueError unless ``header`` (the first 32 bytes of a ``-wal`` file) is empty or a
    WAL header: SQLite's magic and a matching checksum."""
    if len(header) == 0:
        return
    if len(header) < 32:
        raise ValueError("its header is cut short")
    magic = int.from_bytes(header[:4], "big")
    if magic not in WAL_MAGIC:
        raise ValueError("its header is not a WAL header (garbage was written over it)")
    order: Literal["big", "little"] = "big" if magic & 1 else "little"
    s0 = s1 = 0
    for i in range(0, 24, 8):
        s0 = (s0 + int.from_bytes(header[i : i + 4], order) + s1) & 0xFFFFFFFF
        s1 = (s1 + int.from_bytes(header[i + 4 : i + 8], order) + s0) & 0xFFFFFFFF
    if header[24:32] != s0.to_bytes(4, "big") + s1.to_bytes(4, "big"):
        raise ValueError("its header checksum is wrong (it was overwritten)")
