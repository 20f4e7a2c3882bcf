"""A fresh Cell home in every job (docs/design.md, "A fresh Cell home"; docs/security.md).

A self-hosted runner keeps its users between jobs, and so does a machine that runs
``rio-ci work --cell-user`` for one Session after another: a ``~/.gitconfig`` with an
fsmonitor, a ``~/.bashrc``, a ``pip.conf`` or a user-site ``sitecustomize.py`` that one
Session's Cells leave in the Cell user's HOME would run in the next Session's Cells. So the
HOME is emptied before any Cell of an Owner runs (the action's finish step goes on with its
run step's) and removed when the job's steps end (the end of ``finish``).

Every cache and configuration folder a Cell may write outside the working tree lies in that
HOME: a Worker gets ``HOME`` and ``UV_CACHE_DIR`` under it, and none of the harness's
``XDG_*``, ``TMPDIR``, ``PIP_CACHE_DIR`` or ``UV_*`` folders, so the XDG folders and pip's
cache are the HOME's too. What a Cell may leave besides lands in the machine's
world-writable folders (``SHARED_PLACES``), where every entry the Cell user owns goes as
well.

Both run once every process of the Cell user is stopped, so nothing writes meanwhile, and
neither ever follows a link: a link is removed, never its target.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from rio_ci.core.errors import RioError
from rio_ci.run.confinement.user import CellUser, separation_problem
from rio_ci.run.survivors import stop_user

# The world-writable folders every Linux machine has; world-writable folders inside them
# (``/tmp/.X11-unix``) are searched too, to this depth.
SHARED_PLACES = ("/tmp", "/var/tmp", "/dev/shm")
_DEPTH = 4


def fresh(user: CellUser, places: tuple[str, ...] = SHARED_PLACES) -> None:
    """Before an Owner's first Cell: every process of ``user`` stopped, its HOME emptied
    (and made again, 0700, the user's), and its entries in ``places`` removed."""
    stop_user(user.uid)
    home = Path(user.home)
    with _reported(user, "empty"):
        if os.path.lexists(home):
            _check_home(user, home)
            for entry in os.scandir(home):
                _remove(Path(entry.path))
        user.make_home()
        leftovers(user.uid, places, keep=home)


def remove(user: CellUser, places: tuple[str, ...] = SHARED_PLACES) -> list[str]:
    """When the job's steps end: every process of ``user`` stopped, its HOME removed, its
    entries in ``places`` removed. Returns what was removed."""
    stop_user(user.uid)
    home = Path(user.home)
    removed = []
    with _reported(user, "remove"):
        if os.path.lexists(home):
            _check_home(user, home)
            _remove(home)
            removed.append(str(home))
        return removed + leftovers(user.uid, places)


def remove_named(name: str) -> list[str]:
    """``remove`` for the Cell user ``name``, where Cells could have run as it: this process
    is root, the user exists and is fit for Cells (one rio-ci made). Otherwise nothing."""
    if separation_problem() is not None:
        return []
    try:
        user = CellUser.of(pwd.getpwnam(name))
    except KeyError:
        return []
    return [] if user.problem() else remove(user)


def leftovers(
    uid: int, places: tuple[str, ...] = SHARED_PLACES, keep: Path | None = None
) -> list[str]:
    """Remove every entry user ``uid`` owns in ``places`` and in the world-writable folders
    inside them (a folder of its own goes whole), except ``keep``; returns their paths."""
    removed: list[str] = []
    for place in places:
        _sweep(Path(place), uid, removed, _DEPTH, keep)
    return removed


def _sweep(folder: Path, uid: int, removed: list[str], depth: int, keep: Path | None) -> None:
    try:
        entries = list(os.scandir(folder))
    except OSError:  # absent (no /dev/shm), or not a folder
        return
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        path = Path(entry.path)
        if path == keep:
            continue
        if info.st_uid == uid:
            _remove(path)
            removed.append(str(path))
        elif depth > 1 and stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH:
            _sweep(path, uid, removed, depth - 1, keep)


def _check_home(user: CellUser, home: Path) -> None:
    if not home.is_absolute() or home == Path("/") or not stat.S_ISDIR(os.lstat(home).st_mode):
        raise RioError(
            f"the HOME of the Cell user {user.name} ({home}) is not a directory of its own"
        )


@contextlib.contextmanager
def _reported(user: CellUser, what: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise RioError(
            f"cannot {what} the HOME of the Cell user {user.name} ({exc.filename}: "
            f"{exc.strerror}): nothing one Session's Cells leave may reach another's"
        ) from None


def _remove(path: Path) -> None:
    """Remove ``path``: a folder with everything in it, anything else (a link included) by
    its name alone."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            path.unlink()
