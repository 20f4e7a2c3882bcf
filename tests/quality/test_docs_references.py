"""The docs stand alone and agree with the tree.

Every path and module they name exists (``rio_ci/run/owner.py``, ``rio_ci/commands/bench/``,
``rio_ci/reports/timeline.py::read_timeline``, ``rio_ci.run.owner.in_doubt``,
``tests/quality/test_lock.py``), every relative link reaches its file and heading, and no moment of
the project's history is left in them: a tracker number ("issue 26", "#26"), a commit, a
"stop 19" or a "second round". What changed, and when, is the CHANGELOG's.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
PROSE = [*PAGES, ROOT / "README.md"]

# A path into the package or the tests, not inside another path (``pylib/rio_ci/``, a link's
# ``../rio_ci/...``: links are checked below), optionally naming what it defines.
PATH = re.compile(r"(?<![\w./-])((?:rio_ci|tests)/[\w./-]*[\w/])(?:::(\w+))?")
MODULE = re.compile(r"(?<![\w./-])rio_ci(?:\.\w+)+")
# A component that stands for a value the reader picks: tests/golden/X.Y.Z.
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_.]*$")
FENCE = re.compile(r"^```.*?^```$", re.M | re.S)
LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)
CODE_SPAN = re.compile(r"`[^`]*`")

# Moments of the project's history, each with why it does not belong in the docs.
HISTORY = [
    (
        re.compile(r"(?<![\w/-])(?:issues?|PR)[ -]#?\d+\b|(?<![\w/&-])#\d+\b", re.I),
        "a tracker number: state the contract; what changed belongs in CHANGELOG.md",
    ),
    (
        re.compile(r"(?<![\w@/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w-])"),
        "a commit: the docs describe the tree they are in; older trees belong in CHANGELOG.md",
    ),
    (
        re.compile(r"\bstop[ -]\d+(?![.\d])|\bsecond round\b|\bmodel2\b", re.I),
        "a stage of the project's work: name what the section is about instead",
    ),
]


def prose_lines(page: Path, *, code_blocks: bool = True) -> list[tuple[int, str]]:
    """The page's lines with their numbers; without ``code_blocks``, fenced blocks blanked."""
    text = page.read_text()
    if not code_blocks:
        text = FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text)
    return list(enumerate(text.splitlines(), start=1))


def defines(source: str, name: str) -> bool:
    """Whether ``source`` defines ``name``: a function, a class or an assigned name."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def path_problem(path: str, name: str | None) -> str | None:
    """Why the docs' ``path`` (and ``name`` defined in it) does not match the tree, or None."""
    if any(PLACEHOLDER.match(part) for part in path.split("/")):
        return None
    target = ROOT / path
    if not target.exists():
        return "no such file or folder"
    if path.endswith("/") and not target.is_dir():
        return "not a folder"
    if name is not None and not (target.is_file() and defines(target.read_text(), name)):
        return f"{name} is not defined there"
    return None


def module_problem(dotted: str) -> str | None:
    """Why ``rio_ci.a.b.name`` names no module or no attribute of one, or None."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for attribute in parts[end:]:
            if not hasattr(found, attribute):
                return f"{'.'.join(parts[:end])} has no {attribute}"
            found = getattr(found, attribute)
        return None
    return "no such module"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text lowercased, punctuation dropped, spaces dashed."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub gives ``page``'s headings (a repeated one gets ``-1``, ``-2`` …)."""
    seen: dict[str, int] = {}
    found = set()
    text = FENCE.sub("", page.read_text())
    for heading in HEADING.findall(text):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def link_problem(page: Path, target: str) -> str | None:
    """Why the relative link ``target`` on ``page`` does not resolve, or None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: the outside world
        return None
    file_part, _, anchor = target.partition("#")
    dest = (page.parent / file_part).resolve() if file_part else page
    if not dest.exists():
        return "no such file or folder"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{dest.name} has no heading #{anchor}"
    return None


def history_found(line: str) -> list[str]:
    return [f"{m.group(0)!r}: {why}" for pattern, why in HISTORY for m in pattern.finditer(line)]


@pytest.mark.parametrize("page", PROSE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_path_the_docs_name_exists(page: Path) -> None:
    wrong = [
        f"{page.name}:{number}: {path}{'::' + name if name else ''}: {problem}"
        for number, line in prose_lines(page, code_blocks=False)
        for path, name in PATH.findall(line)
        if (problem := path_problem(path, name or None))
    ]
    assert wrong == [], "the docs name what the tree does not have:\n" + "\n".join(wrong)


@pytest.mark.parametrize("page", PROSE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_module_the_docs_name_imports(page: Path) -> None:
    wrong = [
        f"{page.name}:{number}: {dotted}: {problem}"
        for number, line in prose_lines(page)
        for dotted in MODULE.findall(line)
        if (problem := module_problem(dotted))
    ]
    assert wrong == [], "the docs name modules the package does not have:\n" + "\n".join(wrong)


@pytest.mark.parametrize("page", PROSE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    wrong = [
        f"{page.name}:{number}: ({target}): {problem}"
        for number, line in prose_lines(page, code_blocks=False)
        for target in LINK.findall(CODE_SPAN.sub("", line))
        if (problem := link_problem(page, target))
    ]
    assert wrong == [], "links that lead nowhere:\n" + "\n".join(wrong)


@pytest.mark.parametrize("page", PROSE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_moment_of_the_projects_history_is_in_the_docs(page: Path) -> None:
    found = [
        f"{page.name}:{number}: {what}"
        for number, line in prose_lines(page)
        for what in history_found(line)
    ]
    assert found == [], "history in the docs:\n" + "\n".join(found)


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    """Each check fails on the fault it is for, and lets the tree's own names through."""
    assert path_problem("rio_ci/run/owner.py", "in_doubt") is None
    assert path_problem("rio_ci/commands/bench/", None) is None
    assert path_problem("tests/golden/X.Y.Z", None) is None
    assert path_problem("rio_ci/supervision.py", None) == "no such file or folder"
    assert path_problem("rio_ci/run/owner.py/", None) == "not a folder"
    assert (
        path_problem("rio_ci/run/owner.py", "nothing_here") == "nothing_here is not defined there"
    )
    assert module_problem("rio_ci.run.owner.in_doubt") is None
    assert module_problem("rio_ci.run.owner.nothing_here") == "rio_ci.run.owner has no nothing_here"
    assert module_problem("rio_ci.nowhere") == "rio_ci has no nowhere"
    page = tmp_path / "page.md"
    page.write_text("# Who steers: `rio.yml`\n\n## Twice\n\n## Twice\n")
    assert anchors(page) == {"who-steers-rioyml", "twice", "twice-1"}
    assert link_problem(page, "#twice-1") is None
    assert link_problem(page, "#nowhere") == "page.md has no heading #nowhere"
    assert link_problem(page, "other.md") == "no such file or folder"
    assert link_problem(page, "https://example.com/#x") is None
    assert link_problem(DOCS / "index.md", "github.md#the-runner") is None
    for moment in ("issue 26", "Issues 24 and 26", "(#12)", "at 0f3618c", "stop 19", "model2"):
        assert history_found(moment), moment
    for fact in (
        "`rio/issue-7`",
        "[sudo-rs#1299](https://x)",
        "uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1",
        "at stop 0.8 ms",
        "`/rio stop`",
        "Fixes #n",
    ):
        assert not history_found(fact), fact
