"""The newest valid generation of a Session artifact: a Forge's generations tried newest
first, each skipped when it is not rio's own (``provenance``), refused when it expired or fails
``artifact.unpack``, until one passes."""

from __future__ import annotations

import contextlib
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rio_ci.core.errors import ArtifactError, ForgeError, StorageError
from rio_ci.core.json_value import is_int
from rio_ci.forge.base import Artifact, Forge
from rio_ci.store.artifact import (
    DEFAULT_MAX_BYTES,
    MANIFEST,
    MANIFEST_MAX_BYTES,
    SNAPSHOT,
    Manifest,
    remove_files,
    unpack,
)
from rio_ci.untrusted import jsonio

EXPIRED = "expired"  # the reason given for an artifact past its retention
GONE = 410  # how GitHub answers the download of an expired artifact


@dataclass(frozen=True)
class RefusedGeneration:
    """One generation ``restore_newest`` refused; ``generation`` is None when its manifest
    could not be read."""

    artifact_id: int
    created_at: str
    generation: int | None
    reason: str

    def __str__(self) -> str:
        which = f"generation {self.generation}" if self.generation is not None else "a generation"
        return f"{which} (artifact {self.artifact_id}, {self.created_at}) rejected: {self.reason}"


@dataclass(frozen=True)
class Restored:
    snapshot: Path
    manifest: Manifest
    artifact: Artifact


@dataclass(frozen=True)
class RestoreResult:
    """``restored`` is None when no generation passed. With ``rejected`` empty that means the
    Session has never been persisted; with rejections it means every copy is bad — the caller
    must then fail rather than start over, or it would publish over the lost history.
    ``skipped`` are artifacts that are not rio's own (another workflow's, a fork's): as if
    they did not exist, each with the reason."""

    restored: Restored | None
    rejected: tuple[RefusedGeneration, ...]
    skipped: tuple[RefusedGeneration, ...] = ()


Provenance = Callable[[Artifact], "str | None"]


def restore_newest(
    forge: Forge,
    name: str,
    work_dir: Path,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    provenance: Provenance | None = None,
    listed: list[Artifact] | None = None,
) -> RestoreResult:
    """Restore the newest valid generation of artifact ``name`` into ``work_dir/<artifact id>/``.

    Candidates are tried newest first. With ``provenance`` (why an artifact is not rio's own,
    or None), a candidate it objects to, or whose manifest's ``run_id`` is not the run that
    uploaded it, is skipped. Expired ones (listed so, or a download answered 410 Gone) and
    ones that fail ``unpack`` (or exceed the download limit) are recorded as
    ``RefusedGeneration``s and the next older one is tried. A ForgeError (network,
    permissions) propagates: falling back to an older generation because the newest could not
    be *fetched* would silently drop history. ``listed``: the generations as the caller
    just listed them (newest first), so they are not listed twice.
    """
    rejected: list[RefusedGeneration] = []
    skipped: list[RefusedGeneration] = []
    work_dir.mkdir(parents=True, exist_ok=True)
    for candidate in forge.artifacts(name) if listed is None else listed:
        foreign = provenance(candidate) if provenance is not None else None
        if foreign is not None:
            skipped.append(RefusedGeneration(candidate.id, candidate.created_at, None, foreign))
            continue
        outcome, generation = _try(forge, candidate, work_dir, max_bytes)
        if isinstance(outcome, Manifest) and provenance is not None:
            copied = _run_mismatch(outcome, candidate, work_dir)
            if copied is not None:
                skipped.append(copied)
                continue
        if isinstance(outcome, Manifest):
            restored = Restored(work_dir / str(candidate.id) / SNAPSHOT, outcome, candidate)
            return RestoreResult(restored, tuple(rejected), tuple(skipped))
        rejected.append(RefusedGeneration(candidate.id, candidate.created_at, generation, outcome))
    return RestoreResult(None, tuple(rejected), tuple(skipped))


def _run_mismatch(
    manifest: Manifest, candidate: Artifact, work_dir: Path
) -> RefusedGeneration | None:
    """A generation whose manifest names another run than the one that uploaded it is a
    copy (of another issue's, or an older job's): skipped, its files removed."""
    if manifest.run_id == candidate.run_id:
        return None
    remove_files([work_dir / str(candidate.id) / n for n in (SNAPSHOT, MANIFEST)])
    why = f"its manifest names run {manifest.run_id}, but run {candidate.run_id} uploaded it"
    return RefusedGeneration(candidate.id, candidate.created_at, manifest.generation, why)


def _try(
    forge: Forge, candidate: Artifact, work_dir: Path, max_bytes: int
) -> tuple[Manifest | str, int | None]:
    """The candidate's verified Manifest, or why it was refused and the generation it claims."""
    if candidate.expired:
        return EXPIRED, None
    if candidate.size_in_bytes > max_bytes + MANIFEST_MAX_BYTES:
        return f"{candidate.size_in_bytes} bytes, over the {max_bytes}-byte limit", None
    zip_path = work_dir / f"{candidate.id}.zip"
    target = work_dir / str(candidate.id)
    try:
        forge.download_artifact(candidate.id, zip_path)
        return unpack(zip_path, target, max_bytes=max_bytes), None
    except ForgeError as exc:
        if exc.status != GONE:
            raise
        return EXPIRED, None  # GitHub's answer for an artifact past its retention
    except ArtifactError as exc:
        generation = _peek_generation(zip_path)
        with contextlib.suppress(OSError):
            target.rmdir()
        return str(exc), generation
    except StorageError as exc:  # the download went over its size limit
        return str(exc), None
    finally:
        zip_path.unlink(missing_ok=True)


def _peek_generation(zip_path: Path) -> int | None:
    """The generation a refused artifact claims, for the log line only (never trusted)."""
    try:
        with zipfile.ZipFile(zip_path) as bundle:
            info = bundle.getinfo(MANIFEST)
            if info.file_size > MANIFEST_MAX_BYTES:
                return None
            data: Any = jsonio.loads(bundle.read(info), "the manifest")
        generation = data.get("generation") if isinstance(data, dict) else None
        return generation if is_int(generation) else None
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, EOFError, zlib.error):
        return None
