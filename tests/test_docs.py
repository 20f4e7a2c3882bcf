"""Docs are code: every CLI command, Journal event kind and action input/output is documented."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from rio_ci.cli import COMMANDS, build_parser
from rio_ci.core.events import KINDS as EVENT_KINDS

DOCS = Path(__file__).resolve().parent.parent / "docs"
ROOT = DOCS.parent


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


def test_show_json_keys_are_the_documented_ones(tmp_path: Path) -> None:
    """docs/cli.md names every key of ``show --json``, and no key it does not have."""
    from rio_ci.commands.show import summary
    from rio_ci.session import Session

    text = (DOCS / "cli.md").read_text().split("## show", 1)[1].split("\n## ", 1)[0]
    paragraph = text.split("The JSON object's keys:", 1)[1].split("\n\n", 1)[0]
    # Top-level keys are the backticked names not inside a parenthesis or a brace.
    flat = re.sub(r"\([^()]*\)", "", re.sub(r"\{[^{}]*\}", "", paragraph))
    documented = set(re.findall(r"`([a-z_]+)`", flat))
    session = Session.create(tmp_path / "s.db", "goal", cwd=str(tmp_path))
    try:
        keys = set(summary(session))
    finally:
        session.close()
    assert keys == documented, keys ^ documented
