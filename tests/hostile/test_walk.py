"""Every command of ``rio_ci.cli.COMMANDS`` walked with hostile arguments (docs/cli.md):
no traceback, ever; stdout is valid UTF-8 and strict JSON; a failure is exactly one line
``{"error"}`` (or ``{"rejected"}``) with a documented exit status; and nothing is left
beside the paths it was given."""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rio_ci.cli import COMMANDS
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests.hostile.support import listing, rio, strict

pytestmark = pytest.mark.slow
BAD = b"\xff\xfe"  # not UTF-8
DOCUMENTED = {0, 1, 2, 3, 4}


def hostile_cases(root: Path, every_path: bool = True) -> dict[str, list[list[str | bytes]]]:
    """Argument vectors per command; the paths live in ``root``. Without ``every_path`` each
    command that takes a Session path gets a third of the bad paths, a different third from
    the next command's, so every bad path still reaches three commands (they share one
    reading of a Session path: tests/hostile/test_paths.py holds it to each case)."""
    s = str(root / "s.db")  # a real Session
    fresh = str(root / "fresh.db")
    every: list[str | bytes] = [
        str(root / "missing.db"),
        str(root / "folder"),
        str(root / "garbage.db"),
        str(root / "empty.db"),
        str(root / "foreign.db"),
        str(root / "to-text.db"),
        str(root / "folder") + "/",
        os.fsencode(str(root)) + b"/" + BAD + b".db",
        "",
        "/proc/self/environ",
        "/dev/null",
        str(root / "loop.db"),
        str(root / ("n" * 300 + ".db")),
    ]
    third = itertools.count()

    def paths() -> list[str | bytes]:
        return every if every_path else every[next(third) % 3 :: 3]

    patch = str(root / "patch.json")
    text_cases = [[*rest] for rest in ([BAD], ["NaN"], ["[" * 5000], ["9" * 5000])]
    return {
        "new": [
            [fresh, "--goal", BAD],
            [fresh, "--goal", "g", "--cwd", BAD],
            [fresh, "--goal", "g", "--cwd", "/proc/foo"],
            [fresh, "--goal", " "],
            [fresh, "--goal", "g", "--limit", "cost_usd=nan"],
            [fresh, "--goal", "g", "--limit", "rounds=1e3"],
            [fresh, "--goal", "g", "--limit", "bogus=1"],
            [fresh, "--goal", "g", "--validator", '"unclosed'],
            [fresh, "--goal", "g", "--pass-env", "A B"],
            [fresh, "--goal", "g", "--secret", BAD],
            [s, "--goal", "g"],
            ["/proc/foo/x.db", "--goal", "g"],
            [str(root / "folder"), "--goal", "g"],
            [str(root / "loop.db"), "--goal", "g"],
            [str(root / ("n" * 300)), "--goal", "g"],
            [str(root / "to-text.db"), "--goal", "g"],
            ["--goal", "g"],
        ],
        "turn": [[db] for db in paths()],
        "step": [
            *([db, "turn-1", patch] for db in paths()),
            [s, "turn-x", "/dev/zero"],
            [s, "turn-x", str(root / "folder")],
            [s, "turn-x", str(root / "missing.json")],
            [s, "turn-x", str(root / "bad.json")],
            [s, BAD, patch],
            [s, "turn-x", "-"],
        ],
        "receive": [
            *([db, "m1", "comment", "{}"] for db in paths()),
            *([s, "m1", "comment", *rest] for rest in text_cases),
            [s, BAD, "comment", "{}"],
            [s, "m1", BAD, "{}"],
            [s, "m1", "Comment", "{}"],
            [s, "execution:1", "comment", "{}"],
            [s, "m1", "timer", "{}"],
            [s, "x" * 300, "comment", "{}"],
            [s, "m1", "comment", '"' + "x" * 70000 + '"'],
        ],
        "work": [
            *([db] for db in paths()),
            [s, "--timeout", "nan"],
            [s, "--timeout", "-1"],
            [s, "--timeout", "1e999"],
            [s, "--timeout", "x"],
        ],
        "run": [
            *([db, "--model", "scripted:missing.yaml"] for db in paths()),
            [s, "--deadline", "nan"],
            [s, "--deadline", "inf"],
            [s, "--price", "x"],
            [s, "--price", "9" * 400 + "/1"],
            [s, "--model", "nonsense:x"],
            [s, "--model", BAD],
            [s, "--model", "scripted:" + str(root / "missing.yaml")],
            [s, "--model", "scripted:" + str(root / "garbage.db")],
            [s, "--model", "scripted:/dev/null", "--effort", "extreme"],
        ],
        "state": [[db] for db in paths()],
        "events": [
            *([db] for db in paths()),
            [s, "--after", "99999999999999999999999"],
            [s, "--after", "-1"],
            [s, "--after", "nan"],
        ],
        "show": [*([db] for db in paths()), *([db, "--json"] for db in paths())],
        "output": [
            *([db, "1"] for db in paths()),
            [s, "99999999999999999999"],
            [s, "1e3"],
            [s, "1", "--stream", "stdin"],
            [s, "-1"],
        ],
        "demo": [["/proc/foo"], [str(root / "garbage.db")], [str(root)], [BAD]],
        "bench": [["--dir", "/proc"], ["--dir", "/proc/foo"], ["--dir", str(root / "garbage.db")]],
        "eval": [
            [str(root / "missing")],
            [str(root / "missing"), "--model", "x"],
            [str(root), "--model", "scripted:oracle", "--trials", "0"],
            [str(root), "--model", "scripted:oracle", "--trials", "nan"],
            [str(root), "--model", "scripted:oracle", "--timeout", "nan"],
            [str(root / "garbage.db"), "--model", "scripted:oracle"],
            [str(root), "--model", "scripted:oracle"],
            [BAD, "--model", "scripted:oracle"],
        ],
        "action": [[], ["finish"], ["sweep"], ["bogus"]],
    }


def prepare(root: Path) -> None:
    Session.create(root / "s.db", "walk me", Settings(cwd=str(root))).close()
    (root / "folder").mkdir()
    (root / "garbage.db").write_bytes(os.urandom(4096))
    (root / "empty.db").write_bytes(b"")
    (root / "text.txt").write_text("not a database\n")
    (root / "to-text.db").symlink_to(root / "text.txt")
    (root / "loop.db").symlink_to(root / "loop.db")
    (root / "patch.json").write_text('[{"op": "test", "path": "/revision", "value": 0}]')
    (root / "bad.json").write_bytes(b"[" + BAD + b"]")
    foreign = sqlite3.connect(root / "foreign.db")
    foreign.execute("PRAGMA journal_mode=WAL")
    foreign.execute("CREATE TABLE t (x)")
    foreign.commit()
    foreign.close()


def cases(root: Path, every_path: bool) -> Iterator[tuple[str, list[str | bytes]]]:
    for command, vectors in hostile_cases(root, every_path).items():
        for args in vectors:
            yield command, args


def test_every_command_has_hostile_cases(tmp_path: Path) -> None:
    assert set(hostile_cases(tmp_path)) == set(COMMANDS)


def test_no_command_prints_a_traceback_or_anything_but_strict_json(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Every bad path on every command with ``--long``."""
    root = tmp_path / "walk"
    root.mkdir()
    prepare(root)
    before = listing(root)
    everything = list(cases(root, every_path=bool(request.config.getoption("--long"))))
    env_stdin = b'[{"op": "test", "path": "/revision", "value": NaN}]'

    def attempt(case: tuple[str, list[str | bytes]]) -> str | None:
        command, args = case
        done = rio(command, *args, cwd=root, input=env_stdin, timeout=120)
        shown = f"rio-ci {command} {args!r:.300} -> exit {done.returncode}"
        try:
            stdout = done.stdout.decode("utf-8")
        except UnicodeDecodeError:
            return f"{shown}: stdout is not UTF-8: {done.stdout[:200]!r}"
        if b"Traceback" in done.stderr:
            return f"{shown}: traceback\n{done.stderr.decode(errors='replace')[-1500:]}"
        if done.returncode not in DOCUMENTED:
            return f"{shown}: undocumented exit status"
        text_ok = command == "show" and "--json" not in args and done.returncode == 0
        lines = stdout.splitlines()
        try:
            values = [] if text_ok else [strict(line) for line in lines]
        except ValueError as exc:
            return f"{shown}: stdout is not strict JSON ({exc}): {stdout[:300]!r}"
        if done.returncode != 0:
            if (
                len(values) != 1
                or not isinstance(values[0], dict)
                or not (values[0].get("error") or values[0].get("rejected"))
            ):
                return f"{shown}: a failure must print one error line: {stdout[:300]!r}"
            if "\n" in json.dumps(values[0]).replace("\\n", "\n")[1:-1]:
                return f"{shown}: the error is not one line: {values[0]!r}"
        return None

    with ThreadPoolExecutor(max_workers=4) as pool:
        problems = [p for p in pool.map(attempt, everything) if p]
    assert not problems, "\n".join(problems)
    after = listing(root)
    new_names = set(after[str(root)]) - set(before[str(root)])
    # Only the Session's own files may appear (its WAL, and a bytes-named Session `new`
    # may legitimately create); never a lock, a .creating leftover or a foreign file's WAL.
    assert not [n for n in new_names if n.endswith((".lock", ".creating"))], new_names
    assert not [
        n
        for n in new_names
        if n.startswith(("foreign.db-", "garbage.db-", "empty.db-", "text.txt-"))
    ], new_names
