"""``python -m rio_ci.tools`` never writes outside the working directory or into ``.git/``,
never through a symbolic link out of it, and never sets setuid, setgid or sticky bits
(docs/tools.md, "What the tools never write"). Each hostile request is a clear error and
changes nothing, inside the tree or out."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kit import cli_env


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A working directory (a git repository) beside a folder it must never write into; its
    ``link`` is a symbolic link to that folder."""
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "app.py").write_text("one\ntwo\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "victim.txt").write_text("keep\n")
    (work / "link").symlink_to(tmp_path / "outside")
    (work / "victim-link.txt").symlink_to(tmp_path / "outside" / "victim.txt")
    return work


def state(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root`` (the parent of the tree: outside included), git's too."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.lstat().st_mode))
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def tools(tree: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rio_ci.tools", *args],
        cwd=tree,
        input=stdin,
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=60,
        check=False,
    )


def new_file(path: str, mode: str = "100644") -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode {mode}\n--- /dev/null\n+++ b/{path}\n"
        "@@ -0,0 +1 @@\n+#!/bin/sh\n"
    )


HOSTILE_DIFFS = {
    "parent": (new_file("../escaped.txt"), "outside the working directory"),
    "absolute": (
        "--- /dev/null\n+++ /tmp/rio-tools-escape.txt\n@@ -0,0 +1 @@\n+x\n",
        "outside the working directory",
    ),
    "git-hooks": (new_file(".git/hooks/pre-commit", "100755"), "inside .git"),
    "nested-git": (new_file("sub/.git/config"), "inside .git"),
    "symlinked-dir": (new_file("link/planted.txt"), "outside the working directory"),
    "symlinked-file": (
        "--- a/victim-link.txt\n+++ b/victim-link.txt\n@@ -1 +1 @@\n-keep\n+owned\n",
        "outside the working directory",
    ),
    "setuid": (new_file("suid.sh", "104755"), "setuid, setgid or sticky"),
    "setgid": (new_file("sgid.sh", "102755"), "setuid, setgid or sticky"),
    "sticky": (new_file("sticky.sh", "101755"), "setuid, setgid or sticky"),
    "mode-change": (
        "diff --git a/app.py b/app.py\nold mode 100644\nnew mode 106755\n",
        "setuid, setgid or sticky",
    ),
    "symlink-mode": (new_file("a-link", "120000"), "not a regular file"),
    "bad-mode": (new_file("x.sh", "10z755"), "not an octal number"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_DIFFS))
def test_a_hostile_diff_is_refused_and_writes_nothing(tree: Path, case: str) -> None:
    diff, reason = HOSTILE_DIFFS[case]
    # A good change first: all or nothing, so it must not be written either.
    good = "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n-one\n+ONE\n two\n"
    before = state(tree.parent)

    done = tools(tree, "apply-diff", "-", stdin=good + diff)

    assert done.returncode == 1, done.stdout
    assert reason in done.stderr and done.stderr.startswith("error: ")
    assert state(tree.parent) == before
    assert not Path("/tmp/rio-tools-escape.txt").exists()


@pytest.mark.parametrize(
    "path", ["../escaped.txt", "link/planted.txt", ".git/hooks/post-checkout", "victim-link.txt"]
)
def test_create_and_replace_refuse_paths_out_of_the_tree(tree: Path, path: str) -> None:
    before = state(tree.parent)

    created = tools(tree, "create", path, "--text", "owned\n", "--overwrite")
    replaced = tools(tree, "replace", path, "--old", "keep", "--new", "owned")

    assert created.returncode == 1 and replaced.returncode in (1, 2)
    assert state(tree.parent) == before


def test_an_edit_keeps_plain_permissions_only(tree: Path) -> None:
    script = tree / "run.sh"
    script.write_text("echo one\n")
    script.chmod(0o4755)  # a setuid file that is already there (made by someone else)

    done = tools(tree, "replace", "run.sh", "--old", "one", "--new", "two")

    assert done.returncode == 0, done.stderr
    assert script.read_text() == "echo two\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o755


def test_a_link_inside_the_tree_may_be_written_through(tree: Path) -> None:
    (tree / "alias.py").symlink_to("app.py")
    done = tools(tree, "replace", "alias.py", "--old", "one", "--new", "uno")
    assert done.returncode == 0, done.stderr
    assert (tree / "app.py").read_text() == "uno\ntwo\n"
