"""Paths that are not a Session, and files rio-ci may not write: exit 4 with a
one-line error, nothing created beside them (no lock file, no -wal, no -shm), no traceback,
no leftovers."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests.hostile.support import (
    listing,
    one_error,
    rio,
    shared_folder,
    unprivileged_env,
    unprivileged_rio,
)
from tests.kit import cli_env

COMMANDS = [
    ["work"],
    ["state"],
    ["turn"],
    ["events"],
    ["show"],
    ["receive", "m1", "comment", "{}"],
    ["output", "1"],
]


def foreign_sqlite(path: Path, journal_mode: str) -> None:
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA journal_mode={journal_mode}")
    db.execute("CREATE TABLE notes (body TEXT)")
    db.execute("INSERT INTO notes VALUES ('not a Session')")
    db.commit()
    db.close()


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A folder standing for somewhere else (/etc): a Session path may point into it."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    foreign_sqlite(folder / "app.db", "wal")
    foreign_sqlite(folder / "old.db", "delete")
    return folder


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize(
    "target",
    ["passwd", "app.db", "old.db", "."],
    ids=[
        "symlink to a text file",
        "foreign WAL SQLite",
        "foreign SQLite",
        "symlink to a directory",
    ],
)
def test_a_path_that_is_not_a_session_is_refused_and_nothing_is_created(
    tmp_path: Path, elsewhere: Path, command: list[str], target: str
) -> None:
    link = tmp_path / "s.db"
    link.symlink_to(elsewhere / target)
    before = listing(tmp_path, elsewhere)
    contents = {p.name: p.read_bytes() for p in elsewhere.iterdir()}
    done = rio(command[0], str(link), *command[1:], cwd=tmp_path)
    reason = one_error(done, 4)
    assert "s.db" in reason
    assert listing(tmp_path, elsewhere) == before
    assert {p.name: p.read_bytes() for p in elsewhere.iterdir()} == contents


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_directory_is_not_a_session(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "s.db").mkdir()
    before = listing(tmp_path)
    assert "is a directory" in one_error(
        rio(command[0], str(tmp_path / "s.db"), *command[1:], cwd=tmp_path), 4
    )
    assert listing(tmp_path) == before


@pytest.mark.parametrize("kind", ["symlink", "directory", "hard link"])
def test_a_sidecar_that_is_not_a_plain_file_is_refused(
    tmp_path: Path, elsewhere: Path, kind: str
) -> None:
    Session.create(tmp_path / "s.db", "sidecars", Settings(cwd=str(tmp_path))).close()
    wal = tmp_path / "s.db-wal"
    if kind == "symlink":
        wal.symlink_to(elsewhere / "passwd")
    elif kind == "directory":
        wal.mkdir()
    else:
        os.link(elsewhere / "passwd", wal)
    contents = (elsewhere / "passwd").read_bytes()
    for command in (["work"], ["state"], ["receive", "m1", "comment", "{}"]):
        reason = one_error(rio(command[0], str(tmp_path / "s.db"), *command[1:], cwd=tmp_path), 4)
        assert "s.db-wal" in reason
    assert (elsewhere / "passwd").read_bytes() == contents


@pytest.mark.parametrize("kind", ["directory", "symlink"])
def test_a_lock_path_beside_the_session_is_not_used(
    tmp_path: Path, elsewhere: Path, kind: str
) -> None:
    Session.create(tmp_path / "s.db", "no lock file", Settings(cwd=str(tmp_path))).close()
    lock = tmp_path / "s.db.lock"
    lock.mkdir() if kind == "directory" else lock.symlink_to(elsewhere / "passwd")
    contents = (elsewhere / "passwd").read_bytes()
    done = rio("work", str(tmp_path / "s.db"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (elsewhere / "passwd").read_bytes() == contents


def test_a_session_name_with_uri_characters_is_a_file_name(tmp_path: Path) -> None:
    name = tmp_path / "odd ?mode=memory#%41.db"
    assert rio("new", str(name), "--goal", "g", cwd=tmp_path).returncode == 0
    assert rio("receive", str(name), "m1", "comment", "{}", cwd=tmp_path).returncode == 0
    assert name.is_file() and len(Session.open(name).state()["runtime"]["inbox"]) == 1


def test_a_session_that_cannot_be_created_leaves_nothing_behind(tmp_path: Path) -> None:
    before = listing(tmp_path)
    with pytest.raises(UnicodeEncodeError):
        Session.create(tmp_path / "s.db", "a goal with a lone surrogate \ud800")
    assert listing(tmp_path) == before  # no .creating file, no -wal, no -shm


# --- read-only ------------------------------------------------------------------------------


def test_a_read_only_session_file_gives_one_line_errors() -> None:
    """As a user who is not root (root writes read-only files): the file is mode 0444."""
    with shared_folder() as folder:
        env = unprivileged_env()
        made = unprivileged_rio(
            "new",
            str(folder / "s.db"),
            "--goal",
            "read only",
            "--cwd",
            str(folder),
            env=env,
            cwd=folder,
        )
        assert made.returncode == 0, made.stderr
        (folder / "s.db").chmod(0o444)
        before = listing(folder)
        for command, code in (
            (["work"], 4),
            (["receive", "m1", "comment", "{}"], 4),
            (["turn"], 4),
        ):
            done = unprivileged_rio(
                command[0], str(folder / "s.db"), *command[1:], env=env, cwd=folder
            )
            assert "readonly" in one_error(done, code).replace("-", "").replace(" ", "")
        assert sorted(set(listing(folder)[str(folder)]) - {"s.db-wal", "s.db-shm"}) == sorted(
            set(before[str(folder)]) - {"s.db-wal", "s.db-shm"}
        )


def test_a_read_only_file_system_gives_one_line_errors(tmp_path: Path) -> None:
    """A read-only bind mount of a real (ext4, not tmpfs) folder, in a private mount
    namespace, so nothing outlives the test. Needs root and unshare."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        pytest.skip("a read-only bind mount needs root and unshare")
    data, view = tmp_path / "data", tmp_path / "view"
    data.mkdir()
    view.mkdir()
    Session.create(data / "s.db", "read-only file system", Settings(cwd=str(data))).close()
    script = (
        f"mount --bind {data} {view} && mount -o remount,bind,ro {view} && "
        f'exec {sys.executable} -m rio_ci "$@"'
    )
    before = listing(data)
    for command, code in (
        (["work", str(view / "s.db")], 4),
        (["receive", str(view / "s.db"), "m1", "comment", "{}"], 4),
        (["new", str(view / "t.db"), "--goal", "g"], 4),
    ):
        done = subprocess.run(
            [unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", *command],
            capture_output=True,
            env=cli_env(),
            check=False,
        )
        if b"mount:" in done.stderr:
            pytest.skip(f"mounting is not allowed here: {done.stderr.decode()[:200]}")
        reason = one_error(done, code)
        assert "read-only" in reason or "readonly" in reason, reason
    assert listing(data) == before
