"""The programs the harness runs and the ``PATH`` it runs them with: each program found once,
as an absolute path outside anything a Cell can write (docs/security.md, "What the harness
runs, and from where").

A workflow may name folders of the checkout on ``PATH`` (a repository's ``bin/`` through
``$GITHUB_PATH``), and Cells write the checkout; so the harness never has a name looked up when
it runs a program. An Owner command names its working tree at its start, before any Cell runs
(``settle``), and each program of ``PROGRAMS`` is looked up then, once, on the inherited
``PATH`` followed by the system's folders (``SYSTEM_FOLDERS``), skipping a candidate

- on a relative (or empty) entry: it names another folder in every working directory;
- inside a working tree, once links are resolved;
- that anyone but root or the harness's own users could replace: the file, or a folder on its
  real path, owned by another user, or writable by its group or others (a folder with the
  sticky bit excepted: there nobody may remove or rename what another user owns). The
  harness's users are this process's and, for root started through ``sudo``, the user who ran
  it (``SUDO_UID``: the runner's user, who installed rio-ci).

What is kept is the file's real path (no link left for anyone to redirect), for the life of the
process. The harness's own subprocesses (git and the helpers git starts, ``sudo``,
``useradd``) get ``search_path()`` as their ``PATH``: those of ``SYSTEM_FOLDERS`` that pass the
same rules and that only their owner may write, never the inherited ``PATH``. Cells keep the
inherited one: it is theirs, and the harness runs nothing found on it.

Nothing of rio_ci is imported here, and nothing fails at import or at ``settle``: a program
that cannot be found is a value (None), and ``missing`` says why in one line for the caller
that needs it to make its own error of.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "PROGRAMS",
    "SYSTEM_FOLDERS",
    "Lookup",
    "Rules",
    "find",
    "harness_users",
    "missing",
    "search_path",
    "settle",
    "trusted_file",
    "with_search_path",
]

# Every program an Owner command may run by name (rio_ci.untrusted.gitenv for git,
# rio_ci.run.confinement.user for sudo and useradd); uv comes with rio-ci itself and is only
# checked (``trusted_file``).
PROGRAMS = ("git", "sudo", "useradd")
# Where a Linux system keeps its programs, in the order of Debian's and Ubuntu's default PATH.
SYSTEM_FOLDERS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


@dataclass(frozen=True)
class Lookup:
    """One program looked up: its real path, or None; and the candidates skipped on the way
    (``"<candidate>: <why>"``)."""

    path: str | None
    skipped: tuple[str, ...] = ()

    def missing(self, name: str) -> str:
        """Why nothing was found, in one line."""
        return f"no {name} found where only root or rio-ci's own user can change it" + (
            f" (skipped: {'; '.join(self.skipped)})" if self.skipped else " (none on PATH)"
        )


@dataclass(frozen=True)
class Rules:
    """What the harness never runs: a file inside one of ``trees`` (real paths), or one that
    a user not in ``owners`` could replace (see above)."""

    trees: tuple[str, ...] = ()
    owners: frozenset[int] = frozenset({0})

    def look_up(self, name: str, path: str) -> Lookup:
        """``name`` on the entries of ``path`` (a ``PATH`` value), then ``SYSTEM_FOLDERS``."""
        skipped: list[str] = []
        for entry in dict.fromkeys([*path.split(os.pathsep), *SYSTEM_FOLDERS]):
            candidate = os.path.join(entry, name)
            if not os.path.isfile(candidate) or not os.access(candidate, os.X_OK):
                continue
            problem = self.problem(candidate) if os.path.isabs(entry) else "a relative PATH entry"
            if problem is None:
                return Lookup(os.path.realpath(candidate), tuple(skipped))
            skipped.append(f"{candidate}: {problem}")
        return Lookup(None, tuple(skipped))

    def problem(self, path: str | os.PathLike[str]) -> str | None:
        """Why the file at ``path`` may not be run, or None when it may."""
        real = os.path.realpath(path)
        for tree in self.trees:
            if real == tree or real.startswith(tree.rstrip(os.sep) + os.sep):
                return f"inside the working tree {tree}"
        return self._replaceable(real)

    def closed_folders(self, folders: Iterable[str]) -> list[str]:
        """The real paths of ``folders`` that exist, pass the rules, and that nobody but
        their owner may write, sticky bit or not; each once."""
        kept: list[str] = []
        for folder in folders:
            real = os.path.realpath(folder)
            if real in kept or not os.path.isdir(real) or self.problem(real) is not None:
                continue
            if not os.stat(real).st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                kept.append(real)
        return kept

    def _replaceable(self, real: str) -> str | None:
        """Why someone else could replace ``real`` (a path without links) or a folder above."""
        path = real
        while True:
            try:
                info = os.stat(path)
            except OSError as exc:
                return f"{path}: {exc.strerror}"
            if info.st_uid not in self.owners:
                return f"{path} belongs to user {info.st_uid}"
            sticky = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
            if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky:
                return f"{path} is writable by its group or others"
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent


def harness_users(environ: Mapping[str, str]) -> frozenset[int]:
    """Root, this process's users, and the user who ran it through sudo when it is root
    (``SUDO_UID`` in ``environ``)."""
    users = {0, os.getuid(), os.geteuid()}
    by_sudo = environ.get("SUDO_UID", "")
    if os.geteuid() == 0 and by_sudo.isascii() and by_sudo.isdigit():
        users.add(int(by_sudo))
    return frozenset(users)


# --- this process's programs -----------------------------------------------------------------

_lock = threading.Lock()
_trees: list[str] = []  # the real paths of the working trees named by ``settle``
# (name, PATH) -> what was found: the harness never changes its PATH, so this is one look-up
# per program; a test that changes PATH gets a look-up of its own.
_found: dict[tuple[str, str], Lookup] = {}
_search_path: list[str] = []  # found once, like the programs


def settle(*trees: str | os.PathLike[str]) -> None:
    """At an Owner command's start, before any Cell runs: never run a program from inside
    ``trees`` (the working tree the Cells write), and find every program of ``PROGRAMS`` now,
    so that nothing a Cell writes later changes what the harness runs. What was found before
    is looked up again (that did not know these trees)."""
    with _lock:
        for tree in trees:
            real = os.path.realpath(tree)
            if real not in _trees:
                _trees.append(real)
        _found.clear()
        _search_path.clear()
    for name in PROGRAMS:
        find(name)
    search_path()


def find(name: str) -> str | None:
    """The real path of the program ``name`` as found once (see above), or None."""
    return _lookup(name).path


def missing(name: str) -> str:
    """Why ``find(name)`` is None, in one line: the candidates it skipped, and why."""
    return _lookup(name).missing(name)


def trusted_file(path: str | os.PathLike[str]) -> str | None:
    """Why the program at ``path`` (found otherwise than by name: the uv installed with
    rio-ci) may not be run, or None when it may: the same rules as for a PATH entry."""
    return _rules().problem(path)


def search_path() -> str:
    """The ``PATH`` of the harness's own subprocesses: ``SYSTEM_FOLDERS`` that pass the rules
    and that only their owner may write (no sticky-bit exception: git looks its helpers up by
    name whenever it runs)."""
    with _lock:
        if not _search_path:
            # Never empty: an empty PATH would mean the working directory.
            _search_path[:] = _rules().closed_folders(SYSTEM_FOLDERS) or [os.devnull]
        return os.pathsep.join(_search_path)


def with_search_path(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``search_path()`` as its ``PATH``, in the C locale: a program the
    harness runs as root (useradd, sudo) reads no message catalogue from ``/usr/share``,
    which a runner image may leave writable by every user (rio_ci/gitenv.py does the same
    for git)."""
    return {**environ, "PATH": search_path(), "LC_ALL": "C", "LANGUAGE": ""}


def _rules() -> Rules:
    return Rules(tuple(_trees), harness_users(os.environ))


def _lookup(name: str) -> Lookup:
    key = (name, os.environ.get("PATH", os.defpath))
    with _lock:
        if key not in _found:
            _found[key] = _rules().look_up(*key)
        return _found[key]
