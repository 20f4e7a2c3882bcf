"""The architecture, checked: one write path, SQL in one folder, the Journal behind the
Session, data flowing one way, and each folder's rule (stated in its ``__init__``).

- only ``rio_ci/session/session.py`` writes events (opens ``journal.write()`` or holds a
  ``Writer``);
- only ``rio_ci/store/`` imports ``sqlite3``, with one documented exception: bench's bare
  baseline commit (it measures SQLite itself);
- nothing outside the Session and the store reaches ``session.journal``;
- every import runs down the layers (``LAYERS``): nothing imports what stands above it, and
  parts on one level (``store``, ``forge``, ``model``) do not import each other; no module
  imports itself through a circle, inside a part either;
- only ``rio_ci/forge/github*.py`` imports PyGithub, and no Forge module serves two hosts;
- a model provider's SDK is imported by its own module only (``rio_ci/model/claude/`` for
  ``anthropic``: the providers table names both), and nothing but the bench reaches into a
  provider's module from outside it;
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

PACKAGE = Path(__file__).resolve().parents[2] / "rio_ci"
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
    if relative(module) in ("rio_ci/session/session.py", "rio_ci/store/journal.py"):
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


def imports_of(source: str, package: str | None = None) -> set[str]:
    """Every module ``source`` imports (``from rio_ci import x`` counts as ``rio_ci.x``; a
    relative import is resolved against ``package``, the one the module lives in, or kept as
    ``<relative>`` when none is given), wherever the import stands: at the top, in a function,
    or in the body of ``if __name__ == "__main__":``."""
    imported = set()
    for node in ast.walk(ast.parse(source)):
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
# lower level, nothing on its own level or above (``run`` and ``reports`` share one: what
# people read never supervises, and supervision never renders). ``api`` and ``tools`` stand
# apart: a Cell imports them, so they import nothing of rio_ci.
LAYERS = {
    "core": 0,
    "faults": 0,
    "untrusted": 1,
    "store": 2,
    "forge": 2,
    "model": 2,
    "egress": 2,
    "start": 3,
    "session": 4,
    "run": 5,
    "reports": 5,
    "rounds": 6,
    "wake": 6,
    "github": 7,
    "commands": 8,
    "cli": 9,
    "__main__": 10,
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
    assert imports_up("from rio_ci.session.session import Session\n", "store") == [
        "rio_ci.session.session"
    ]
    assert imports_up("from rio_ci.store import journal\n", "forge") == ["rio_ci.store"]
    assert imports_up("from rio_ci import rounds\n", "reports") == ["rio_ci.rounds"]
    assert imports_up("import rio_ci.core.state\n", "api") == ["rio_ci.core.state"]
    assert imports_up("from rio_ci.core.state import compact\n", "store") == []
    assert imports_up("from rio_ci.store.journal import Journal\n", "store") == []
    program = 'if __name__ == "__main__":\n    from rio_ci.start.early import begin\n'
    assert imports_up(program, "cli") == []
    assert imports_up(program, "start") == []
    assert imports_up(program.replace("start.early", "cli"), "start") == ["rio_ci.cli"]
    assert imports_up("def main():\n    from rio_ci import cli\n", "start") == ["rio_ci.cli"]
    assert imports_up("from ..session import Session\n", "store", "rio_ci.store") == [
        "rio_ci.session"
    ]
    assert imports_up("from .. import rounds\n", "reports", "rio_ci.reports") == ["rio_ci.rounds"]
    assert imports_up("from . import journal\n", "store", "rio_ci.store") == []
    assert imports_up("from .journal import Journal\n", "store") == ["<relative>"]


def dotted_name(module: Path) -> str:
    """``rio_ci/store/journal.py`` -> ``rio_ci.store.journal``; a package's ``__init__`` is
    the package."""
    return relative(module).removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def module_imports(source: str, package: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` imports, wherever the import stands: for
    ``from X import a``, ``X.a`` when it is a module, else ``X``."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
            names = [n for n in names[:-1] if n in known] or [base]
        else:
            continue
        found |= {name for name in names if name in known}
    return found


def import_graph() -> dict[str, set[str]]:
    """Each module of rio_ci, and the modules of rio_ci it imports."""
    known = {dotted_name(module) for module in MODULES}
    graph = {}
    for module in MODULES:
        name = dotted_name(module)
        package = name if module.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = module_imports(module.read_text(), package, known) - {name}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every node an arrow path from ``start`` reaches (``start`` itself only through a loop)."""
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += graph.get(node, ())
    return seen


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of ``graph``: each set of two or more modules that reach each other, each
    sorted."""
    reach = {node: reachable(graph, node) for node in graph}
    found = {
        tuple(sorted({node} | {other for other in reach[node] if node in reach.get(other, ())}))
        for node in graph
    }
    return sorted(list(circle) for circle in found if len(circle) > 1)


def test_no_module_imports_itself_through_a_circle() -> None:
    """The layers forbid an import up or across; inside one part, modules still import each
    other one way only (an import inside a function or under ``__main__`` counts too)."""
    assert circles(import_graph()) == []


def test_the_circle_check_catches_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert circles(graph) == [["a", "b", "c"], ["d", "e"]]
    known = {"rio_ci.cli", "rio_ci.start", "rio_ci.start.early"}
    source = "def main():\n    from rio_ci import cli\n    from rio_ci.start import early\n"
    assert module_imports(source, "rio_ci.start", known) == {"rio_ci.cli", "rio_ci.start.early"}
    assert module_imports("from rio_ci.start.early import begin\n", "rio_ci", known) == {
        "rio_ci.start.early"
    }


# The package's top holds only the entry points docs/design.md names: the one entry
# (``python -m rio_ci``), the command line, and what Cells import; everything else is in a
# folder whose ``__init__`` states its rule.
TOP = {"__init__.py", "__main__.py", "api.py", "cli.py"}


def test_the_package_top_holds_only_its_entry_points() -> None:
    assert {module.name for module in PACKAGE.glob("*.py")} == TOP
    table = (PACKAGE.parent / "docs" / "design.md").read_text()
    assert all(f"`{name}`" in table for name in TOP - {"__init__.py"})


# What start-up may import of rio_ci (rio_ci/start/__init__.py): it runs in a process that
# may be thrown away at once, before the command line's imports; the providers table names
# the SDK to import early (a table of named tuples, no SDK).
START_IMPORTS = (
    "rio_ci.core",
    "rio_ci.start",
    "rio_ci.store.at_rest",
    "rio_ci.model.providers",
)


def start_up_imports(source: str) -> list[str]:
    """The rio_ci modules ``source`` (a module of rio_ci/start) imports beyond its rule."""
    return sorted(
        name
        for name in imports_of(source, "rio_ci.start")
        if name.startswith("rio_ci.")
        and not any(name == allowed or name.startswith(f"{allowed}.") for allowed in START_IMPORTS)
    )


@pytest.mark.parametrize("module", sorted((PACKAGE / "start").glob("*.py")), ids=relative)
def test_start_up_imports_only_the_core_and_the_session_at_rest(module: Path) -> None:
    assert start_up_imports(module.read_text()) == []


def test_the_start_up_check_catches_a_heavier_import() -> None:
    assert start_up_imports("from rio_ci.store.journal import Journal\n") == [
        "rio_ci.store.journal"
    ]
    assert start_up_imports("from rio_ci.store.at_rest import SIDECARS\n") == []
    assert start_up_imports("from . import preload\n") == []


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


# A provider is one module (rio_ci/model/providers.py): only it imports its SDK, and the
# provider-neutral modules of model/ import no provider's module (they are named in the
# table, as data). Outside model/, only the bench measures the Claude client itself.
PROVIDER_USERS = {"rio_ci/commands/bench/tokens.py"}


def provider_homes() -> dict[str, Path]:
    """Each provider's SDK → the folder (or file) of the module its row names."""
    from rio_ci.model.providers import PROVIDERS

    homes = {}
    for row in PROVIDERS:
        folder = PACKAGE.parent / row.module.replace(".", "/")
        homes[row.sdk or row.module] = folder if folder.is_dir() else folder.with_suffix(".py")
    return homes


def providers_reached(source: str, module: Path) -> list[str]:
    """The provider SDKs and modules ``source`` (the text of ``module``) imports out of place."""
    from rio_ci.model.providers import PROVIDERS

    imported = imports_of(source)
    wrong = []
    for row in PROVIDERS:
        home = provider_homes()[row.sdk or row.module]
        inside = module == home or home in module.parents
        if row.sdk is not None and row.sdk in {name.split(".")[0] for name in imported}:
            wrong += [] if inside else [row.sdk]
        if any(name == row.module or name.startswith(row.module + ".") for name in imported):
            wrong += [] if inside or relative(module) in PROVIDER_USERS else [row.module]
    return wrong


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_a_providers_sdk_and_module_are_imported_by_its_own_module_only(module: Path) -> None:
    assert providers_reached(module.read_text(), module) == [], relative(module)


def test_the_provider_check_catches_a_reach_into_a_provider() -> None:
    neutral = PACKAGE / "model" / "turn.py"
    assert providers_reached("from anthropic.types import Message\n", neutral) == ["anthropic"]
    reach = "from rio_ci.model.claude import table\n"
    assert providers_reached(reach, neutral) == ["rio_ci.model.claude"]
    assert providers_reached(reach, PACKAGE / "model" / "claude" / "tool.py") == []
    assert providers_reached("import anthropic\n", PACKAGE / "model" / "claude" / "client.py") == []


# Only the Session and the store reach the Journal. The Owner too asks the Session for what
# it needs of the file it guards: its identity, the guard, the check, the WAL checkpoint.
JOURNAL_READERS = {"rio_ci/session/session.py", "rio_ci/store/journal.py"}


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
    from rio_ci.session.session import Session

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


@pytest.mark.parametrize("module", sorted((PACKAGE / "wake").glob("*.py")), ids=relative)
def test_the_seam_for_what_wakes_a_session_knows_no_code_host(module: Path) -> None:
    """rio_ci/wake/__init__.py: a source is a host's; the seam imports none, nor a Forge."""
    hosts = {"forge", "github"}
    imported = {n for n in imports_of(module.read_text()) if n.startswith("rio_ci.")}
    assert not {n for n in imported if part_of(n) in hosts}


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
