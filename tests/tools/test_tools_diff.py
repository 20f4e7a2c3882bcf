"""rio_ci.tools.apply_diff on real diffs: ``git diff`` of a real repository applied back to
its reset tree, ``diff -u`` / ``diff -ru`` output, hand-written diffs with wrong counts,
drifted and fuzzy hunks, and all-or-nothing failures.
"""

from __future__ import annotations

import difflib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rio_ci.tools import ToolError, apply_diff
from tests.kit import cli_env

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "core.autocrlf=false"]

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
needs_diff = pytest.mark.skipif(shutil.which("diff") is None, reason="diff is not installed")


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one commit, as the current directory."""
    monkeypatch.chdir(tmp_path)
    git("init", "-q", ".")
    files = {
        "app.py": "".join(f"line {n}\n" for n in range(1, 41)),
        "crlf.txt": "alpha\r\nbeta\r\ngamma\r\n",
        "tail.txt": "first\nlast without newline",
        "gone.txt": "to be deleted\n",
        "moved.py": "".join(f"m{n}\n" for n in range(1, 11)),
        "docs/notes.md": "# notes\n\nsome text\n",
    }
    for rel, text in files.items():
        Path(rel).parent.mkdir(parents=True, exist_ok=True)
        Path(rel).write_bytes(text.encode())
    git("add", "-A")
    git("commit", "-qm", "base")
    return tmp_path


def git(*args: str) -> str:
    return subprocess.run([*GIT, *args], capture_output=True, text=True, check=True).stdout


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


def edit(path: str, old: str, new: str) -> None:
    text = Path(path).read_bytes().decode()
    assert old in text
    Path(path).write_bytes(text.replace(old, new, 1).encode())


def change_everything() -> str:
    """Edit the work tree in every way a diff can express; return ``git diff`` of it."""
    edit("app.py", "line 3\n", "line three\nline 3.5\n")
    edit("app.py", "line 20\nline 21\n", "")
    edit("app.py", "line 39\n", "line 39 changed\n")
    edit("crlf.txt", "beta\r\n", "BETA\r\nbeta2\r\n")
    edit("tail.txt", "last without newline", "last, now with one\n")
    Path("gone.txt").unlink()
    git("mv", "moved.py", "pkg_moved.py")
    edit("pkg_moved.py", "m5\n", "m5 edited\n")
    Path("new/deep").mkdir(parents=True)
    Path("new/deep/script.sh").write_text("#!/bin/sh\necho new\n")
    Path("new/deep/script.sh").chmod(0o755)
    Path("new/empty.txt").write_text("")
    Path("new/partial.txt").write_text("no final newline")
    git("add", "-A")
    return git("diff", "--cached", "-M")


@needs_git
def test_a_git_diff_applies_to_the_reset_tree(repo: Path) -> None:
    diff = change_everything()
    assert "rename from moved.py" in diff and "new file mode 100755" in diff
    assert "deleted file mode" in diff and "\\ No newline at end of file" in diff
    expected = snapshot(repo)
    git("reset", "-q", "--hard")
    assert snapshot(repo) != expected

    out = apply_diff(diff)
    assert snapshot(repo) == expected
    lines = out.splitlines()
    assert lines[0] == f"applied the diff to {len(lines) - 1} file(s):"
    assert "  M app.py (+3 -4)" in lines and "  D gone.txt (-1)" in lines
    assert "  A new/deep/script.sh (+2 -0)" in lines
    assert "  R moved.py -> pkg_moved.py (+1 -1)" in lines


@needs_git
def test_hunks_that_moved_apply_at_an_offset(repo: Path) -> None:
    edit("app.py", "line 10\n", "line ten\n")
    edit("app.py", "line 30\n", "line thirty\n")
    diff = git("diff")
    expected = Path("app.py").read_text()
    git("reset", "-q", "--hard")
    edit("app.py", "line 1\n", "new a\nnew b\nnew c\nline 1\n")
    edit("app.py", "line 20\n", "line 20\nmore\n")

    out = apply_diff(diff)
    want = expected.replace("line 1\n", "new a\nnew b\nnew c\nline 1\n", 1)
    assert Path("app.py").read_text() == want.replace("line 20\n", "line 20\nmore\n")
    assert "hunk 1 of app.py applied at line 10 (offset +3)" in out
    assert "hunk 2 of app.py applied at line 31 (offset +4)" in out


@needs_git
def test_a_bad_hunk_writes_nothing_and_names_file_hunk_and_lines(repo: Path) -> None:
    edit("app.py", "line 5\n", "line five\n")
    edit("docs/notes.md", "some text\n", "other text\n")
    Path("fresh.txt").write_text("fresh\n")
    git("add", "-A")
    diff = git("diff", "--cached")
    git("reset", "-q", "--hard")
    edit("docs/notes.md", "some text\n", "text that changed meanwhile\n")
    before = snapshot(repo)

    with pytest.raises(ToolError) as caught:
        apply_diff(diff)
    message = str(caught.value)
    assert message.startswith("hunk 1 of docs/notes.md (@@ -1,3 +1,3 @@) does not match")
    assert "nothing was written" in message and "  | some text" in message
    assert "The closest lines in docs/notes.md start at line 1" in message
    assert "  | text that changed meanwhile" in message
    assert snapshot(repo) == before and not Path("fresh.txt").exists()


def test_creating_an_existing_file_or_deleting_a_changed_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("here.txt").write_text("one\ntwo\n")
    create = "--- /dev/null\n+++ b/here.txt\n@@ -0,0 +1 @@\n+one\n"
    with pytest.raises(ToolError, match=r"creates here\.txt, which already exists"):
        apply_diff(create)
    delete = "--- a/here.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-one\n"
    with pytest.raises(ToolError, match="does not remove all of its lines"):
        apply_diff(delete)
    with pytest.raises(ToolError, match="no file changes"):
        apply_diff("just some words\n")
    assert Path("here.txt").read_text() == "one\ntwo\n"


def test_hand_written_diffs_with_wrong_counts_and_lost_spaces_apply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("m.py").write_text("def f():\n    a = 1\n\n    return a\n\n\ndef g():\n    pass\n")
    # The counts are wrong and the blank context line lost its leading space, as models
    # (and editors that strip trailing whitespace) write them.
    diff = (
        "--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n def f():\n-    a = 1\n+    a = 2\n"
        "\n     return a\n@@ @@\n def g():\n-    pass\n+    return None\n"
    )
    apply_diff(diff)
    assert Path("m.py").read_text() == (
        "def f():\n    a = 2\n\n    return a\n\n\ndef g():\n    return None\n"
    )


def test_fuzz_drops_outer_context_that_no_longer_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("f.txt").write_text("a\nB-changed\nc\nd\ne\nf\ng\n")
    out = apply_diff("--- a/f.txt\n+++ b/f.txt\n@@ -1,7 +1,7 @@\n a\n b\n c\n-d\n+D\n e\n f\n g\n")
    assert Path("f.txt").read_text() == "a\nB-changed\nc\nD\ne\nf\ng\n"
    assert "with fuzz 2" in out
    Path("w.txt").write_text("x  \ny\n")
    out = apply_diff("--- w.txt\n+++ w.txt\n@@ -1,2 +1,2 @@\n x\n-y\n+Y\n")
    assert Path("w.txt").read_text() == "x  \nY\n" and "ignoring trailing whitespace" in out


@needs_diff
def test_diff_u_output_applies_with_and_without_a_top_folder(tmp_path: Path) -> None:
    for side, text in (("old", "1\n2\n3\n"), ("new", "1\ntwo\n3\n")):
        (tmp_path / side).mkdir()
        (tmp_path / side / "n.txt").write_text(text)
    done = subprocess.run(
        ["diff", "-ru", "old", "new"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and done.stdout.startswith("diff -ru old/n.txt new/n.txt")
    project = tmp_path / "project"
    project.mkdir()
    (project / "n.txt").write_text("1\n2\n3\n")
    (tmp_path / "p.diff").write_text(done.stdout)
    run = subprocess.run(
        [sys.executable, "-m", "rio_ci.tools", "apply-diff", "../p.diff"],
        cwd=project,
        env=cli_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == "applied the diff to 1 file(s):\n  M n.txt (+1 -1)\n"
    assert (project / "n.txt").read_text() == "1\ntwo\n3\n"

    (project / "n.txt").write_text("1\n2\n3\n")
    (project / "n.txt.orig").write_text("1\n2\n3\n")
    (project / "n.txt").write_text("1\n2\nthree\n")
    plain = subprocess.run(
        ["diff", "-u", "n.txt.orig", "n.txt"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    (project / "n.txt").write_text("1\n2\n3\n")
    stdin = subprocess.run(
        [sys.executable, "-m", "rio_ci.tools", "apply-diff", "-"],
        cwd=project,
        env=cli_env(),
        input=plain,
        capture_output=True,
        text=True,
        check=False,
    )
    assert stdin.returncode == 0, stdin.stderr
    assert (project / "n.txt").read_text() == "1\n2\nthree\n"
    assert (project / "n.txt.orig").read_text() == "1\n2\n3\n"


def test_a_failing_apply_diff_command_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\n")
    (tmp_path / "b.txt").write_text("two\n")
    diff = (
        "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-one\n+ONE\n"
        "--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-zwei\n+TWO\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "rio_ci.tools", "apply-diff"],
        cwd=tmp_path,
        env=cli_env(),
        input=diff,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: hunk 1 of b.txt (@@ -1 +1 @@) does not match")
    assert "  | zwei" in done.stderr and done.stdout == ""
    assert (tmp_path / "a.txt").read_text() == "one\n"


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    before=st.lists(st.sampled_from("abcde"), max_size=30),
    after=st.lists(st.sampled_from("abcdef"), max_size=30),
    context=st.integers(min_value=0, max_value=3),
)
def test_any_difflib_diff_round_trips(
    tmp_path: Path, before: list[str], after: list[str], context: int
) -> None:
    """Repeated lines make placement ambiguous; the header's line must win. Context 0
    makes "-N,0" insertion hunks, which go after line N."""
    path = tmp_path / "f.txt"
    path.write_text("".join(f"{line}\n" for line in before))
    diff = "".join(
        difflib.unified_diff(
            [f"{x}\n" for x in before], [f"{x}\n" for x in after], "a/f.txt", "b/f.txt", n=context
        )
    )
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        if diff:
            apply_diff(diff)
    finally:
        os.chdir(cwd)
    assert path.read_text() == "".join(f"{line}\n" for line in after)
