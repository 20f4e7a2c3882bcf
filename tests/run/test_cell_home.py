"""A fresh Cell home (rio_ci/run/confinement/home.py), on files alone: the HOME emptied and made
again, removed at the job's end, and what the Cell user left in world-writable folders
removed — never through a link. A user id nobody has stands for the Cell user (nothing is
run as it, so no process of anyone's is stopped); the world-writable folder is the test's
own. Root is needed to give files to that user."""

from __future__ import annotations

import os
import pwd
import stat
import sys
from pathlib import Path

import pytest

from rio_ci.run.confinement import home as cell_home
from rio_ci.run.confinement.user import CellUser

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0,
    reason="giving files to another user needs root",
)


@pytest.fixture
def uid() -> int:
    """A user id no account has."""
    taken = {entry.pw_uid for entry in pwd.getpwall()}
    return next(u for u in range(61_000, 62_000) if u not in taken)


def owned(path: Path, uid: int) -> Path:
    """``path`` (an empty file when it does not exist yet), given to ``uid``."""
    if not os.path.lexists(path):
        path.touch()
    os.lchown(path, uid, uid)
    return path


def shared_place(tmp_path: Path) -> Path:
    place = tmp_path / "tmp"
    place.mkdir()
    place.chmod(0o1777)
    return place


def test_what_the_cell_user_left_in_a_world_writable_folder_goes_and_no_link_is_followed(
    tmp_path: Path, uid: int
) -> None:
    place = shared_place(tmp_path)
    precious = tmp_path / "precious"
    precious.write_text("keep")
    mine = owned(place / "a-file", uid)
    folder = place / "a-folder"
    folder.mkdir()
    (folder / "inside").write_text("root's, in the Cell user's folder")
    owned(folder, uid)
    link = place / "a-link"
    link.symlink_to(precious)
    owned(link, uid)
    sockets = place / ".X11-unix"  # another world-writable folder, root's
    sockets.mkdir()
    sockets.chmod(0o1777)
    socket = owned(sockets / "X99", uid)
    private = place / "private"  # root's, closed: the Cell user could not write in it
    private.mkdir(mode=0o755)
    (private / "not-its").touch()
    someone = place / "someone-elses"
    someone.touch()

    removed = cell_home.leftovers(uid, (str(place), str(tmp_path / "absent")))

    assert sorted(removed) == sorted(map(str, (mine, folder, link, socket)))
    assert precious.read_text() == "keep"
    assert sorted(p.name for p in place.iterdir()) == [".X11-unix", "private", "someone-elses"]
    assert (private / "not-its").exists() and list(sockets.iterdir()) == []


def test_the_home_is_emptied_and_made_again_then_removed(tmp_path: Path, uid: int) -> None:
    place = shared_place(tmp_path)
    home = tmp_path / "home" / "cell"
    (home / ".config" / "pip").mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text("[global]\n")
    (home / ".gitconfig").write_text("[core]\n\tfsmonitor = /bin/false\n")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "file").write_text("keep")
    (home / "out").symlink_to(precious)
    home.chmod(0o755)
    left = owned(place / "left", uid)
    user = CellUser("rio-ct-files", uid, uid, str(home))

    cell_home.fresh(user, (str(place),))

    assert list(home.iterdir()) == [] and not left.exists()
    info = home.stat()
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (uid, uid, 0o700)
    assert (precious / "file").read_text() == "keep"
    (home / "again").touch()

    removed = cell_home.remove(user, (str(place),))

    assert removed == [str(home)] and not home.exists()
    assert (precious / "file").read_text() == "keep"
