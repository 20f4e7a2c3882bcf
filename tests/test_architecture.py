"""The architecture, checked: one write path, SQL in one module, the Journal behind the Session.

- only ``rio_ci/session.py`` writes events (opens ``journal.write()`` or holds a ``Writer``);
- only ``rio_ci/journal.py`` imports ``sqlite3``, with three documented exceptions: bench's
  bare baseline commit (it measures SQLite itself), ``rio_ci/sessionfile.py`` (read-only
  looks at a file before the Journal opens it, and single-file copies) and ``rio_ci/entry.py``
  (one row of a Session at rest, its ``--secret`` names, before the command line is imported);
- nothing outside the Session (and the Owner's file guard) reaches ``session.journal``;
- a function's size and complexity are bounded (ruff C901, PLR0915), a module's are not;
- events are built only by ``rio_ci.core.events`` constructors (no module but the Session
  appends, and the Session appends only what those constructors return).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from rio_ci.core.events import KINDS

PACKAGE = Path(__file__).resolve().parents[1] / "rio_ci"
MODULES = sorted(PACKAGE.rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def writes_events(source: str) -> list[str]:
    """Places in ``source`` that open a Journal transaction or append an event."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "write":
            owner = ast.unparse(node.value)
            if owner == "journal" or owner.endswith(".journal"):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module == "rio_ci.journal":
            found += [
                f"line {node.lineno}: imports Writer"
                for alias in node.names
                if alias.name == "Writer"
            ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "append"
            and isinstance(node.args[0] if node.args else None, ast.Call)
        ):
            inner = node.args[0]
            assert isinstance(inner, ast.Call)
            name = ast.unparse(inner.func)
            if name.startswith("ev.") and name[3:] in KINDS:  # an event constructor
                found.append(f"line {node.lineno}: appends {name}")
    return found


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_only_the_session_writes_events(module: Path) -> None:
    if relative(module) in ("rio_ci/session.py", "rio_ci/journal.py"):
        return
    assert writes_events(module.read_text()) == []


def test_the_write_check_catches_writers() -> None:
    assert writes_events("with self.session.journal.write() as w:\n    pass\n")
    assert writes_events("from rio_ci.journal import Journal, Writer\n")
    assert writes_events("w.append(ev.output(1, 'stdout', text='x'))\n")
    assert writes_events("journal.write()\n")
    assert not writes_events(
        "self.session.finish(1, result)\nparts.append(piece)\n"
        "pieces.append(ev.OutputPiece('stdout', text='x'))\n"
    )


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_only_the_journal_runs_sql(module: Path) -> None:
    if relative(module) in (
        "rio_ci/journal.py",
        "rio_ci/sessionfile.py",
        "rio_ci/entry.py",
        "rio_ci/commands/bench/baseline.py",
    ):
        return
    imported = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert not {"sqlite3", "apsw", "sqlite_utils"} & imported, relative(module)


# The Owner guards the very file the Journal has open (its identity, refusal, the fold
# before a launch): that is the Journal's business on the Owner's behalf, and stays there.
JOURNAL_READERS = {"rio_ci/session.py", "rio_ci/journal.py", "rio_ci/run/owner.py"}


def reaches_the_journal(source: str) -> bool:
    """True when ``source`` reads an attribute ``journal`` of something (``session.journal``)."""
    return any(
        isinstance(node, ast.Attribute) and node.attr == "journal"
        for node in ast.walk(ast.parse(source))
    )


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_nothing_outside_the_session_reaches_the_journal(module: Path) -> None:
    if relative(module) not in JOURNAL_READERS:
        assert not reaches_the_journal(module.read_text()), relative(module)


def test_the_journal_check_catches_a_reader() -> None:
    assert reaches_the_journal("for e in session.journal.events(): pass")
    assert not reaches_the_journal("for e in session.events(): pass")


def test_function_size_and_complexity_are_bounded_by_ruff() -> None:
    """The rule is a bound on a function, not on a module (ruff enforces it in
    test_quality.py): C901 (complexity) and PLR0915 (statements), thresholds in pyproject."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["ruff"]
    assert {"C901", "PLR0915"} <= set(config["lint"]["select"])
    assert config["lint"]["mccabe"]["max-complexity"] <= 10
    assert config["lint"]["pylint"]["max-statements"] <= 50


ACTIONS_ENVIRONMENT = re.compile(r"[\"'](GITHUB|RUNNER)_[A-Z_]+[\"']")


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_only_the_github_layer_reads_the_actions_environment(module: Path) -> None:
    if not relative(module).startswith("rio_ci/github/"):
        assert not ACTIONS_ENVIRONMENT.findall(module.read_text()), relative(module)


def test_the_actions_environment_check_catches_a_reader() -> None:
    assert ACTIONS_ENVIRONMENT.search('os.environ["GITHUB_TOKEN"]')
    assert not ACTIONS_ENVIRONMENT.search('os.environ["RIO_MODEL"]')
