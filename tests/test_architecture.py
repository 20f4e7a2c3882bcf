"""The architecture, checked: one write path, SQL in one folder, the Journal behind the
Session, data flowing one way, and each folder's rule (stated in its ``__init__``).

- only ``rio_ci/session.py`` writes events (opens ``journal.write()`` or holds a ``Writer``);
- only ``rio_ci/store/`` imports ``sqlite3``, with one documented exception: bench's bare
  baseline commit (it measures SQLite itself);
- nothing outside the Session and the store reaches ``session.journal``;
- every import runs down the layers (``LAYERS``): nothing imports what stands above it, and
  parts on one level (``store``, ``forge``, ``model``) do not import each other;
- only ``rio_ci/forge/github*.py`` imports PyGithub, and no Forge module serves two hosts;
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
        elif isinstance(node, ast.ImportFrom) and node.module == "rio_ci.store.journal":
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
    if relative(module) in ("rio_ci/session.py", "rio_ci/store/journal.py"):
        return
    assert writes_events(module.read_text()) == []


def test_the_write_check_catches_writers() -> None:
    assert writes_events("with self.session.journal.write() as w:\n    pass\n")
    assert writes_events("from rio_ci.store.journal import Journal, Writer\n")
    assert writes_events("w.append(ev.output(1, 'stdout', text='x'))\n")
    assert writes_events("journal.write()\n")
    assert not writes_events(
        "self.session.record_result(1, result)\nparts.append(piece)\n"
        "pieces.append(ev.OutputPiece('stdout', text='x'))\n"
    )


def _run_as_a_program(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` — what ``python -m`` runs, never an importer."""
    return isinstance(node, ast.If) and ast.unparse(node.test) in (
        "__name__ == '__main__'",
        "'__main__' == __name__",
    )


def imports_of(source: str, package: str | None = None) -> set[str]:
    """Every module ``source`` imports (``from rio_ci import x`` counts as ``rio_ci.x``; a
    relative import is resolved against ``package``, the one the module lives in, or kept as
    ``<relative>`` when none is given), except in the body of ``if __name__ ==
    "__main__":``, which runs only when the module is the program (``python -m rio_ci.cli``
    hands over to ``rio_ci.entry`` there)."""
    tree = ast.parse(source)
    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if _run_as_a_program(node)
        for statement in node.body  # type: ignore[attr-defined]
        for inner in ast.walk(statement)
    }
    imported = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            if base in ("rio_ci", package) or node.module is None:
                imported |= {f"{base}.{alias.name}" for alias in node.names}
            else:
                imported.add(base)
    return imported


def _absolute(node: ast.ImportFrom, package: str | None) -> str:
    """The module a ``from ... import`` names, a relative one resolved against ``package``."""
    if not node.level:
        return node.module or ""
    if package is None:
        return "<relative>"
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_only_the_store_runs_sql(module: Path) -> None:
    if relative(module).startswith("rio_ci/store/") or relative(module) == (
        "rio_ci/commands/bench/baseline.py"
    ):
        return
    imported = {name.split(".")[0] for name in imports_of(module.read_text())}
    assert not {"sqlite3", "apsw", "sqlite_utils"} & imported, relative(module)


# Each part of rio_ci and its level: a module may import its own part and any part on a
# lower level, nothing on its own level or above. ``api`` and ``tools`` stand apart: a Cell
# imports them, so they import nothing of rio_ci.
LAYERS = {
    "core": 0,
    "faults": 0,
    "untrusted": 1,
    "sdk_preload": 1,
    "store": 2,
    "forge": 2,
    "model": 2,
    "session": 3,
    "run": 4,
    "reports": 5,
    "harness": 6,
    "github": 7,
    "commands": 8,
    "cli": 9,
    "entry": 10,
    "__main__": 11,
    "api": None,
    "tools": None,
}


def part_of(dotted: str) -> str:
    """``rio_ci.store.journal`` -> ``store``; ``rio_ci`` itself -> ``rio_ci``."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "rio_ci"


def imports_up(source: str, part: str, package: str | None = None) -> list[str]:
    """The rio_ci imports of a module of ``part`` that do not run down the layers."""
    level = LAYERS[part]
    wrong = []
    for name in sorted(imports_of(source, package)):
        if name == "<relative>":  # no package to resolve it against: say so
            wrong.append(name)
            continue
        if not name.startswith("rio_ci.") or part_of(name) == part:
            continue
        target = LAYERS.get(part_of(name))
        if level is None or target is None or target >= level:
            wrong.append(name)
    return wrong


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_every_import_runs_down_the_layers(module: Path) -> None:
    dotted = relative(module).removesuffix(".py").replace("/", ".")
    part = part_of(dotted.removesuffix(".__init__"))
    if part == "rio_ci":  # the package's own __init__
        assert not any(n.startswith("rio_ci.") for n in imports_of(module.read_text()))
        return
    assert part in LAYERS, f"{relative(module)}: a new part of rio_ci needs its place in LAYERS"
    package = dotted.removesuffix(".__init__") if module.name == "__init__.py" else dotted
    package = package if module.name == "__init__.py" else package.rpartition(".")[0]
    assert imports_up(module.read_text(), part, package) == [], relative(module)


def test_the_layer_check_catches_an_import_up_or_across() -> None:
    assert imports_up("from rio_ci.session import Session\n", "store") == ["rio_ci.session"]
    assert imports_up("from rio_ci.store import journal\n", "forge") == ["rio_ci.store"]
    assert imports_up("from rio_ci import harness\n", "reports") == ["rio_ci.harness"]
    assert imports_up("import rio_ci.core.state\n", "api") == ["rio_ci.core.state"]
    assert imports_up("from rio_ci.core.state import compact\n", "store") == []
    assert imports_up("from rio_ci.store.journal import Journal\n", "store") == []
    program = 'if __name__ == "__main__":\n    from rio_ci.entry import main\n'
    assert imports_up(program, "cli") == []
    assert imports_up(program.replace("__main__", "rio_ci.cli"), "cli") == ["rio_ci.entry"]
    otherwise = program.replace("    from", "    pass\nelse:\n    from")
    assert imports_up(otherwise, "cli") == ["rio_ci.entry"]  # only the program's body is skipped
    assert imports_up("from ..session import Session\n", "store", "rio_ci.store") == [
        "rio_ci.session"
    ]
    assert imports_up("from .. import harness\n", "reports", "rio_ci.reports") == ["rio_ci.harness"]
    assert imports_up("from . import journal\n", "store", "rio_ci.store") == []
    assert imports_up("from .journal import Journal\n", "store") == ["<relative>"]


FORGES = PACKAGE / "forge"


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_only_the_github_forge_imports_pygithub(module: Path) -> None:
    uses = any(name.split(".")[0] == "github" for name in imports_of(module.read_text()))
    assert not uses or (module.parent == FORGES and module.name.startswith("github")), relative(
        module
    )


def test_no_forge_module_serves_two_hosts() -> None:
    for module in FORGES.glob("*.py"):
        imported = imports_of(module.read_text())
        hosts = {name for name in imported if name.startswith("rio_ci.forge.")} - {
            "rio_ci.forge.base",
            "rio_ci.forge.issues",
        }
        own = "github" if module.name.startswith("github") else module.stem
        assert all(name.removeprefix("rio_ci.forge.").startswith(own) for name in hosts), relative(
            module
        )


# Only the Session and the store reach the Journal. The Owner too asks the Session for what
# it needs of the file it guards: its identity, the guard, the check, the WAL checkpoint.
JOURNAL_READERS = {"rio_ci/session.py", "rio_ci/store/journal.py"}


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


def reached_through_the_journal(source: str) -> set[str]:
    """The names ``source`` reads of something's ``journal`` (``session.journal.path``: path)."""
    return {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "journal"
    }


def test_tests_ask_the_session_for_what_it_offers() -> None:
    """A test reaches through ``session.journal`` only for what is the Journal's own (a
    replay, a reopen, dropped derived data, a write as another process makes one); the
    Journal's tests excepted."""
    from rio_ci.session import Session

    tests = PACKAGE.parent / "tests"
    found = {
        f"{path.relative_to(tests)}: {name}"
        for path in tests.rglob("*.py")
        if path.name != "test_journal.py"
        for name in reached_through_the_journal(path.read_text())
        if hasattr(Session, name)
    }
    assert found == set()


def test_the_session_offer_check_catches_a_reach_through() -> None:
    assert reached_through_the_journal("session.journal.path\nowner.session.journal.replay()") == {
        "path",
        "replay",
    }
    assert reached_through_the_journal("session.path\njournal.replay()") == set()


def test_function_size_and_complexity_are_bounded_by_ruff() -> None:
    """The rule is a bound on a function, not on a module (ruff enforces it in
    test_quality.py): C901 (complexity) and PLR0915 (statements), thresholds in pyproject."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["ruff"]
    assert {"C901", "PLR0915"} <= set(config["lint"]["select"])
    assert config["lint"]["mccabe"]["max-complexity"] <= 10
    assert config["lint"]["pylint"]["max-statements"] <= 50


# The runner's variables: GitHub's (GITHUB_*, RUNNER_*) and the image's (ImageOS, ImageVersion).
ACTIONS_ENVIRONMENT = re.compile(r"[\"']((GITHUB|RUNNER)_[A-Z_]+|ImageOS|ImageVersion)[\"']")


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_only_the_github_layer_reads_the_actions_environment(module: Path) -> None:
    if not relative(module).startswith("rio_ci/github/"):
        assert not ACTIONS_ENVIRONMENT.findall(module.read_text()), relative(module)


def test_the_actions_environment_check_catches_a_reader() -> None:
    assert ACTIONS_ENVIRONMENT.search('os.environ["GITHUB_TOKEN"]')
    assert ACTIONS_ENVIRONMENT.search('environ.get("ImageOS", "")')
    assert not ACTIONS_ENVIRONMENT.search('os.environ["RIO_MODEL"]')


def test_the_layer_table_in_the_design_doc_is_this_list() -> None:
    """docs/design.md draws the layers for readers: the same parts on the same levels."""
    text = (PACKAGE.parent / "docs" / "design.md").read_text()
    drawn: dict[str, int | None] = {}
    for level, parts in re.findall(r"^\| (\d+|—) \| ([^|]+) \|", text, re.MULTILINE):
        for name in re.findall(r"`([a-z_]+)(?:/|\.py)?`", parts):
            drawn[name] = None if level == "—" else int(level)
    assert drawn == LAYERS
