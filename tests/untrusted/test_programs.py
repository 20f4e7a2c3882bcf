"""The rules by which the harness finds the programs it runs (rio_ci/untrusted/programs.py): a
program on ``PATH`` is skipped when its entry is relative, when it lies inside the working tree
(links resolved), or when anyone but root or the harness's own users could replace it or a folder
above it; the harness's subprocesses get a ``PATH`` of system folders only.

Each test plants a program ``tool`` in a folder it then makes unfit, with a fit one further on
``PATH``: the look-up must skip the first and say why. Owned by another user needs root (to
give the folder away)."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rio_ci.github.git import Git
from rio_ci.run.confinement.user import CellUser
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from rio_ci.untrusted import programs
from rio_ci.untrusted.gitenv import git_environment
from rio_ci.untrusted.programs import Lookup, Rules, harness_users
from tests.hostile.support import NOBODY, shared_folder, unprivileged_env, unprivileged_rio
from tests.kit import cli_env, python_with

ROOTED = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOTED, reason="giving a folder to another user needs root")


def plant(folder: Path, name: str = "tool") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / name
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    return program


@pytest.fixture
def fit(tmp_path: Path) -> Path:
    """A folder holding ``tool`` that passes every rule (tmp_path's parents are root's, or
    this user's, and none is writable by others)."""
    return plant(tmp_path / "fit").parent


def rules(*trees: Path) -> Rules:
    return Rules(tuple(os.path.realpath(t) for t in trees), harness_users(os.environ))


def search(*folders: Path | str) -> str:
    return os.pathsep.join(str(f) for f in folders)


def test_a_fit_program_is_found_by_its_real_path(tmp_path: Path, fit: Path) -> None:
    link = tmp_path / "links"
    link.mkdir()
    (link / "tool").symlink_to(fit / "tool")
    found = rules().look_up("tool", search(link))
    assert found == Lookup(str(fit / "tool"))  # no link left for anyone to redirect


def test_a_folder_writable_by_others_is_skipped(tmp_path: Path, fit: Path) -> None:
    shared = plant(tmp_path / "shared").parent
    shared.chmod(0o777)
    found = rules().look_up("tool", search(shared, fit))
    assert found.path == str(fit / "tool")
    assert found.skipped == (f"{shared}/tool: {shared} is writable by its group or others",)


def test_a_group_writable_program_is_skipped(tmp_path: Path, fit: Path) -> None:
    program = plant(tmp_path / "loose")
    program.chmod(0o775)
    found = rules().look_up("tool", search(program.parent, fit))
    assert found.path == str(fit / "tool")
    assert found.skipped == (f"{program}: {program} is writable by its group or others",)


def test_an_ancestor_writable_by_others_is_skipped_and_a_sticky_one_is_not(
    tmp_path: Path, fit: Path
) -> None:
    """Under a world-writable folder anyone may rename the folder that holds the program;
    under a sticky one (``/tmp``) nobody may rename what another user owns."""
    open_parent = tmp_path / "open"
    below_open = plant(open_parent / "bin").parent
    open_parent.chmod(0o777)
    sticky_parent = tmp_path / "sticky"
    below_sticky = plant(sticky_parent / "bin").parent
    sticky_parent.chmod(0o777 | stat.S_ISVTX)
    skipped = rules().look_up("tool", search(below_open, fit))
    assert skipped.path == str(fit / "tool")
    assert skipped.skipped == (
        f"{below_open}/tool: {open_parent} is writable by its group or others",
    )
    assert rules().look_up("tool", search(below_sticky, fit)).path == str(below_sticky / "tool")


@needs_root
def test_a_folder_owned_by_another_user_is_skipped(tmp_path: Path, fit: Path) -> None:
    theirs = plant(tmp_path / "theirs").parent
    os.chown(theirs, NOBODY, NOBODY)
    found = rules().look_up("tool", search(theirs, fit))
    assert found.path == str(fit / "tool")
    assert found.skipped == (f"{theirs}/tool: {theirs} belongs to user {NOBODY}",)


@needs_root
def test_the_user_who_ran_rio_ci_through_sudo_is_one_of_the_harness(tmp_path: Path) -> None:
    """As root started through sudo, what the runner's user owns (rio-ci's install) is the
    harness's; that user is no Cell user (rio_ci.run.confinement.user refuses it as one)."""
    theirs = plant(tmp_path / "runner").parent
    os.chown(theirs, NOBODY, NOBODY)
    users = harness_users({"SUDO_UID": str(NOBODY)})
    assert NOBODY in users and NOBODY not in harness_users({})
    assert Rules((), users).look_up("tool", search(theirs)).path == str(theirs / "tool")


@needs_root
def test_the_user_who_ran_rio_ci_through_sudo_is_never_its_cell_user(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    user = CellUser("runner", NOBODY, NOBODY, "/nonexistent")
    assert user.problem() == "is the harness's own user"
    monkeypatch.delenv("SUDO_UID")
    assert user.problem() != "is the harness's own user"


def test_a_relative_entry_is_skipped(
    tmp_path: Path, fit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant(tmp_path / "work" / "bin")
    monkeypatch.chdir(tmp_path / "work")
    found = rules().look_up("tool", search("bin", "", fit))
    assert found.path == str(fit / "tool")
    assert found.skipped == ("bin/tool: a relative PATH entry",)


def test_a_folder_inside_the_working_tree_is_skipped(tmp_path: Path, fit: Path) -> None:
    tree = tmp_path / "checkout"
    inside = plant(tree / "bin").parent
    found = rules(tree).look_up("tool", search(inside, fit))
    assert found.path == str(fit / "tool")
    assert found.skipped == (f"{inside}/tool: inside the working tree {tree}",)
    assert rules().look_up("tool", search(inside, fit)).path == str(inside / "tool")  # the rule


def test_a_link_into_the_working_tree_is_skipped(tmp_path: Path, fit: Path) -> None:
    """A folder outside the tree that is a link into it, or a program that is a link to one
    in the tree: both are the tree's."""
    tree = tmp_path / "checkout"
    plant(tree / "bin")
    folder_link = tmp_path / "elsewhere"
    folder_link.symlink_to(tree / "bin")
    file_link = tmp_path / "links"
    file_link.mkdir()
    (file_link / "tool").symlink_to(tree / "bin" / "tool")
    found = rules(tree).look_up("tool", search(folder_link, file_link, fit))
    assert found.path == str(fit / "tool")
    assert found.skipped == (
        f"{folder_link}/tool: inside the working tree {tree}",
        f"{file_link}/tool: inside the working tree {tree}",
    )


def test_a_tree_named_through_a_link_is_kept_out_too(tmp_path: Path, fit: Path) -> None:
    tree = tmp_path / "checkout"
    inside = plant(tree / "bin").parent
    named = tmp_path / "workspace"
    named.symlink_to(tree)
    assert rules(named).look_up("tool", search(inside, fit)).path == str(fit / "tool")


def test_nothing_fit_is_none_and_says_what_it_skipped(tmp_path: Path) -> None:
    tree = tmp_path / "checkout"
    inside = plant(tree / "bin").parent
    found = rules(tree).look_up("tool", search(inside))
    assert found.path is None
    assert found.missing("tool") == (
        "no tool found where only root or rio-ci's own user can change it "
        f"(skipped: {inside}/tool: inside the working tree {tree})"
    )
    nothing = rules().look_up("no-such-tool-here", search(tmp_path))
    assert nothing.missing("no-such-tool-here").endswith("(none on PATH)")


def test_the_system_folders_follow_the_inherited_path(tmp_path: Path) -> None:
    """A PATH that lacks them (a user's without /usr/sbin, or none) still finds the
    system's programs, after every entry of its own."""
    found = rules().look_up("sh", search(tmp_path))
    assert found.path is not None
    assert found.path == os.path.realpath(found.path)
    assert os.path.dirname(found.path) in rules().closed_folders(programs.SYSTEM_FOLDERS)


def test_the_harness_path_holds_only_folders_nobody_else_may_write(tmp_path: Path) -> None:
    """``search_path`` is made of system folders; ``closed_folders`` is its rule: no folder
    writable by others, sticky or not (git looks helpers up by name whenever it runs), none
    in a tree, each real folder once."""
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o777 | stat.S_ISVTX)
    closed = tmp_path / "closed"
    closed.mkdir()
    tree = tmp_path / "checkout"
    (tree / "bin").mkdir(parents=True)
    twice = tmp_path / "twice"
    twice.symlink_to(closed)
    kept = rules(tree).closed_folders([str(sticky), str(closed), str(tree / "bin"), str(twice)])
    assert kept == [str(closed)]
    path = programs.search_path().split(os.pathsep)
    assert path and all(folder in map(os.path.realpath, programs.SYSTEM_FOLDERS) for folder in path)


@pytest.fixture
def planted_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process's PATH with a planted ``git`` first, in a folder of the test's own."""
    folder = plant(tmp_path / "checkout" / "bin", "git").parent
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    yield folder


def test_settle_keeps_the_named_tree_out_of_every_later_look_up(planted_path: Path) -> None:
    assert programs.find("git") == str(planted_path / "git")  # no tree named: a fit folder
    programs.settle(planted_path.parent)
    found = programs.find("git")
    assert found is not None and found != str(planted_path / "git")
    assert "inside the working tree" not in programs.missing("no-such-tool-here")
    assert programs.trusted_file(planted_path / "git") == (
        f"inside the working tree {planted_path.parent}"
    )


# --- what the harness's own subprocesses get -------------------------------------------------


def test_git_gets_the_harness_path_never_the_inherited_one(planted_path: Path) -> None:
    path = git_environment()["PATH"]
    assert path == programs.search_path()
    assert str(planted_path) not in path.split(os.pathsep)
    assert programs.with_search_path({"PATH": str(planted_path), "HOME": "/x"}) == {
        "PATH": path,
        "HOME": "/x",
        "LC_ALL": "C",  # and no message catalogue from /usr/share (rio_ci/gitenv.py)
        "LANGUAGE": "",
    }


def test_a_program_git_starts_by_name_is_never_the_checkouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """git starts ``ssh`` by name for an ssh remote: with an ``ssh`` planted first on the
    process's ``PATH``, the harness's git still runs the system's (which fails to reach a
    host that does not exist) and never the planted one."""
    marker = tmp_path / "planted-ssh-ran"
    planted = tmp_path / "checkout" / "bin"
    ssh = plant(planted, "ssh")
    ssh.write_text(f"#!/bin/sh\n: > '{marker}'\nexit 1\n")
    monkeypatch.setenv("PATH", f"{planted}{os.pathsep}{os.environ['PATH']}")
    repo = Git(tmp_path / "git")
    repo.run("init", "--quiet", "--bare")
    remote = "ssh://rio-test.invalid/repo.git"
    done = repo.run("ls-remote", remote, remote=remote, check=False)
    assert done.returncode != 0
    assert not marker.exists()


# --- the commands: the working tree is named before the first program is looked up -----------


def planted_in(tree: Path, name: str, marker: Path) -> Path:
    """``tree/bin/<name>``, a program that leaves ``marker`` when anything runs it."""
    program = plant(tree / "bin", name)
    program.write_text(f"#!/bin/sh\n: > '{marker}'\nexit 0\n")
    return program.parent


@pytest.mark.slow
def test_becoming_root_never_runs_a_sudo_of_the_working_tree() -> None:
    """As a user who is not root, asked for a Cell user, rio-ci looks for sudo to become root
    (rio_ci.run.confinement.user.become_root). A ``sudo`` in the Session's working tree, first on
    ``PATH`` and owned by that very user (as a tree handed back after a run is), is never it:
    the system's is, which refuses this user, so Cells share its user."""
    with shared_folder() as folder:
        tree, marker = folder / "tree", folder / "planted-sudo-ran"
        bin_dir = planted_in(tree, "sudo", marker)
        for path in (tree, bin_dir, bin_dir / "sudo"):
            os.chown(path, NOBODY, NOBODY)
        env = unprivileged_env()
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
        db = folder / "s.db"
        made = unprivileged_rio(
            "new", str(db), "--goal", "g", "--cwd", str(tree), env=env, cwd=folder
        )
        assert made.returncode == 0, made

        done = unprivileged_rio("work", str(db), "--cell-user", "rio-ct-none", env=env, cwd=folder)

        assert done.returncode == 0, done
        assert b"share the harness's user" in done.stderr
        assert not marker.exists()


@needs_root
def test_the_cell_user_is_created_with_the_systems_useradd_not_the_working_trees(
    tmp_path: Path,
) -> None:
    name = f"rio-ct-{secrets.token_hex(4)}"
    place = Path(tempfile.mkdtemp(prefix="rio-programs-", dir="/tmp"))
    try:
        place.chmod(0o755)
        tree, marker = place / "tree", place / "planted-useradd-ran"
        bin_dir = planted_in(tree, "useradd", marker)
        db = place / "s.db"
        Session.create(db, "g", Settings(cwd=str(tree))).close()
        env = cli_env()
        env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
        done = subprocess.run(
            [sys.executable, "-m", "rio_ci", "work", str(db), "--cell-user", name],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done
        assert not marker.exists()
        assert pwd.getpwnam(name).pw_dir  # the real useradd made the user
    finally:
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
        shutil.rmtree(place, ignore_errors=True)


def test_the_uv_installed_with_rio_ci_is_refused_where_anyone_else_could_replace_it(
    tmp_path: Path,
) -> None:
    """Code Cells start with the uv of rio-ci's own install (found beside its interpreter):
    an install whose ``bin/`` others may write is refused with one line, not used."""
    python = python_with(tmp_path / "venv")
    uv = plant(python.parent, "uv")
    script = "from rio_ci.run.environment import uv_binary\nprint(uv_binary())\n"
    fit = subprocess.run(
        [str(python), "-I", "-c", script], capture_output=True, text=True, check=False
    )
    assert fit.stdout.strip() == str(uv)
    python.parent.chmod(0o777)
    done = subprocess.run(
        [str(python), "-I", "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        f"rio_ci.core.errors.RioError: rio-ci will not run {uv}: {python.parent} is writable by "
        "its group or others; install rio-ci elsewhere"
    )
