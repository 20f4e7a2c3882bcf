"""Docs are code: every CLI command, Journal event kind and action input/output is documented."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rio_ci.cli import COMMANDS, build_parser
from rio_ci.core.events import KINDS as EVENT_KINDS
from rio_ci.core.state import validate_cell
from tests.kit import CliResult, run_cli

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROOT = DOCS.parent


def rio(*args: str, stdin: str | None = None) -> CliResult:
    return run_cli(*args, input=stdin, cwd=ROOT, timeout=120)


def test_every_cli_command_has_a_section_in_the_reference() -> None:
    text = (DOCS / "cli.md").read_text()
    headings = set(re.findall(r"^## (\S+)$", text, re.M))
    assert set(COMMANDS) <= headings, sorted(set(COMMANDS) - headings)


def test_every_cli_option_is_mentioned_in_the_reference() -> None:
    text = (DOCS / "cli.md").read_text()
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    missing = []
    for name, sub in subparsers.choices.items():  # type: ignore[attr-defined]
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help" and option not in text:
                    missing.append(f"{name} {option}")
    assert not missing


def test_every_event_kind_is_documented() -> None:
    text = (DOCS / "journal.md").read_text().split("## Event kinds", 1)[1]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", text, re.M))
    assert set(EVENT_KINDS) == documented, set(EVENT_KINDS) ^ documented


def test_every_action_input_and_output_is_documented() -> None:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    text = (DOCS / "github.md").read_text()
    names = list(action["inputs"]) + list(action["outputs"])
    assert names
    assert [n for n in names if f"`{n}`" not in text] == []


def test_index_links_every_page() -> None:
    index = (DOCS / "index.md").read_text()
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert {p for p in pages if f"({p})" not in index} == set()


def _blocks(text: str, info: str) -> list[Any]:
    return [json.loads(b) for b in re.findall(rf"^```{info}\n(.*?)^```$", text, re.M | re.S)]


@pytest.mark.slow
def test_the_patches_page_walk_through_runs_as_written(tmp_path: Path) -> None:
    """docs/patches.md: each ``json`` patch, submitted in order with ``work`` between."""
    page = (DOCS / "patches.md").read_text()
    patches = _blocks(page, "json")
    assert len(patches) == 3
    db = str(tmp_path / "s.db")
    made = rio("new", db, "--goal", "Say hello from a script", "--cwd", str(tmp_path))
    assert made.returncode == 0, made.stdout
    for patch in patches:
        turn = json.loads(rio("turn", db).stdout)
        done = rio("step", db, turn["turn_id"], "-", stdin=json.dumps(patch))
        assert done.returncode == 0, done.stdout
        assert rio("work", db).returncode == 0
    assert (tmp_path / "hello.txt").read_text() == "hello\n"
    shown = json.loads(rio("show", db, "--json").stdout)
    assert shown["ended"]["result"] == "success"


def test_the_patches_page_cells_to_copy_are_valid_cells() -> None:
    cells = _blocks((DOCS / "patches.md").read_text(), "json cell")
    assert [c["role"] for c in cells] == ["cancel", "resolution", "conclusion"]
    assert [validate_cell(c) for c in cells] == [None, None, None]


def test_step_help_points_at_the_patches_page() -> None:
    done = rio("step", "--help")
    assert "docs/patches.md" in done.stdout and (DOCS / "patches.md").is_file()


def test_show_json_keys_are_the_documented_ones(tmp_path: Path) -> None:
    """docs/cli.md names every key of ``show --json``, and no key it does not have."""
    from rio_ci.commands.show import summary
    from rio_ci.session.session import Session
    from rio_ci.session.settings import Settings

    text = (DOCS / "cli.md").read_text().split("## show", 1)[1].split("\n## ", 1)[0]
    paragraph = text.split("The JSON object's keys:", 1)[1].split("\n\n", 1)[0]
    # Top-level keys are the backticked names not inside a parenthesis or a brace.
    flat = re.sub(r"\([^()]*\)", "", re.sub(r"\{[^{}]*\}", "", paragraph))
    documented = set(re.findall(r"`([a-z_]+)`", flat))
    session = Session.create(tmp_path / "s.db", "goal", Settings(cwd=str(tmp_path)))
    try:
        keys = set(summary(session))
    finally:
        session.close()
    assert keys == documented, keys ^ documented


def test_show_json_ended_keys_are_the_documented_ones(tmp_path: Path) -> None:
    """docs/cli.md's ``ended`` object names the keys ``show --json`` prints for an ended run."""
    from rio_ci.commands.show import summary
    from rio_ci.session.session import Session
    from rio_ci.session.settings import Settings

    text = (DOCS / "cli.md").read_text().split("## show", 1)[1].split("\n## ", 1)[0]
    shape = re.search(r"`ended` \(`\{([^}]*)\}`", text)
    assert shape is not None, "docs/cli.md no longer spells out `ended`'s keys"
    documented = {key.strip() for key in shape.group(1).split(",")}
    session = Session.create(tmp_path / "s.db", "goal", Settings(cwd=str(tmp_path)))
    try:
        session.end_in_failure("given up")
        ended = summary(session)["ended"]
    finally:
        session.close()
    assert set(ended) == documented, set(ended) ^ documented


def test_the_repository_cites_its_own_docs_not_an_outside_spec() -> None:
    """Every contract is stated in docs/; nothing points at a document outside the repository."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    outside = "SPEC" + " §"  # spelled in two parts so this file does not match itself
    citing = [
        name
        for name in tracked
        if (ROOT / name).is_file() and outside in (ROOT / name).read_text(errors="replace")
    ]
    assert citing == []
