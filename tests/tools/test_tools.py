"""rio_ci.tools (docs/models.md "Tools inside Cells"): view, replace, insert, create, find and grep
on real files, as functions and as ``python -m rio_ci.tools`` in a real subprocess, and both
forms inside a real Session's Cells. apply_diff has its own file (test_tools_diff.py).
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rio_ci.tools import ToolError, create, find, grep, insert, replace, view
from rio_ci.tools.__main__ import build_parser
from rio_ci.tools.files import VIEW_CHARS
from rio_ci.tools.search import MAX_FILE_BYTES, MAX_MATCHES, MAX_PATHS
from tests import session_cli
from tests.kit import ROOT, cli_env, cmd_cell, code_cell
from tests.session_cli import New

new = session_cli.new  # the shared fixture


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in ``tmp_path``: the tools take paths relative to the current directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def tools(
    cwd: Path, *args: str, stdin: str | None = None, code: int = 0
) -> subprocess.CompletedProcess[str]:
    """``python -m rio_ci.tools ARGS`` in ``cwd``, importing this checkout."""
    done = subprocess.run(
        [sys.executable, "-m", "rio_ci.tools", *args],
        cwd=cwd,
        input=stdin,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == code, (done.stdout, done.stderr)
    if code:
        assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    return done


def numbered(n: int, text: str) -> str:
    return f"{n:>4}\t{text}"


# --- view ----------------------------------------------------------------------------------


def test_view_numbers_lines_under_a_header_with_ranges(here: Path) -> None:
    Path("a.py").write_text("".join(f"line {n}\n" for n in range(1, 11)))
    whole = view("a.py").splitlines()
    assert whole[0] == "a.py (10 lines):"
    assert whole[1:] == [numbered(n, f"line {n}") for n in range(1, 11)]
    part = view("a.py", start=4, end=6).splitlines()
    assert part == ["a.py (10 lines, showing 4-6):", *(numbered(n, f"line {n}") for n in (4, 5, 6))]
    assert view("a.py", start=9, end=99).splitlines()[-1] == numbered(10, "line 10")

    Path("b.txt").write_text("x\ny")
    assert view("b.txt").splitlines()[-1] == "[no newline at end of file]"
    Path("c.txt").write_bytes(b"one\r\ntwo\r\n")
    assert view("c.txt").splitlines() == [
        "c.txt (2 lines, CRLF line endings):",
        numbered(1, "one"),
        numbered(2, "two"),
    ]
    assert view(str(here / "b.txt")).startswith(f"{here / 'b.txt'} (2 lines")


def test_a_large_file_is_clipped_with_a_pointer_to_the_rest(here: Path) -> None:
    lines = [f"{n:05d} " + "x" * 60 for n in range(1, 2001)]
    Path("big.txt").write_text("\n".join(lines) + "\n")
    out = view("big.txt")
    assert len(out) <= VIEW_CHARS + 200
    note = out.splitlines()[-1]
    resume = int(re.search(r"start=(\d+)", note)[1])  # type: ignore[index]
    assert f"--start {resume}" in note and resume < 2000
    assert out.splitlines()[-2] == numbered(resume - 1, lines[resume - 2])
    after = view("big.txt", start=resume).splitlines()
    assert after[1] == numbered(resume, lines[resume - 1])


def test_view_errors_say_what_is_wrong(here: Path) -> None:
    Path("a.txt").write_text("1\n2\n")
    Path("folder").mkdir()
    Path("blob.bin").write_bytes(b"\x00\x01\x02" * 10)
    Path("latin.txt").write_bytes("café\n".encode("latin-1"))
    for call, words in [
        (lambda: view("missing.txt"), "no such file: missing.txt"),
        (lambda: view("a.txt", start=3), "outside a.txt, which has lines 1-2"),
        (lambda: view("a.txt", start=2, end=1), "before start"),
        (lambda: view("folder"), "is a directory"),
        (lambda: view("blob.bin"), "looks binary"),
        (lambda: view("latin.txt"), "not UTF-8"),
    ]:
        with pytest.raises(ToolError, match=re.escape(words)):
            call()
    assert issubclass(ToolError, ValueError)


# --- replace, insert, create ---------------------------------------------------------------


def test_replace_edits_the_one_occurrence_and_shows_the_region(here: Path) -> None:
    source = "".join(f"line {n}\n" for n in range(1, 21))
    Path("a.py").write_text(source)
    out = replace("a.py", "line 10\nline 11\n", "ten\n")
    assert Path("a.py").read_text() == source.replace("line 10\nline 11\n", "ten\n")
    lines = out.splitlines()
    assert lines[0] == "replaced lines 10-11 of a.py (2 → 1 lines)"
    assert numbered(10, "ten") in lines and numbered(11, "line 12") in lines
    assert numbered(7, "line 7") in lines and numbered(6, "line 6") not in lines


def test_replace_needs_exactly_one_occurrence(here: Path) -> None:
    text = "x = 1\nif x:\n    y = 2\nx = 1\nz = 3\nx = 1\n"
    Path("a.py").write_text(text)
    with pytest.raises(ToolError, match=r"occurs 3 times in a\.py \(at line 1, 4, 6\)"):
        replace("a.py", "x = 1", "x = 2")
    with pytest.raises(ToolError, match=r"not found in a\.py"):
        replace("a.py", "w = 0", "w = 1")
    with pytest.raises(ToolError, match="at line 2 if indentation"):
        replace("a.py", "if x:\n  y = 2", "if x:\n  y = 3")
    with pytest.raises(ToolError, match="empty"):
        replace("a.py", "", "q")
    assert Path("a.py").read_text() == text
    replace("a.py", "x = 1\nz", "x = 0\nz")
    assert Path("a.py").read_text() == text.replace("x = 1\nz", "x = 0\nz")


def test_edits_keep_crlf_endings_a_missing_final_newline_and_the_mode(here: Path) -> None:
    path = Path("run.sh")
    path.write_bytes(b"#!/bin/sh\r\necho one\r\necho two")
    path.chmod(0o755)
    replace("run.sh", "echo one\necho two", "echo 1\necho 2")
    assert path.read_bytes() == b"#!/bin/sh\r\necho 1\r\necho 2"
    insert("run.sh", 3, "echo 3\necho 4\n")
    assert path.read_bytes() == b"#!/bin/sh\r\necho 1\r\necho 2\r\necho 3\r\necho 4"
    insert("run.sh", 0, "# top")
    assert path.read_bytes().startswith(b"# top\r\n#!/bin/sh\r\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


def test_insert_adds_lines_after_a_line_and_shows_them(here: Path) -> None:
    Path("a.txt").write_text("a\nb\nc\n")
    out = insert("a.txt", 2, "b1\nb2")
    assert Path("a.txt").read_text() == "a\nb\nb1\nb2\nc\n"
    assert out.splitlines()[0] == "inserted 2 lines after line 2 of a.txt"
    assert numbered(3, "b1") in out and numbered(4, "b2") in out
    with pytest.raises(ToolError, match=r"use 0 \(the top\) to 5"):
        insert("a.txt", 6, "x")


def test_create_makes_folders_and_refuses_to_overwrite(here: Path) -> None:
    assert create("pkg/sub/new.py", "print(1)\n") == "created pkg/sub/new.py (1 line)"
    assert Path("pkg/sub/new.py").read_text() == "print(1)\n"
    with pytest.raises(ToolError, match="already exists"):
        create("pkg/sub/new.py", "print(2)\n")
    assert Path("pkg/sub/new.py").read_text() == "print(1)\n"
    create("pkg/sub/new.py", "print(2)\n", overwrite=True)
    assert Path("pkg/sub/new.py").read_text() == "print(2)\n"


# --- find and grep -------------------------------------------------------------------------


def tree(root: Path) -> None:
    for rel, text in {
        "src/app.py": "def main():\n    return 'Hello'\n",
        "src/deep/util.py": "HELLO = 1\n",
        "tests/test_app.py": "hello()\n",
        "README.md": "hello readme\n",
        ".git/config": "hello git\n",
        "node_modules/x/index.js": "hello\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "image.png").write_bytes(b"\x89PNG\x00hello\x00")


def test_find_matches_names_or_paths_sorted_and_skips_tool_folders(here: Path) -> None:
    tree(here)
    assert find("*.py").splitlines() == ["src/app.py", "src/deep/util.py", "tests/test_app.py"]
    assert find("src/**/*.py").splitlines() == ["src/app.py", "src/deep/util.py"]
    assert find("src/*.py").splitlines() == ["src/app.py"]
    assert find("*.py", "src").splitlines() == ["src/app.py", "src/deep/util.py"]
    assert find("de?p").splitlines() == ["src/deep/"]
    assert find("config") == "no paths match 'config' under ."
    with pytest.raises(ToolError, match="no such folder"):
        find("*", "nowhere")
    for n in range(MAX_PATHS + 5):
        Path(f"many/f{n:04d}.txt").parent.mkdir(exist_ok=True)
        Path(f"many/f{n:04d}.txt").write_text("")
    listed = find("*.txt").splitlines()
    assert listed[:-1] == [f"many/f{n:04d}.txt" for n in range(MAX_PATHS)]
    assert listed[-1].startswith(f"[{MAX_PATHS + 5} paths match")


def test_grep_prints_path_line_text_and_skips_what_it_should(here: Path) -> None:
    tree(here)
    assert grep("hello").splitlines() == ["README.md:1:hello readme", "tests/test_app.py:1:hello()"]
    assert grep("hello", ignore_case=True).splitlines() == [
        "README.md:1:hello readme",
        "src/app.py:2:    return 'Hello'",
        "src/deep/util.py:1:HELLO = 1",
        "tests/test_app.py:1:hello()",
    ]
    assert grep("hello", "src", "README.md", glob="*.py", ignore_case=True).splitlines() == [
        "src/app.py:2:    return 'Hello'",
        "src/deep/util.py:1:HELLO = 1",
        "README.md:1:hello readme",
    ]
    assert grep("main()", fixed=True) == "src/app.py:1:def main():"
    assert grep("absent") == "no matches for 'absent' in ."
    with pytest.raises(ToolError, match="invalid regular expression"):
        grep("main(")
    with pytest.raises(ToolError, match="no such file or folder: nope"):
        grep("x", "nope")

    Path("huge.log").write_text("hello\n" * (MAX_FILE_BYTES // 6 + 1))
    Path("many.txt").write_text("needle\n" * (MAX_MATCHES + 7))
    out = grep("hello").splitlines()
    assert out[-1].startswith("[skipped files over") and "huge.log" in out[-1]
    many = grep("needle").splitlines()
    assert many[:MAX_MATCHES] == [f"many.txt:{n}:needle" for n in range(1, MAX_MATCHES + 1)]
    assert many[MAX_MATCHES].startswith(f"[{MAX_MATCHES + 7} matches; showing the first 1")
    assert "huge.log" in many[-1] and len(many) == MAX_MATCHES + 2


# --- the command line ----------------------------------------------------------------------


def test_every_command_runs_as_python_m_rio_ci_tools(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("one\ntwo\nthree\n")
    assert tools(tmp_path, "view", "a.py", "--start", "2", "--end", "3").stdout == (
        f"a.py (3 lines, showing 2-3):\n{numbered(2, 'two')}\n{numbered(3, 'three')}\n"
    )
    out = tools(tmp_path, "replace", "a.py", "--old", "two\nthree", "--new", "-2-").stdout
    assert out.startswith("replaced lines 2-3 of a.py (2 → 1 lines)\n")
    assert (tmp_path / "a.py").read_text() == "one\n-2-\n"
    tools(tmp_path, "replace", "a.py", "--old", "-2-", "--new-file", "-", stdin="two\n3")
    assert (tmp_path / "a.py").read_text() == "one\ntwo\n3\n"
    (tmp_path / "old.txt").write_text("one\n")
    tools(tmp_path, "replace", "a.py", "--old-file", "old.txt", "--new", "1\n")
    tools(tmp_path, "insert", "a.py", "--line", "0", "--text", "zero")
    assert (tmp_path / "a.py").read_text() == "zero\n1\ntwo\n3\n"
    tools(tmp_path, "create", "b/c.txt", "--text", "new\n")
    tools(tmp_path, "create", "b/c.txt", "--text-file", "-", "--overwrite", stdin="newer\n")
    assert (tmp_path / "b" / "c.txt").read_text() == "newer\n"
    assert tools(tmp_path, "find", "*.txt").stdout == "b/c.txt\nold.txt\n"
    assert tools(tmp_path, "find", "*.txt", "b").stdout == "b/c.txt\n"
    assert tools(tmp_path, "grep", "TWO", "--ignore-case", "--glob", "*.py").stdout == (
        "a.py:3:two\n"
    )
    assert tools(tmp_path, "grep", "-F", "(", "a.py").stdout == "no matches for '(' in a.py\n"


def test_command_errors_are_one_line_on_stderr_with_exit_status_1(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x\nx\n")
    cases = [
        (("replace", "a.py", "--old", "x", "--new", "y"), "occurs 2 times in a.py"),
        (("view", "missing.py"), "no such file: missing.py"),
        (("create", "a.py", "--text", "z"), "already exists"),
        (("insert", "a.py", "--line", "9", "--text", "z"), "outside a.py"),
        (("grep", "("), "invalid regular expression"),
        (("view", "a.py", "--start", "two"), "invalid int value"),
        (("replace", "a.py", "--old", "x"), "--new"),
        (("frobnicate",), "invalid choice"),
    ]
    for args, words in cases:
        err = tools(tmp_path, *args, code=1).stderr
        assert words in err and err.count("\n") == 1, (args, err)
    assert (tmp_path / "a.py").read_text() == "x\nx\n"


def test_every_command_and_option_is_documented() -> None:
    text = (ROOT / "docs" / "tools.md").read_text()
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    missing = []
    for name, parser in commands.choices.items():  # type: ignore[attr-defined]
        missing += [] if f"\n## {name}\n" in text else [name]
        missing += [
            f"{name} {option}"
            for action in parser._actions
            for option in action.option_strings
            if option.startswith("--") and option != "--help" and option not in text
        ]
    assert missing == []


# --- inside a Session ----------------------------------------------------------------------


def test_cells_use_the_tools_through_the_owner(new: New) -> None:
    """A cmd Cell runs ``python -m rio_ci.tools`` and a code Cell imports rio_ci.tools:
    both from the copy on the Worker's PYTHONPATH, not from this checkout."""
    sess = new()
    (sess.cwd / "hello.py").write_text("def greet():\n    return 'hi'\n")
    python = "python" if shutil.which("python") else "python3"
    sess.propose(
        cmd_cell(python, "-m", "rio_ci.tools", "view", "hello.py"),
        code_cell("""
        import rio_ci.tools
        from rio_ci.tools import ToolError, replace
        print(replace("hello.py", "'hi'", "'hello'"))
        try:
            replace("hello.py", "'hi'", "'again'")
        except ToolError as exc:
            print("refused:", exc)
        print(rio_ci.tools.__file__)
        """),
        cmd_cell(python, "-c", "import rio_ci.tools as t, json; print(json.dumps(t.__file__))"),
    )
    out = sess.work()
    assert out["ran"] == [1, 2, 3], out
    viewed = sess.runtime(1)
    assert viewed["stdout"].splitlines() == [
        "hello.py (2 lines):",
        numbered(1, "def greet():"),
        numbered(2, "    return 'hi'"),
    ]
    edited = sess.runtime(2)["stdout"].splitlines()
    assert edited[0] == "replaced line 2 of hello.py (1 → 1 lines)", edited
    assert numbered(2, "    return 'hello'") in edited
    assert any(line.startswith("refused: old text not found in hello.py") for line in edited)
    assert (sess.cwd / "hello.py").read_text() == "def greet():\n    return 'hello'\n"
    shim = Path(f"{sess.db}.d") / "pylib" / "rio_ci" / "tools" / "__init__.py"
    assert Path(edited[-1]) == shim and shim.exists()
    assert Path(json.loads(sess.runtime(3)["stdout"])) == shim
