"""The Session artifact: how a Session travels between jobs (stdlib only).

An artifact is a zip of exactly two files:

    session.sqlite3   a single-file snapshot of the Session (rollback journal, no WAL)
    manifest.json     {"schema": "rio.artifact/1", "generation", "parent_generation",
                       "run_id", "sha256", "next_wake"}

``pack`` writes both files into a directory (the upload step zips it); ``unpack`` refuses any
zip that is not exactly that, checking every entry before anything is written, then checks the
manifest, the checksum, ``PRAGMA integrity_check`` and the Session schema. Every refusal is an
``ArtifactError`` with a one-line reason. ``rio_ci.github.newest.restore_newest`` walks a
Forge's generations newest first and returns the first one that passes.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import math
import os
import re
import shutil
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TypedDict

import rio_ci
from rio_ci.core.errors import ArtifactError, StorageError
from rio_ci.core.json_value import is_int
from rio_ci.faults.crashpoints import crash_point
from rio_ci.store.migrations import NEWER
from rio_ci.store.sessionfile import copy_single_file, single_file_problem
from rio_ci.untrusted import jsonio

MANIFEST_VERSION = 1  # the manifest's own schema (the snapshot's format is in its meta table)
SCHEMA = f"rio.artifact/{MANIFEST_VERSION}"
_SCHEMA_NAME = re.compile(r"rio\.artifact/([1-9][0-9]{0,8})")
SNAPSHOT = "session.sqlite3"
MANIFEST = "manifest.json"
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
MANIFEST_MAX_BYTES = 64 * 1024
# Deflate cannot expand much beyond ~1032:1; a large entry claiming more is a lie or a bomb.
MAX_RATIO = 1000
_RATIO_FLOOR = 1024 * 1024  # small entries may compress absurdly well; their size is harmless
_SQLITE_MAGIC = b"SQLite format 3\x00"
_CHUNK = 1024 * 1024


class ManifestDict(TypedDict):
    schema: str
    generation: int
    parent_generation: int | None
    run_id: int | None
    sha256: str
    next_wake: float | None


@dataclass(frozen=True)
class Manifest:
    """What a generation says about itself. ``generation`` >= 1; ``parent_generation`` is the
    generation it was restored from (None for the first); ``next_wake`` is the earliest Timer
    deadline in Unix seconds, or None."""

    generation: int
    parent_generation: int | None
    run_id: int | None
    sha256: str
    next_wake: float | None

    def to_dict(self) -> ManifestDict:
        return {
            "schema": SCHEMA,
            "generation": self.generation,
            "parent_generation": self.parent_generation,
            "run_id": self.run_id,
            "sha256": self.sha256,
            "next_wake": self.next_wake,
        }

    @classmethod
    def from_dict(cls, data: object) -> Manifest:
        """Parse a manifest; anything but the exact rio.artifact/1 shape raises ValueError."""
        if not isinstance(data, dict):
            raise ValueError("manifest is not a JSON object")
        _check_schema(data.get("schema"))
        expected = set(ManifestDict.__annotations__)
        if set(data) != expected:
            raise ValueError(f"manifest fields {sorted(data)} differ from {sorted(expected)}")
        generation, parent = data["generation"], data["parent_generation"]
        run_id, digest, wake = data["run_id"], data["sha256"], data["next_wake"]
        if not is_int(generation) or generation < 1:
            raise ValueError("manifest generation must be an integer >= 1")
        if parent is not None and not (is_int(parent) and 0 <= parent < generation):
            raise ValueError("manifest parent_generation must be null or below generation")
        if run_id is not None and not is_int(run_id):
            raise ValueError("manifest run_id must be an integer or null")
        if not (
            isinstance(digest, str)
            and len(digest) == 64
            and all(ch in "0123456789abcdef" for ch in digest)
        ):
            raise ValueError("manifest sha256 must be 64 lowercase hex digits")
        if wake is not None and not (
            isinstance(wake, int | float) and not isinstance(wake, bool) and math.isfinite(wake)
        ):
            raise ValueError("manifest next_wake must be a number or null")
        return cls(generation, parent, run_id, digest, None if wake is None else float(wake))


def _check_schema(schema: object) -> None:
    """Refuse a manifest of another schema: a newer one names both versions (its snapshot
    may be of a Session format this rio-ci cannot read either); anything else is not a rio
    artifact. docs/design.md: a manifest schema older than this one would be read here and
    converted (there is none yet: ``rio.artifact/1`` is the first)."""
    if schema == SCHEMA:
        return
    newer = _SCHEMA_NAME.fullmatch(schema) if isinstance(schema, str) else None
    if newer is not None and int(newer[1]) > MANIFEST_VERSION:
        raise ValueError(
            f"the artifact {NEWER} (manifest {schema}; this rio-ci "
            f"{rio_ci.__version__} reads {SCHEMA}): upgrade rio-ci"
        )
    raise ValueError(f"manifest schema is {schema!r}, expected {SCHEMA!r}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def pack(
    db_path: Path,
    out_dir: Path,
    *,
    generation: int,
    parent_generation: int | None,
    run_id: int | None,
    next_wake: float | None,
) -> Path:
    """Write ``session.sqlite3`` and ``manifest.json`` into ``out_dir`` and return ``out_dir``.

    The snapshot is a consistent copy of the live (WAL) database made with the backup API,
    read-only, while an Owner may keep writing; the copy is switched to
    ``journal_mode=DELETE`` so it is one self-contained file. ``out_dir`` may hold nothing
    else, because the whole directory becomes the artifact and ``unpack`` refuses extra
    entries. Manifest values ``unpack`` would refuse raise ValueError before anything is
    written; a Session that cannot be copied raises ``StorageError``.
    """
    Manifest.from_dict(
        Manifest(generation, parent_generation, run_id, "0" * 64, next_wake).to_dict()
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    strays = sorted(p.name for p in out_dir.iterdir() if p.name not in (SNAPSHOT, MANIFEST))
    if strays:
        raise StorageError(f"{out_dir} must hold only the artifact, found {strays}")
    if not db_path.is_file():
        raise StorageError(f"no Session file at {db_path}")
    partial = out_dir / f".{SNAPSHOT}.partial"
    try:
        partial.unlink(missing_ok=True)
        copy_single_file(db_path, partial)
        with partial.open("rb") as stream:
            os.fsync(stream.fileno())
        manifest = Manifest(generation, parent_generation, run_id, _sha256(partial), next_wake)
        os.replace(partial, out_dir / SNAPSHOT)
        crash_point("artifact_pack_midway")
        manifest_partial = out_dir / f".{MANIFEST}.partial"
        manifest_partial.write_text(
            json.dumps(manifest.to_dict(), indent=2, allow_nan=False) + "\n"
        )
        os.replace(manifest_partial, out_dir / MANIFEST)
    except OSError as exc:
        raise StorageError(f"cannot snapshot {db_path}: {_one_line(exc)}") from exc
    finally:
        partial.unlink(missing_ok=True)
        Path(f"{partial}-journal").unlink(missing_ok=True)
    return out_dir


def replace_directory(aside: Path, target: Path) -> None:
    """Make the complete directory ``aside`` the one at ``target`` in one step, so a kill at
    any instant leaves ``target`` holding the old contents or the new, never a mix, never
    empty. Linux swaps the two with ``renameat2(RENAME_EXCHANGE)`` and then removes the old
    one (now at ``aside``); where that call is missing, two renames leave a moment with no
    ``target`` at all (an upload then finds nothing: no partial generation is published).
    Both directories must be on one file system (siblings)."""
    if not target.exists():
        os.rename(aside, target)
    elif not _exchange(aside, target):
        retired = aside.with_name(aside.name + ".old")
        shutil.rmtree(retired, ignore_errors=True)
        os.rename(target, retired)
        os.rename(aside, target)
        aside = retired
    _fsync_dir(target.parent)
    crash_point("artifact_swapped")
    shutil.rmtree(aside, ignore_errors=True)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically; False when this system cannot (not Linux, an old libc,
    or a file system without RENAME_EXCHANGE)."""
    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    result = call(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def archive(out_dir: Path, zip_path: Path) -> Path:
    """Zip a ``pack`` directory the way an artifact upload does (for local forges and tests)."""
    with zipfile.ZipFile(zip_path, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for name in (SNAPSHOT, MANIFEST):
            bundle.write(out_dir / name, arcname=name)
    return zip_path


def _entry_problem(info: zipfile.ZipInfo, limit: int) -> str | None:
    """Why this zip entry may not be extracted, or None."""
    return _path_problem(info) or _content_problem(info, limit)


def _path_problem(info: zipfile.ZipInfo) -> str | None:
    """An entry that is not one of the two regular files an artifact holds, at its top."""
    name = info.filename
    mode = info.external_attr >> 16
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return f"zip entry {name!r} has an absolute path"
    if ".." in PurePosixPath(name).parts or "\\" in name:
        return f"zip entry {name!r} attempts path traversal"
    if info.is_dir() or info.external_attr & 0x10:
        return f"zip entry {name!r} is a directory"
    if stat.S_ISLNK(mode):
        return f"zip entry {name!r} is a symlink"
    # Some writers (Python's writestr among them) store permission bits without a file type.
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
        return f"zip entry {name!r} is not a regular file"
    if name not in (SNAPSHOT, MANIFEST):
        return f"unexpected zip entry {name!r}"
    return None


def _content_problem(info: zipfile.ZipInfo, limit: int) -> str | None:
    """An entry whose bytes cannot be read safely: encrypted, an unknown compression, too
    large, or claiming a ratio only a zip bomb has."""
    name = info.filename
    if info.flag_bits & 0x1:
        return f"zip entry {name!r} is encrypted"
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        return f"zip entry {name!r} uses an unsupported compression"
    if info.file_size > limit:
        return f"zip entry {name!r} is {info.file_size} bytes, over the {limit}-byte limit"
    if info.file_size > _RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
        return f"zip entry {name!r} claims a compression ratio over {MAX_RATIO}:1"
    return None


def _check_entries(bundle: zipfile.ZipFile, max_bytes: int) -> list[zipfile.ZipInfo]:
    infos = bundle.infolist()
    seen: set[str] = set()
    for info in infos:
        limit = MANIFEST_MAX_BYTES if info.filename == MANIFEST else max_bytes
        problem = _entry_problem(info, limit)
        if problem is None and info.filename in seen:
            problem = f"duplicate zip entry {info.filename!r}"
        if problem is not None:
            raise ArtifactError(problem)
        seen.add(info.filename)
    missing = sorted({SNAPSHOT, MANIFEST} - seen)
    if missing:
        raise ArtifactError(f"missing zip entry {', '.join(missing)}")
    if sum(info.file_size for info in infos) > max_bytes + MANIFEST_MAX_BYTES:
        raise ArtifactError("zip entries add up to more than the size limit")
    return infos


def _extract(bundle: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path) -> None:
    # Count what really comes out instead of trusting the header's size.
    written = 0
    with bundle.open(info) as source, target.open("wb") as out:
        while chunk := source.read(_CHUNK):
            written += len(chunk)
            if written > info.file_size:
                raise ArtifactError(f"zip entry {info.filename!r} is larger than declared")
            out.write(chunk)


def _check_session(snapshot: Path) -> None:
    with snapshot.open("rb") as stream:
        header = stream.read(100)
    if len(header) < 100 or not header.startswith(_SQLITE_MAGIC):
        raise ArtifactError("snapshot is not an SQLite database")
    if header[18] != 1 or header[19] != 1:
        raise ArtifactError("snapshot is in WAL mode, not a single-file snapshot")
    problem = single_file_problem(snapshot)
    if problem is not None and NEWER in problem:  # not damage: said as it is
        raise ArtifactError(f"snapshot refused: {_one_line(problem)}")
    if problem is not None:
        raise ArtifactError(
            f"snapshot refused (not a rio Session, or damaged): {_one_line(problem)}"
        )


def unpack(zip_path: Path, dest_dir: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Manifest:
    """Verify the artifact ``zip_path`` and leave ``session.sqlite3`` and ``manifest.json`` in
    ``dest_dir``. Nothing is written before every entry has passed its checks; on any refusal
    (``ArtifactError``, one-line reason) neither file is left behind."""
    targets = [dest_dir / SNAPSHOT, dest_dir / MANIFEST]
    try:
        _extract_checked(zip_path, dest_dir, max_bytes)
        try:
            manifest = Manifest.from_dict(
                jsonio.loads((dest_dir / MANIFEST).read_bytes(), "the manifest")
            )
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError included
            raise ArtifactError(f"manifest refused: {_one_line(exc)}") from exc
        if _sha256(dest_dir / SNAPSHOT) != manifest.sha256:
            raise ArtifactError(
                "snapshot sha256 does not match the manifest (tampered or corrupted)"
            )
        _check_session(dest_dir / SNAPSHOT)
        return manifest
    except ArtifactError:
        remove_files(targets)
        raise


def _extract_checked(zip_path: Path, dest_dir: Path, max_bytes: int) -> None:
    try:
        with zipfile.ZipFile(zip_path) as bundle:
            infos = _check_entries(bundle, max_bytes)
            dest_dir.mkdir(parents=True, exist_ok=True)
            for info in infos:
                _extract(bundle, info, dest_dir / info.filename)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError) as exc:
        raise ArtifactError(f"not a valid zip archive: {_one_line(exc)}") from exc


def _one_line(reason: object) -> str:
    return " ".join(str(reason).split()) or type(reason).__name__


def remove_files(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
