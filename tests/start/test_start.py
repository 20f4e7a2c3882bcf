"""``rio_ci.start``: ``sys.argv`` read once; an Owner command holding a credential
re-executes without it before the command line's imports; what it cannot decide there (an
unknown option, a Cell user that may need sudo, a file that is not a Session at rest) it leaves
to the command line, whose errors stay one JSON line; a run starts the SDK import. (What the
re-executed Owner still finds in its environment it moves out itself:
tests/core/test_credentials.py.)"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rio_ci.cli import OWNER_COMMANDS, build_parser
from rio_ci.core.credentials import SECRET_NAME
from rio_ci.run.confinement import settings as confinement_settings
from rio_ci.run.confinement import user as cell_user
from rio_ci.run.environment import session_secret_names
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from rio_ci.start import early, preload
from rio_ci.start.invocation import OWNER_OPTIONS, Invocation
from rio_ci.store.at_rest import SCHEMA_VERSION, session_secret_names_at_rest
from tests.kit import cli_env, run_cli

KEY = {"ANTHROPIC_API_KEY": "canary-anthropic-5f1e"}
ROOTED = os.geteuid() == 0  # become_root has nothing to do: a Cell user changes nothing


def imported(importtime: str) -> set[str]:
    """The modules ``python -X importtime`` listed (its lines on stderr)."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in importtime.splitlines()
        if line.startswith("import time:")
    }


# --- what can be decided before the command line ------------------------------------------


def test_the_owner_options_are_those_of_the_command_lines_parser() -> None:
    """Every option an Owner command's parser knows is either in OWNER_OPTIONS (it takes a
    value) or a flag start-up knows (``--human``) or leaves to the parser (``-h``)."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(OWNER_OPTIONS) == OWNER_COMMANDS
    for command in OWNER_COMMANDS:
        actions = sub.choices[command]._actions
        valued = {o for a in actions if a.nargs != 0 for o in a.option_strings}
        flags = {o for a in actions if a.nargs == 0 for o in a.option_strings}
        assert valued == OWNER_OPTIONS[command], command
        assert flags == {"-h", "--help", "--human"}, command
    assert early._SUDO_MARK == cell_user.SUDO_MARK
    assert confinement_settings.NONE in early._NO_CELL_USER


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["run", "s.db"], KEY, ["s.db"]),
        (["work", "s.db"], {"GITHUB_TOKEN": "x"}, ["s.db"]),
        (["run", "--model", "bedrock:m", "s.db", "--human", "--deadline=5"], KEY, ["s.db"]),
        (["work", "--timeout", "-1", "-"], KEY, ["-"]),
        (["run", "s.db", "--cell-user", "none"], KEY, ["s.db"]),
        (["run", "s.db", "--cell-user=rio-cell"], KEY, ["s.db"] if ROOTED else None),
        (["run", "s.db", "--cell-user", "rio-cell"], {**KEY, "RIO_AS_ROOT": "1"}, ["s.db"]),
        (["action"], KEY, []),
        (["action", "finish", "--human"], KEY, []),
        (["action"], {**KEY, "RIO_CELL_USER": "rio-cell"}, [] if ROOTED else None),
        (["action"], {**KEY, "RIO_CELL_USER": " none "}, []),
        # nothing to move, or already moved
        (["run", "s.db"], {"PATH": "/bin"}, None),
        (["run", "s.db"], {**KEY, "RIO_SCRUBBED": "1", "RIO_SECRETS_FD": "3"}, None),
        (["show", "s.db"], KEY, None),
        ([], KEY, None),
        # the parser's business
        (["--version"], KEY, None),
        (["run", "-h"], KEY, None),
        (["run", "--mod", "bedrock:m", "s.db"], KEY, None),
        (["run", "--", "s.db"], KEY, None),
        (["run", "s.db", "--model"], KEY, None),
        (["run", "--human=1", "s.db"], KEY, None),
        (["run"], KEY, None),
        (["run", "a.db", "b.db"], KEY, None),
        (["action", "run", "extra"], KEY, None),
    ],
)
def test_an_owner_command_re_executes_early_only_when_its_arguments_are_plain(
    argv: list[str], environ: dict[str, str], expected: list[str] | None
) -> None:
    assert early.owner_sessions(Invocation.read(argv), environ) == expected


def test_a_sessions_secret_names_read_at_rest_are_the_ones_the_owner_reads(
    tmp_path: Path,
) -> None:
    names = ["DEPLOY_HOOK", "SLACK_URL"]
    plain, odd = tmp_path / "s.db", tmp_path / "a %41?b#c.db"  # what a URI would misread
    Session.create(plain, "goal", Settings(cwd=str(tmp_path), secrets=tuple(names))).close()
    session = Session.create(odd, "goal", Settings(cwd=str(tmp_path)))
    for n in range(3):  # more events than the first
        session.receive(f"m{n}", "comment", {"n": n})
    session.close()
    (tmp_path / "link.db").symlink_to(plain)
    before = sorted(os.listdir(tmp_path))
    for path, expected in ((plain, names), (odd, []), (tmp_path / "link.db", names)):
        assert session_secret_names_at_rest(str(path)) == expected, path
        assert session_secret_names(str(path)) == expected, path
    assert early.early_secret_names(Invocation.read(["run", str(plain)]), KEY) == names
    absent = Invocation.read(["run", str(tmp_path / "absent.db")])
    assert early.early_secret_names(absent, KEY) is None
    assert sorted(os.listdir(tmp_path)) == before  # nothing created, not even for a moment


def _not_sessions(tmp_path: Path) -> dict[str, Path]:
    """Files the at-rest read must leave to the command line, by what they are."""
    session = tmp_path / "s.db"
    Session.create(session, "goal", Settings(cwd=str(tmp_path), secrets=("DEPLOY_HOOK",))).close()
    (tmp_path / "text.db").write_text("not a database\n")
    (tmp_path / "empty.db").write_bytes(b"")
    other = sqlite3.connect(tmp_path / "other.db")
    other.execute("CREATE TABLE t (x)")
    other.close()
    newer = tmp_path / "newer.db"
    shutil.copy(session, newer)
    with sqlite3.connect(newer) as conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    conn.close()
    nested = tmp_path / "nested.db"
    shutil.copy(session, nested)
    with sqlite3.connect(nested) as conn:
        conn.execute("UPDATE events SET data = ? WHERE seq = 1", ("[" * 10**5 + "]" * 10**5,))
    conn.close()
    viewed = tmp_path / "view.db"  # a view answers for meta: never queried, never trusted
    shutil.copy(session, viewed)
    with sqlite3.connect(viewed) as conn:
        conn.execute("DROP TABLE meta")
        conn.execute("CREATE VIEW meta AS SELECT 'schema_version' AS key, '1' AS value")
    conn.close()
    not_text = tmp_path / "null-data.db"
    shutil.copy(session, not_text)
    with sqlite3.connect(not_text) as conn:
        conn.execute("UPDATE events SET data = X'7b7d' WHERE seq = 1")  # {} as a blob
    conn.close()
    with_wal = tmp_path / "with-wal.db"
    shutil.copy(session, with_wal)
    Path(f"{with_wal}-wal").write_bytes(b"")
    return {
        "missing": tmp_path / "absent.db",
        "a directory": tmp_path,
        "a text file": tmp_path / "text.db",
        "an empty file": tmp_path / "empty.db",
        "an SQLite file that is no Session": tmp_path / "other.db",
        "another schema version": newer,
        "a first event nested past Python's limit": nested,
        "a view where its meta table belongs": viewed,
        "a first event whose data is not text": not_text,
        "a Session with a WAL beside it": with_wal,
    }


def test_what_is_no_session_at_rest_is_left_to_the_command_line(tmp_path: Path) -> None:
    files = _not_sessions(tmp_path)
    before = sorted(os.listdir(tmp_path))
    for what, path in files.items():
        assert session_secret_names_at_rest(str(path)) is None, what
    assert session_secret_names_at_rest("a\0b") is None
    assert sorted(os.listdir(tmp_path)) == before


# --- the processes --------------------------------------------------------------------------


@pytest.mark.parametrize("launch", ["python -m rio_ci", "python -I -m rio_ci"])
def test_an_owner_holding_a_credential_re_executes_before_importing_the_command_line(
    tmp_path: Path, launch: str
) -> None:
    """``-X importtime`` lists the first process's imports only: the re-executed process is
    started without it. ``python -I -m rio_ci`` is what the ``rio-ci`` command runs."""
    db = tmp_path / "s.db"
    Session.create(db, "goal", Settings(cwd=str(tmp_path))).close()
    how = launch.split()[1:]
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *how, "work", str(db)],
        capture_output=True,
        text=True,
        env=cli_env(**KEY),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert json.loads(done.stdout)["ran"] == []
    first = imported(done.stderr)
    assert "rio_ci.start.early" in first
    assert not {"argparse", "rio_ci.session.session", "rio_ci.store.journal", "rio_ci.cli"} & first


def test_without_a_credential_the_sdk_import_starts_before_the_command_lines_imports(
    tmp_path: Path,
) -> None:
    """The process that does the work (no credential left in its environment), run as the
    rio-ci command runs it (``rio_ci`` as ``__main__``, whose program name is
    ``__main__.py``), starts the SDK import thread before importing argparse and the rest of
    the command line."""
    order = (
        "import runpy, sys\n"
        "class Order:\n"
        "    seen = []\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        Order.seen.append(name)\n"
        "sys.meta_path.insert(0, Order())\n"
        "sys.argv = ['/x/rio_ci/__main__.py', 'run', sys.argv[1]]\n"
        "try:\n"
        "    runpy.run_module('rio_ci', run_name='__main__', alter_sys=True)\n"
        "finally:\n"
        "    from rio_ci.start import preload\n"
        "    seen = Order.seen\n"
        "    first = seen.index('rio_ci.start.preload') < seen.index('argparse')\n"
        "    print(first, preload.PRELOAD is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", order, str(tmp_path / "absent.db")],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )
    assert done.stdout.splitlines()[-1] == "True True", done.stdout + done.stderr[-2000:]


# --- argv read once ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "positionals", "options"),
    [
        (["run", "s.db"], ("s.db",), {}),
        (["run", "--model", "a", "s.db", "--model=b", "--human"], ("s.db",), {"--model": "b"}),
        (["work", "-", "--timeout", "-1"], ("-",), {"--timeout": "-1"}),
        (["action"], (), {}),
        (["action", "finish", "--human"], ("finish",), {}),
        (["run", "--mod", "x", "s.db"], None, {}),  # abbreviated: the parser's to read
        (["run", "s.db", "--model"], None, {}),  # a missing value
        (["run", "-h"], None, {}),
        (["run", "--", "s.db"], None, {}),
        (["action", "--cell-user", "x"], None, {}),  # not one of action's options
        (["show", "s.db"], None, {}),  # not an Owner command
        ([], None, {}),
    ],
)
def test_argv_is_read_once_into_an_invocation(
    argv: list[str], positionals: tuple[str, ...] | None, options: dict[str, str]
) -> None:
    invocation = Invocation.read(argv)
    assert invocation.command == (argv[0] if argv else "")
    assert invocation.positionals == positionals
    assert dict(invocation.options) == options
    assert invocation.argv == tuple(argv)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "s.db"], True),
        (["run", "s.db", "--model", "bedrock:claude-sonnet-5-5"], True),
        (["run", "s.db", "--model=anthropic:claude-opus-5-5"], True),
        (["run", "s.db", "--model", "scripted:plan.yaml"], False),
        (["run", "s.db", "--mod", "bedrock:m"], False),  # the parser's to read: nothing early
        (["show", "s.db"], False),
        (["work", "s.db"], False),
        (["action"], True),
        (["action", "run"], True),
        (["action", "finish"], False),
        (["action", "sweep"], False),
        ([], False),
    ],
)
def test_the_sdk_is_imported_early_only_for_a_run_that_talks_to_a_model(
    argv: list[str], expected: bool
) -> None:
    invocation = Invocation.read(argv)
    assert preload.wanted(invocation, {}) is expected
    if argv[:1] == ["action"]:  # the job's model comes from the environment there
        assert preload.wanted(invocation, {"RIO_MODEL": "scripted:plan.yaml"}) is False


@pytest.mark.slow
def test_a_run_process_starts_the_sdk_import_unless_it_re_executes_first() -> None:
    """Started for a run, the SDK import thread completes on its own; for a scripted model
    nothing is imported, nor in a process still holding a key (it re-executes first), but in
    the re-executed one, which carries the mark."""
    code = (
        "import sys\n"
        "from rio_ci.start import early, preload\n"
        "early.begin(['run', 'absent.db', *sys.argv[1:]])\n"
        "started = preload.PRELOAD is not None\n"
        "preload.PRELOAD and preload.PRELOAD.join(120)\n"
        "print(started, 'anthropic' in sys.modules)\n"
    )
    clean = {k: v for k, v in cli_env().items() if not SECRET_NAME.search(k)}
    key = {"ANTHROPIC_API_KEY": "sk-ant-test"}
    for extra, env, printed in (
        ([], clean, "True True"),
        (["--model", "scripted:x.yaml"], clean, "False False"),
        ([], {**clean, **key}, "False False"),
        ([], {**clean, **key, "RIO_SCRUBBED": "1"}, "True True"),
    ):
        done = subprocess.run(
            [sys.executable, "-c", code, *extra],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )
        assert done.stdout.strip() == printed, done.stderr[-2000:]


def test_the_command_line_module_is_not_an_entry() -> None:
    """``python -m rio_ci`` is the one entry; ``python -m rio_ci.cli`` says so in one JSON
    line instead of doing nothing."""
    done = subprocess.run(
        [sys.executable, "-m", "rio_ci.cli", "show", "s.db"],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    [line] = done.stdout.splitlines()
    assert "python -m rio_ci" in json.loads(line)["error"]


@pytest.mark.parametrize(
    "what",
    [
        "missing",
        "a text file",
        "a link as its WAL",
        "hard-linked",
        "a view where its meta table belongs",
        "a first event whose data is not text",
        "a first event nested past Python's limit",
    ],
)
def test_an_owner_holding_a_credential_on_no_usable_session_fails_in_one_line(
    tmp_path: Path, what: str
) -> None:
    """Left to the command line (not a Session at rest) or re-executed early and refused
    there (a hard-linked Session reads at rest), the error is the command line's own."""
    files = _not_sessions(tmp_path)
    os.link(tmp_path / "s.db", tmp_path / "twin.db")
    files["hard-linked"] = tmp_path / "twin.db"
    shutil.copy(tmp_path / "s.db", tmp_path / "linked.db")
    Path(f"{tmp_path / 'linked.db'}-wal").symlink_to(tmp_path / "elsewhere")
    files["a link as its WAL"] = tmp_path / "linked.db"
    before = sorted(os.listdir(tmp_path))
    done = run_cli("work", str(files[what]), env=cli_env(**KEY), timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    [line] = done.stdout.splitlines()
    assert set(json.loads(line)) == {"error"}
    assert "Traceback" not in done.stderr
    assert sorted(os.listdir(tmp_path)) == before
