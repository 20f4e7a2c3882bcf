"""rio-ci's own install, sealed against the Cell user (docs/design.md, "rio-ci's own install,
sealed"; docs/security.md).

The root Owner, the finish step and the bridge that serves ``rio_ci.api`` run rio-ci's
interpreter and import its packages with the token in reach, so a Cell that could write any
of it (Python's ``os.py``, a ``sitecustomize.py`` or a ``python311.zip`` where the interpreter
looks for one, a package of the venv) would run inside them. GitHub's Ubuntu images leave
the tool cache, where setup-python installs the Python that rio-ci's venv links to, writable
by every user. So before an Owner's first Cell runs as a Cell user (``seal``: once per Owner
start, and only then), what that user could write of it is closed:

- **What is rio-ci's own** (``Install.of_this_process``): the interpreter's real file and
  libpython; the standard library, lib-dynload, site-packages, the venv and rio_ci's own
  package, each walked whole; the folders where a new entry would be picked up without being
  in any of them (the interpreter's folder and the one above, where ``pyvenv.cfg`` is looked
  for; where a missing ``sys.path`` entry such as ``python311.zip`` would appear); and every
  folder above all of these. The base install's site-packages, which a venv never imports, is
  left out, and so are ``sys.path`` entries outside the install (the working directory of a
  ``python -m``, ``PYTHONPATH``): the rio-ci command starts isolated and has none.
- **What the Cell user could write** (``survey``): an entry it owns; a folder or regular file
  writable by others, or by its group (it has no other); except a folder above those with
  the sticky bit, where it may add entries of its own but never remove or rename another
  user's. A link is never followed; an entry on a file system that is read-only as a whole
  (every mount of it) is writable by nobody.
- **Closing**: the others' write bit goes, and the group's unless the group is the harness's
  own, through a descriptor opened without following links and checked to be the entry
  looked at; folders before what they hold. One line (``notice``) names what was closed.

An entry the Cell user owns (an earlier Cell may have changed it, and closing it would not
take that back) or one that cannot be closed refuses the Owner before any Cell runs: Cells
sharing the harness's user would run as root here.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import rio_ci
from rio_ci.core.errors import RioError
from rio_ci.run.confinement.user import CellUser

__all__ = ["Finding", "Install", "Survey", "harness_groups", "seal", "survey"]

_SHOWN = 5  # the entries a line names; the rest are counted
_MAPS = "/proc/self/maps"
_MOUNTS = "/proc/self/mountinfo"


@dataclass(frozen=True)
class Install:
    """What the harness runs of its own, as real paths."""

    files: tuple[str, ...] = ()  # each checked: the interpreter, libpython
    trees: tuple[str, ...] = ()  # each walked whole
    folders: tuple[str, ...] = ()  # checked, not walked: a new entry there would be picked up
    left_out: frozenset[str] = frozenset()  # inside a tree, and neither checked nor walked

    @classmethod
    def of_this_process(cls) -> Install:
        """This interpreter's (see above)."""
        trees, folders = _path_entries()
        if sys.prefix != sys.base_prefix:
            trees.append(os.path.realpath(sys.prefix))  # the venv: its bin/ and pyvenv.cfg
        trees.append(os.path.dirname(os.path.realpath(rio_ci.__file__)))
        files: list[str] = []
        if sys.executable:
            files = [os.path.realpath(sys.executable), *_libpython()]
            for program in (sys.executable, files[0]):
                folder = os.path.realpath(os.path.dirname(program))
                folders += [folder, os.path.dirname(folder)]  # where pyvenv.cfg is read
        base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
        left_out = {os.path.realpath(base[name]) for name in ("purelib", "platlib")}
        return cls(
            tuple(files),
            tuple(dict.fromkeys(trees)),
            tuple(dict.fromkeys(folders)),
            frozenset(left_out - set(trees)),
        )


@dataclass(frozen=True)
class Finding:
    """An entry the Cell user could write, as it was looked at."""

    path: str
    info: os.stat_result
    owned: bool  # the Cell user owns it: it could open it again

    @property
    def mode(self) -> int:
        return stat.S_IMODE(self.info.st_mode)


@dataclass(frozen=True)
class Survey:
    findings: tuple[Finding, ...]  # folders before what they hold
    looked_at: int  # entries looked at


def seal(user: CellUser, notice: Callable[[str], None], install: Install | None = None) -> None:
    """Before the first Cell of an Owner runs as ``user``: close what ``user`` could write of
    ``install`` (this process's own by default) and say so through ``notice`` in one line.
    RioError when something of it is the user's (nothing is changed then) or cannot be
    closed."""
    try:
        found = survey(install or Install.of_this_process(), user).findings
    except OSError as exc:
        raise RioError(
            f"cannot check rio-ci's own interpreter and packages against the Cell user "
            f"{user.name}: {exc}"
        ) from None
    owned = [finding.path for finding in found if finding.owned]
    if owned:
        raise RioError(
            f"the Cell user {user.name} owns {_listing(owned, owned)} in rio-ci's own "
            "interpreter and packages: a Cell may have changed them already, so no Cell runs "
            "(and never as root instead); reinstall them, or remove what that user owns "
            "there, and start again"
        )
    groups = harness_groups(os.environ)
    closed: list[Finding] = []
    failed: list[tuple[Finding, str]] = []
    for finding in found:
        problem = _close(finding, user, groups)
        if problem is None:
            closed.append(finding)
        else:
            failed.append((finding, problem))
    if closed:
        shown = [_was(f) for f in closed]
        notice(
            f"closed {_kinds(closed)} of its own interpreter and packages that the Cell user "
            f"{user.name} could write: {_listing(shown, [f.path for f in closed])}"
        )
    if failed:
        shown = [_was(f, why) for f, why in failed]
        raise RioError(
            f"cannot close {_listing(shown, [f.path for f, _ in failed])} in rio-ci's own "
            f"interpreter and packages, which the Cell user {user.name} could write: no Cell "
            "runs (and never as root instead); make them writable by their owner alone and "
            "start again"
        )


def survey(install: Install, user: CellUser) -> Survey:
    """Every entry of ``install`` that ``user`` could write (see above), each looked at once
    with ``lstat``."""
    judge = _Judge(user, _read_only_devices())
    for tree in install.trees:
        judge.tree(tree, install.left_out)
    for path in [*install.folders, *install.files]:
        judge.path(path, strict=True)
    for path in _above([*install.trees, *install.folders, *install.files]):
        judge.path(path, strict=False)
    return Survey(tuple(sorted(judge.found, key=lambda f: f.path)), len(judge.seen))


def harness_groups(environ: Mapping[str, str]) -> frozenset[int]:
    """Root's group, this process's, and for root started through sudo the group of the user
    who ran it (``SUDO_GID``): a group write bit of theirs stays."""
    groups = {0, os.getgid(), os.getegid()}
    by_sudo = environ.get("SUDO_GID", "")
    if os.geteuid() == 0 and by_sudo.isascii() and by_sudo.isdigit():
        groups.add(int(by_sudo))
    return frozenset(groups)


class _Judge:
    def __init__(self, user: CellUser, read_only: frozenset[int]):
        self.user = user
        self.read_only = read_only
        self.seen: set[str] = set()
        self.found: list[Finding] = []

    def tree(self, root: str, left_out: frozenset[str]) -> None:
        """``root`` and everything under it, never through a link."""
        if root in self.seen or (info := _lstat(root)) is None:
            return
        self.entry(root, info, strict=True)
        folders = [root] if stat.S_ISDIR(info.st_mode) else []
        while folders:
            for path, info in _entries(folders.pop()):
                if path in left_out or path in self.seen:
                    continue  # left out, or walked as a tree of its own already
                self.entry(path, info, strict=True)
                if stat.S_ISDIR(info.st_mode):
                    folders.append(path)

    def path(self, path: str, *, strict: bool) -> None:
        if path not in self.seen and (info := _lstat(path)) is not None:
            self.entry(path, info, strict=strict)

    def entry(self, path: str, info: os.stat_result, *, strict: bool) -> None:
        """``strict``: a new entry here would be picked up, so the sticky bit excuses
        nothing."""
        self.seen.add(path)
        owned = info.st_uid == self.user.uid
        if owned or (self._writable(info, strict) and info.st_dev not in self.read_only):
            self.found.append(Finding(path, info, owned))

    def _writable(self, info: os.stat_result, strict: bool) -> bool:
        mode = info.st_mode
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            return False  # a link is not written through its own mode; nothing else is code
        by_group = info.st_gid == self.user.gid and mode & stat.S_IWGRP
        if not (mode & stat.S_IWOTH or by_group):
            return False
        return strict or not (stat.S_ISDIR(mode) and mode & stat.S_ISVTX)


def _close(finding: Finding, user: CellUser, groups: frozenset[int]) -> str | None:
    """Take the write bits away (see above): None when done, else why not."""
    mode = finding.mode & ~stat.S_IWOTH
    if finding.info.st_gid == user.gid or finding.info.st_gid not in groups:
        mode &= ~stat.S_IWGRP
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    if stat.S_ISDIR(finding.info.st_mode):
        flags |= os.O_DIRECTORY
    try:
        fd = os.open(finding.path, flags)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (finding.info.st_dev, finding.info.st_ino):
            return "replaced while rio-ci looked at it"
        os.fchmod(fd, mode)
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    finally:
        os.close(fd)
    return None


# --- paths ------------------------------------------------------------------------------------


def _path_entries() -> tuple[list[str], list[str]]:
    """The ``sys.path`` and ``sysconfig`` paths inside the install's prefixes: those that
    exist (to walk), and the nearest folder of those that do not (where one would appear)."""
    prefixes = {
        os.path.realpath(prefix)
        for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
    }
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    trees: list[str] = []
    folders: list[str] = []
    for path in [*sys.path, *(sysconfig.get_path(name) for name in names)]:
        real = os.path.realpath(path) if os.path.isabs(path) else ""
        if not any(_inside(real, prefix) for prefix in prefixes):
            continue  # the working directory's, PYTHONPATH's: not rio-ci's install
        if os.path.lexists(real):
            trees.append(real)
        else:
            folders.append(_nearest_folder(real))
    return trees, folders


def _inside(path: str, folder: str) -> bool:
    return bool(path) and (path == folder or path.startswith(folder.rstrip(os.sep) + os.sep))


def _nearest_folder(path: str) -> str:
    """The nearest folder above ``path`` that exists: where it would appear."""
    folder = os.path.dirname(path)
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return folder


def _above(paths: Iterable[str]) -> list[str]:
    """Every folder above ``paths`` (real paths), each once."""
    found: dict[str, None] = {}
    for path in paths:
        folder = os.path.dirname(path)
        while folder not in found:
            found[folder] = None
            if os.path.dirname(folder) == folder:
                break
            folder = os.path.dirname(folder)
    return list(found)


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _entries(folder: str) -> list[tuple[str, os.stat_result]]:
    """What ``folder`` holds, each entry ``lstat``ed; nothing when it went away."""
    found = []
    try:
        with os.scandir(folder) as listing:
            for entry in listing:
                with contextlib.suppress(FileNotFoundError):
                    found.append((entry.path, entry.stat(follow_symlinks=False)))
    except (FileNotFoundError, NotADirectoryError):
        return []
    return found


def _libpython() -> list[str]:
    """The real paths of the libpython this process mapped (none for a static build)."""
    found: dict[str, None] = {}
    with contextlib.suppress(OSError), open(_MAPS) as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and os.path.basename(fields[5]).startswith("libpython"):
                found[os.path.realpath(fields[5].strip())] = None
    return list(found)


def _read_only_devices() -> frozenset[int]:
    """The devices whose file system is read-only as a whole (its superblock, not one mount
    of it: a read-only bind mount leaves the file writable through another)."""
    found: set[int] = set()
    with contextlib.suppress(OSError), open(_MOUNTS) as mounts:
        for line in mounts:
            fields = line.split()
            with contextlib.suppress(ValueError, IndexError):
                separator = fields.index("-", 6)
                if "ro" in fields[separator + 3].split(","):
                    major, minor = fields[2].split(":")
                    found.add(os.makedev(int(major), int(minor)))
    return frozenset(found)


# --- the lines --------------------------------------------------------------------------------


def _listing(shown: list[str], paths: list[str]) -> str:
    """The first ``_SHOWN`` of ``shown`` named, the rest counted under the folder their
    ``paths`` share."""
    named = ", ".join(shown[:_SHOWN])
    rest = paths[_SHOWN:]
    return f"{named} and {len(rest)} more under {os.path.commonpath(rest)}" if rest else named


def _was(finding: Finding, why: str = "") -> str:
    return f"{finding.path} (was {finding.mode:04o}{': ' + why if why else ''})"


def _kinds(found: list[Finding]) -> str:
    folders = sum(1 for f in found if stat.S_ISDIR(f.info.st_mode))
    files = len(found) - folders
    if files and folders:
        return f"{len(found)} entries ({_count(folders, 'folder')}, {_count(files, 'file')})"
    return _count(folders, "folder") if folders else _count(files, "file")


def _count(number: int, word: str) -> str:
    return f"{number} {word}{'' if number == 1 else 's'}"
