"""A Session file seen from outside the Journal: what a path names, what its rows hold, and
read-only looks and copies. Like every module of ``rio_ci.store`` it may run SQL; it never
opens a Session for writing (``copy_single_file`` writes only its new target).

SQLite creates ``-wal`` and ``-shm`` files beside any database it opens in WAL mode, and
follows a symbolic link at those names. So a path is checked first, without creating
anything: it must name a regular file with one link, and the sidecar names SQLite will use
must be absent or plain files with one link. ``recognise`` then reads the schema through an
``immutable`` connection, which creates nothing and takes no lock, before the Journal opens
the file for real.

A Session file is known by its identity, ``(device, inode)``, not its name: a rename keeps
the identity, a replacement changes it. The Journal compares ``identity_of(path)`` with the
identity it opened before every write.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

from rio_ci.core.errors import StorageError
from rio_ci.core.json_value import ascii_int
from rio_ci.core.projection import Projection
from rio_ci.core.reducer import apply
from rio_ci.store import migrations
from rio_ci.store.at_rest import SCHEMA_VERSION, SIDECARS
from rio_ci.untrusted.jsonio import strict_decoder

# Every object a Session file of this rio-ci's format holds in sqlite_master: (type, name,
# table); ``migrations.objects`` gives an older format's. A copy from elsewhere (an artifact)
# holding anything more than its own format's — a trigger that fires on the next commit, a
# view, a table of its own — is refused (tests/store/test_artifact.py keeps this equal to what the
# Journal creates, tests/store/test_migrations.py to what the migrations make of a format-1 file).
SCHEMA_OBJECTS = migrations.objects(SCHEMA_VERSION)

Identity = tuple[int, int]  # (st_dev, st_ino)


def check(real: Path, given: str | os.PathLike[str]) -> Identity:
    """Raise StorageError unless ``real`` (a resolved path) can be opened as a Session file
    without creating or following anything unexpected; returns its identity."""
    try:
        info = os.stat(real)
    except OSError as exc:
        raise StorageError(os_problem(given, exc)) from None
    if stat.S_ISDIR(info.st_mode):
        raise StorageError(f"{given} is a directory, not a Session file")
    if not stat.S_ISREG(info.st_mode):
        raise StorageError(f"{given} is not a regular file, so it is not a Session")
    if info.st_nlink > 1:
        raise StorageError(
            f"{given} has {info.st_nlink} hard links; SQLite's WAL files are per name, so a "
            "hard-linked Session could be written through two names. Copy it instead."
        )
    for suffix in SIDECARS:
        sidecar = Path(f"{real}{suffix}")
        try:
            side = os.lstat(sidecar)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageError(os_problem(sidecar, exc)) from None
        if stat.S_ISLNK(side.st_mode) or not stat.S_ISREG(side.st_mode) or side.st_nlink > 1:
            what = (
                "a symbolic link"
                if stat.S_ISLNK(side.st_mode)
                else "a directory"
                if stat.S_ISDIR(side.st_mode)
                else "hard-linked"
                if stat.S_ISREG(side.st_mode)
                else "not a regular file"
            )
            raise StorageError(
                f"{sidecar} is {what}; SQLite would write the Session's journal through it. "
                "Remove it (a Session's sidecar files are plain files SQLite creates itself)."
            )
    return info.st_dev, info.st_ino


def identity_of(path: Path) -> Identity | None:
    """The identity of the file ``path`` names now, or None when it names nothing."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def moved_message(path: Path, now: Identity | None) -> str:
    how = "renamed or removed" if now is None else "replaced by another file"
    return (
        f"{path} was {how} while open: nothing more is committed through this name "
        "(open the Session by its current name)"
    )


def resolve(path: str | os.PathLike[str]) -> Path:
    """The real path of a Session file: aliases (symlinks) all name one file. A symlink
    loop or a name too long is a StorageError."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: pathlib's "Symlink loop"
        raise StorageError(f"{path}: not a usable path ({exc})") from None


def creatable(real: Path, given: str | os.PathLike[str]) -> None:
    """Raise FileExistsError when something is at ``real`` or ``given`` (a Session is never
    overwritten), StorageError when a new Session cannot be written there (its folder is
    missing, read-only or not ours to write)."""
    if os.path.lexists(given) or os.path.lexists(real):
        raise FileExistsError(f"{given} already exists; a Session is never overwritten")
    try:
        folder = stat.S_ISDIR(os.stat(real.parent).st_mode)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
            raise StorageError(f"cannot create {given}: {exc.strerror}") from None
        folder = False
    if not folder:
        raise StorageError(f"cannot create {given}: {real.parent} is not a directory")
    why = _not_writable(real.parent, "its folder")
    if why:
        raise StorageError(f"cannot create {given}: {why}")


def writable(real: Path, given: str | os.PathLike[str]) -> None:
    """Raise StorageError unless an Owner can write the Session ``real`` and create its WAL
    beside it (SQLite would open a read-only file read-only without a word)."""
    why = read_only(real)
    if why:
        raise StorageError(f"{given}: an Owner must write it, but {why}")


def read_only(real: Path) -> str | None:
    """Why the file ``real`` or its folder (where SQLite makes ``-wal`` and ``-shm``) cannot
    be written, or None."""
    return _not_writable(real, "the file") or _not_writable(real.parent, "its folder")


def _not_writable(path: Path, name: str) -> str | None:
    if os.access(path, os.W_OK | (os.X_OK if path.is_dir() else 0)):
        return None
    try:
        system = os.statvfs(path).f_flag & os.ST_RDONLY
    except OSError:
        system = 0
    return f"{name} is {'on a read-only file system' if system else 'read-only'}"


def open_problem(real: Path, given: str | os.PathLike[str], exc: Exception) -> str:
    """A one-line reason for an SQLite error while opening a Session."""
    why = read_only(real)
    return (
        f"{given} cannot be opened: {why} ({exc})"
        if why
        else f"{given} is not a usable Session: {exc}"
    )


def os_problem(path: str | os.PathLike[str], exc: OSError) -> str:
    """A one-line reason for an OSError on ``path``."""
    if exc.errno == errno.ENOENT:
        return f"{path}: no such Session file"
    if exc.errno in (errno.ENOTDIR, errno.ELOOP, errno.ENAMETOOLONG):
        return f"{path}: not a usable path ({exc.strerror})"
    return f"{path}: {exc.strerror}"


# --- what the file holds -----------------------------------------------------------------


def decode(data: str, seq: int, path: Path) -> dict[str, Any]:
    """One stored event's data; anything but a strict JSON object (not text, not JSON,
    nested past what Python's parser takes) is damage: a StorageError."""
    try:
        value = DECODER.decode(data)
    except RecursionError:
        raise StorageError(
            f"{path}: event {seq} is nested too deeply to read; the file was damaged or "
            "written by something other than rio-ci"
        ) from None
    except (ValueError, TypeError) as exc:  # TypeError: a row whose data is not text
        raise StorageError(
            f"{path}: event {seq} is not strict JSON ({exc}); the file was "
            "damaged or written by something other than rio-ci"
        ) from None
    if not isinstance(value, dict):
        raise StorageError(f"{path}: event {seq} is not a JSON object; the file was damaged")
    return value


def fold(proj: Projection, seq: int, kind: str, data: str, path: Path) -> None:
    """Fold one stored event (its JSON text) into ``proj``; damage is a StorageError."""
    value = decode(data, seq, path)
    try:
        apply(proj, seq, kind, value)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise StorageError(
            f"{path}: event {seq} ({kind}) cannot be folded ({exc!r}); the file "
            "was damaged or written by something other than rio-ci"
        ) from None


# Events are written with allow_nan=False, so NaN/Infinity in the file means damage. Not
# jsonio.loads: a row rio-ci wrote may be nested deeper than a user's input may be.
DECODER = strict_decoder(overflow=True)


# --- what SQLite sees (read only) ---------------------------------------------------------


def recognise(real: Path, given: str | os.PathLike[str]) -> str | None:
    """Why ``real`` is not a Session this rio-ci reads (of its format, or an older one it
    migrates), or None, read through an ``immutable`` connection: no lock, no
    ``-wal``/``-shm`` beside a foreign file or one written by a newer rio-ci.

    Only a file at rest can be judged this way: with a ``-wal`` beside it, the main file
    alone may be caught mid-checkpoint (after a crash, the WAL is what makes it whole). Then
    this says None, and the Journal judges it through its own connection (which may add an
    ``-shm`` beside a file that already has a WAL)."""
    if Path(f"{real}-wal").exists():
        return None
    return _judge(f"{real.as_uri()}?immutable=1", given)


def schema_problem(conn: sqlite3.Connection, given: str | os.PathLike[str]) -> str | None:
    """Why the database of ``conn`` is not a Session this rio-ci reads, or None: not a
    Session, or written by a newer rio-ci (a format past ``SCHEMA_VERSION``). An older
    format is read: opening it migrates it (``migrations``)."""
    try:
        version = _schema_version(conn, given)
    except StorageError as exc:
        return str(exc)
    if version > SCHEMA_VERSION:
        return migrations.newer_message(given, version)
    if version < 1:
        return f"{given} has Session format {version}, which no rio-ci writes"
    return None


def _judge(uri: str, given: str | os.PathLike[str], *, integrity: bool = False) -> str | None:
    try:
        db = sqlite3.connect(uri, uri=True)
        try:
            check = [r[0] for r in db.execute("PRAGMA integrity_check")] if integrity else []
            if check not in ([], ["ok"]):
                return f"integrity_check failed: {check[0]}"
            problem = schema_problem(db, given)
            if problem is not None or not integrity:
                return problem
            return foreign_objects(db, given, _schema_version(db, given))
        finally:
            db.close()
    except sqlite3.Error as exc:
        return f"{given} is not a valid SQLite database ({exc})"


def foreign_objects(
    conn: sqlite3.Connection, given: str | os.PathLike[str], version: int = SCHEMA_VERSION
) -> str | None:
    """Why the database holds objects a Session of format ``version`` does not (triggers,
    views, tables or indexes of its own, or those of a later format), or None."""
    found = {
        (str(kind), str(name), str(table))
        for kind, name, table in conn.execute("SELECT type, name, tbl_name FROM sqlite_master")
    }
    extra = sorted(found - migrations.objects(version))
    if not extra:
        return None
    listed = ", ".join(f"{kind} {name!r}" for kind, name, _ in extra[:5])
    more = f" and {len(extra) - 5} more" if len(extra) > 5 else ""
    return f"{given} holds what no rio Session of format {version} holds: {listed}{more}"


def _schema_version(conn: sqlite3.Connection, path: str | os.PathLike[str]) -> int:
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if not {"meta", "events", "snapshot"} <= tables:
        raise StorageError(f"{path} is an SQLite file but not a rio_ci Session")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = ascii_int(str(row[0]) if row is not None else "", 9)
    if version is None:
        raise StorageError(f"{path} has no valid schema_version")
    return version


# --- single-file copies (artifacts) ------------------------------------------------------


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
    return _judge(f"{path.resolve().as_uri()}?mode=ro", path, integrity=True)
