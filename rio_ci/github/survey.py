"""What of the working tree git may be shown: a bounded walk that opens nothing but directories.

The working tree is the agent's, and git, asked to ``add --all``, opens what it finds there: it
probes every directory for a nested repository (reading ``sub/.git/HEAD``: a FIFO there blocks
it for good), reads every ``.gitignore`` and ``.gitattributes`` on its way whole, and hashes
every file it adds, however large (a 1 TB sparse file takes hours). So before git runs, rio-ci
walks the tree itself: each directory opened with ``O_NOFOLLOW | O_DIRECTORY`` and listed with
``os.scandir``, sizes from ``lstat``, no link followed, nothing else opened. The walk is bounded
(``Bounds``: entries and seconds; past either it raises ``ForgeError``) and finds

- nested repositories: a directory holding a ``.git`` of any kind (directory, file, link, FIFO)
  is left out whole, its metadata opened neither by rio-ci nor by git; every such ``.git`` is
  also listed (``repositories``), at any depth, for the hand-back (``rio_ci.github.gitdirs``);
- FIFOs, sockets and devices: git cannot store them; left out;
- regular files over ``SIZE_CAP`` (GitHub blocks files over 100 MB; docs/github.md): left out;
- a ``.gitignore`` or ``.gitattributes`` that is a FIFO, a socket or a device, or is over
  ``CONTROL_CAP``: git would open it (and wait) or read it whole in any directory it walks, so
  that directory is left out whole; at the top of the tree no walk can avoid it, and the
  survey says the checkpoint is ``blocked``.

What is left out stays in the working tree; the checkpoint commits everything else and says what
it left out (docs/github.md, "Refused pushes and what a checkpoint leaves out").
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from rio_ci.core.errors import ForgeError

SIZE_CAP = 100 * 1024 * 1024  # GitHub blocks a file over 100 MB ("About large files on GitHub")
CONTROL_CAP = 1024 * 1024  # a .gitignore or .gitattributes git would read whole
CONTROL_FILES = (".gitignore", ".gitattributes")
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


@dataclass(frozen=True)
class Bounds:
    """How far one survey may go: ``entries`` directory entries, ``seconds`` of walking."""

    entries: int = 2_000_000
    seconds: float = 120.0


@dataclass(frozen=True)
class LeftOut:
    """A path (relative to the tree, ``/``-separated) the checkpoint leaves out, and why."""

    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


@dataclass(frozen=True)
class Survey:
    left_out: tuple[LeftOut, ...] = ()
    repositories: tuple[str, ...] = ()  # every nested ``.git`` (its own path), at any depth
    blocked: str | None = None  # why git cannot be run on this tree at all

    def exclusions(self) -> list[str]:
        """Pathspecs that keep git away from what is left out (literal: no glob is read)."""
        return [f":(exclude,literal){item.path}" for item in self.left_out]


def survey(
    tree: Path,
    skip: Collection[Path] = (),
    *,
    nested: Collection[str] = (),
    bounds: Bounds = Bounds(),
    clock: Callable[[], float] = time.monotonic,
) -> Survey:
    """Walk ``tree`` (its top ``.git`` and the paths in ``skip`` are never entered) as the
    module docstring says; the directories in ``nested`` (relative) count as nested
    repositories too (their ``.git`` was removed earlier in the job). Raises ``ForgeError``
    past ``bounds``."""
    walk = _Walk(tree, skip, set(nested), bounds, clock)
    walk.run()
    return Survey(tuple(walk.left_out), tuple(walk.repositories), walk.blocked)


def size_text(size: int) -> str:
    for unit, power in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << power:
            return f"{size / (1 << power):.1f} {unit}"
    return f"{size} bytes"


@dataclass
class _Walk:
    tree: Path
    skip: Collection[Path]
    nested: set[str]
    bounds: Bounds
    clock: Callable[[], float]
    left_out: list[LeftOut] = field(default_factory=list)
    repositories: list[str] = field(default_factory=list)
    blocked: str | None = None
    seen: int = 0
    deadline: float = 0.0

    def run(self) -> None:
        root = self.tree.resolve()
        skipped = {_relative(p, root) for p in self.skip}
        self.deadline = self.clock() + self.bounds.seconds
        top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            pending: list[tuple[str, bool]] = [("", False)]  # (directory, inside a left-out one)
            while pending:
                folder, covered = pending.pop()
                self._in_time()
                for child, child_covered in self._visit(top, folder, covered):
                    if child not in skipped:
                        pending.append((child, child_covered))
        finally:
            os.close(top)

    def _count(self) -> None:
        self.seen += 1
        if self.seen > self.bounds.entries:
            raise ForgeError(
                f"the working tree has more than {self.bounds.entries} entries: rio-ci does "
                "not walk it, and git is not run on it"
            )
        if self.seen % 1024 == 0:  # and at every directory: a huge one is no way around
            self._in_time()

    def _in_time(self) -> None:
        if self.clock() > self.deadline:
            raise ForgeError(
                f"walking the working tree took over {self.bounds.seconds:g} s "
                f"({self.seen} entries): git is not run on it"
            )

    def _visit(self, top: int, folder: str, covered: bool) -> list[tuple[str, bool]]:
        """List ``folder`` and classify its entries; returns its subdirectories to walk."""
        entries = self._list(top, folder, covered)
        if folder and ".git" in entries:
            self.repositories.append(_join(folder, ".git"))
            covered = self._leave(folder, "a nested repository (its own .git)", covered)
        elif folder in self.nested:
            covered = self._leave(folder, "a nested repository (its .git removed)", covered)
        covered = self._controls(folder, entries, covered)
        children = []
        for name, (mode, size) in entries.items():
            path = _join(folder, name)
            if name == ".git":
                continue  # the top one is the checkout's; a nested one is listed above
            if stat.S_ISDIR(mode):
                children.append((path, covered))
            elif stat.S_ISREG(mode) and size > SIZE_CAP:
                self._leave(path, f"{size_text(size)}, over the {size_text(SIZE_CAP)} cap", covered)
            elif stat.S_IFMT(mode) in _KINDS:
                self._leave(path, f"{_KINDS[stat.S_IFMT(mode)]}, which git cannot store", covered)
        return children

    def _list(self, top: int, folder: str, covered: bool) -> dict[str, tuple[int, int]]:
        """``folder``'s entries as ``{name: (mode, size)}``; one that cannot be opened is
        left out and has none."""
        try:
            handle = os.open(folder or ".", _OPEN_DIR, dir_fd=top)
        except OSError as exc:
            self._leave(folder, f"cannot be read ({exc.strerror})", covered)
            return {}
        entries = {}
        try:
            with os.scandir(handle) as listing:
                for entry in listing:
                    self._count()
                    entries[entry.name] = _kind(entry)
        finally:
            os.close(handle)
        return entries

    def _controls(self, folder: str, entries: dict[str, tuple[int, int]], covered: bool) -> bool:
        """A ``.gitignore`` or ``.gitattributes`` git must not open: leave ``folder`` out."""
        for name in CONTROL_FILES:
            if name not in entries:
                continue
            mode, size = entries[name]
            if stat.S_IFMT(mode) in _KINDS:
                why = f"its {name} is {_KINDS[stat.S_IFMT(mode)]}, which git must not open"
            elif stat.S_ISREG(mode) and size > CONTROL_CAP:
                why = f"its {name} is {size_text(size)}, which git would read whole"
            else:
                continue
            if not folder:
                self.blocked = f"the working tree's {why.removeprefix('its ')}"
                return True
            return self._leave(folder, why, covered)
        return covered

    def _leave(self, path: str, why: str, covered: bool) -> bool:
        if not covered:
            self.left_out.append(LeftOut(path, why))
        return True


def _kind(entry: os.DirEntry[str]) -> tuple[int, int]:
    """(mode, size) without following a link; the size only for a regular file (the file
    type comes from the listing where the file system gives it: no ``lstat`` then)."""
    if entry.is_dir(follow_symlinks=False):
        return stat.S_IFDIR, 0
    if entry.is_symlink():
        return stat.S_IFLNK, 0
    info = entry.stat(follow_symlinks=False)
    return info.st_mode, info.st_size if stat.S_ISREG(info.st_mode) else 0


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return "\0"  # outside the tree: matches no path in it
