"""The checkout's git directories when rio-ci's steps end: nothing a Cell wrote there runs later.

The steps after rio-ci's run git in the checkout with a credential in reach: the checkout
action's post step runs ``git config --local …`` and ``git submodule foreach --recursive …``
there with its token input in its environment (docs/security.md, "After rio-ci's steps"). A
Cell could write what git runs: ``core.fsmonitor`` (run at the next read of the index), hooks,
filter drivers, ``core.sshCommand``, an ``include.path``, ``.git/modules/<x>/config``, and
repositories of its own in the working tree, which ``foreach --recursive`` enters.

So ``keep`` (from ``workspace.adopt``, before any Cell runs) copies the metadata of the
checkout's ``.git`` and of every repository nested in the tree at that moment — everything but
``objects/`` and ``lfs/``, regular files and directories only — into the harness's state
directory (``KEPT``), with the owner of the checkout; and ``restore`` (the end of the run step
and of the finish step, after the tree is handed back):

- the checkout's ``.git``: every entry but ``objects/`` and ``lfs/`` is removed and written
  again — ``config``, ``hooks/``, ``info/``, ``modules/`` and the rest as kept, ``HEAD``,
  ``refs/``, ``packed-refs``, ``shallow`` and the ``index`` as the harness's own git directory
  has them (the branch it checked out and checkpointed); in ``objects/`` and ``lfs/`` anything
  that is not a regular file or a directory goes, and so do alternates, and the harness's
  objects are copied in. A ``.git`` that is no longer a directory is made again;
- a repository nested in the tree before any Cell ran gets the same from its own copy (its
  objects stay as they are); a submodule's ``.git`` file is written again as it was;
- every other ``.git`` in the tree (found by ``survey``, never opened) is removed: a
  repository a Cell made keeps its files and loses its git metadata, so no later git treats
  it as a repository. Its directory is remembered (``removed``): later checkpoints of the
  job leave it out still, as they would have with its ``.git``.

Everything written is given to the checkout's owner as ``keep`` found it.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any, BinaryIO

from rio_ci.core.errors import ForgeError
from rio_ci.github.survey import survey
from rio_ci.untrusted.treefile import read_tree_file

KEPT = "kept-git"  # under the job's state directory
MANIFEST = "manifest.json"
DATA = ("objects", "lfs")  # kept in place, cleaned; everything else is written again
HISTORY = ("HEAD", "packed-refs", "shallow", "index", "refs")  # from the harness's git
CLEAN_LIMIT = 1_000_000  # entries of objects/ (or lfs/) cleaned in place; more: removed
_ALTERNATES = ("info/alternates", "info/http-alternates")
_GITFILE_LIMIT = 4096


def keep(state_dir: Path, checkout: Path) -> None:
    """Copy the metadata of ``checkout/.git`` and of every repository nested in the tree
    (and the checkout's owner) into ``state_dir/KEPT``. Call it before any Cell runs."""
    kept = state_dir / KEPT
    if kept.exists():
        shutil.rmtree(kept)
    kept.mkdir(mode=0o700, parents=True)
    _replicate(checkout / ".git", kept / "top", skip=DATA)
    nested: dict[str, dict[str, str]] = {}
    for index, path in enumerate(survey(checkout).repositories):
        info = os.lstat(checkout / path)
        if stat.S_ISDIR(info.st_mode):
            _replicate(checkout / path, kept / str(index), skip=DATA)
            nested[path] = {"kind": "dir", "copy": str(index)}
        elif stat.S_ISREG(info.st_mode):
            read = read_tree_file(checkout, path, _GITFILE_LIMIT)
            if read.data is not None and not read.over:
                nested[path] = {"kind": "file", "text": read.data.decode("utf-8", "replace")}
    owner = os.lstat(checkout)
    manifest = {"uid": owner.st_uid, "gid": owner.st_gid, "nested": nested}
    (kept / MANIFEST).write_text(json.dumps(manifest))


def restore(state_dir: Path, checkout: Path, harness_dir: Path) -> list[str]:
    """Rebuild the checkout's git directories from what ``keep`` kept and from the harness's
    git directory ``harness_dir`` (module docstring); returns the nested ``.git`` paths it
    removed. Nothing happens when ``keep`` never ran in this job. Raises ``ForgeError`` when
    the tree cannot be walked (its nested repositories are then unknown)."""
    kept = state_dir / KEPT
    if not (kept / MANIFEST).is_file():
        return []
    manifest: dict[str, Any] = json.loads((kept / MANIFEST).read_text())
    owner = (int(manifest["uid"]), int(manifest["gid"]))
    dot = checkout / ".git"
    _rebuild(dot, kept / "top", owner)
    for name in HISTORY:
        _remove(dot / name)
        _replicate(harness_dir / name, dot / name, owner)
    _replicate(harness_dir / "objects", dot / "objects", owner, missing_only=True)
    gone = _nested(checkout, kept, manifest["nested"], owner)
    if gone:
        folders = [Path(path).parent.as_posix() for path in gone]
        manifest["removed"] = sorted({*manifest.get("removed", []), *folders})
        (kept / MANIFEST).write_text(json.dumps(manifest))
    return gone


def removed(state_dir: Path) -> list[str]:
    """The directories (relative to the checkout) whose ``.git`` ``restore`` removed in this
    job: repositories Cells made."""
    kept = state_dir / KEPT / MANIFEST
    if not kept.is_file():
        return []
    return list(json.loads(kept.read_text()).get("removed", []))


def _nested(
    checkout: Path, kept: Path, known: dict[str, dict[str, str]], owner: tuple[int, int]
) -> list[str]:
    gone = []
    for path in survey(checkout).repositories:
        target = checkout / path
        entry = known.get(path)
        if entry is not None and entry["kind"] == "dir" and _is_dir(target):
            _rebuild(target, kept / entry["copy"], owner)
        elif entry is not None and entry["kind"] == "file":
            _remove(target)
            _write_new(target, io.BytesIO(entry["text"].encode()), owner)
        else:
            _remove(target)
            gone.append(path)
    return gone


def _rebuild(dot: Path, copy: Path, owner: tuple[int, int]) -> None:
    """``dot`` as kept in ``copy``: all but ``DATA`` written again, ``DATA`` cleaned."""
    if not _is_dir(dot):
        _remove(dot)
        dot.mkdir(mode=0o755)
        _own(dot, owner)
    for entry in _listing(dot):
        if entry.name not in DATA or not entry.is_dir(follow_symlinks=False):
            _remove(Path(entry.path))
    for name in DATA:
        _clean(dot / name)
    _replicate(copy, dot, owner)


def _clean(data: Path) -> None:
    """Leave only regular files and directories under ``data``, and no alternates; a
    folder of more than ``CLEAN_LIMIT`` entries is removed whole instead (the objects the
    checkout needs are copied in again from the harness's git directory)."""
    if not _is_dir(data):
        return
    for name in _ALTERNATES:
        _remove(data / name)
    seen = 0
    for folder, dirs, files in os.walk(data):
        seen += len(dirs) + len(files)
        if seen > CLEAN_LIMIT:
            _remove(data)
            return
        for name in [*dirs, *files]:
            path = Path(folder) / name
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                _remove(path)  # a link (os.walk lists it, never enters it), a FIFO, a device


def _replicate(
    source: Path,
    target: Path,
    owner: tuple[int, int] | None = None,
    *,
    skip: tuple[str, ...] = (),
    missing_only: bool = False,
) -> None:
    """Copy the regular files and directories under ``source`` to ``target`` (modes without
    setuid, setgid or sticky bits; names in ``skip`` left out at the top), each one made
    given to ``owner``."""
    info = _lstat(source)
    if info is None:
        return
    if stat.S_ISDIR(info.st_mode):
        if not _is_dir(target):
            target.mkdir(mode=0o755)
            _own(target, owner)
        for entry in _listing(source):
            if entry.name not in skip:
                _replicate(Path(entry.path), target / entry.name, owner, missing_only=missing_only)
    elif stat.S_ISREG(info.st_mode) and not (missing_only and os.path.lexists(target)):
        with source.open("rb") as data:
            _write_new(target, data, owner, stat.S_IMODE(info.st_mode) & 0o777)


def _write_new(
    path: Path, data: BinaryIO, owner: tuple[int, int] | None, mode: int = 0o644
) -> None:
    """Write ``data`` to ``path``, which must not exist (a link there is not followed)."""
    handle = os.open(
        path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode
    )
    with os.fdopen(handle, "wb") as out:
        os.fchmod(handle, mode)
        if owner is not None and os.geteuid() == 0:
            os.fchown(handle, *owner)
        shutil.copyfileobj(data, out)


def _listing(folder: Path) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as entries:
        return list(entries)


def _own(path: Path, owner: tuple[int, int] | None) -> None:
    if owner is not None and os.geteuid() == 0:
        os.lchown(path, *owner)


def _remove(path: Path) -> None:
    info = _lstat(path)
    if info is None:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)  # removes links, never follows them
    else:
        path.unlink()


def _is_dir(path: Path) -> bool:
    info = _lstat(path)
    return info is not None and stat.S_ISDIR(info.st_mode)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ForgeError(f"{path} cannot be examined: {exc.strerror}") from None
