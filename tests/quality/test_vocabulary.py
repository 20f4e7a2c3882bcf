"""One word per idea (docs/concepts.md): the names a word used to share are gone for good,
and so are the modules named after a retired meaning.

"fold" is only the reducer's (a WAL checkpoint copies the WAL into the file; a ``<details>``
section is collapsed), "snapshot" only a single-file copy of a Session (the Turn shows its
State, the projection is saved), "finish" only the job's finish step (an Execution's result is
recorded), a rejection is a ``Rejection`` or, raised, ``Rejected``, and "Cells" only the
State's (how an Owner confines them is its ``Confinement``).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from rio_ci.model.base import ModelRequest
from rio_ci.session.session import Session
from rio_ci.store.journal import Journal

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "rio_ci").rglob("*.py"))
PROSE = [*SOURCES, *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
PROSE += [ROOT / "rio_ci" / "model" / "prompt.md"]

# Names retired when their word was given to one idea only, and what replaced them.
RETIRED = {
    "_Reject": "a check returns the rule it breaks; the outcome is a Rejection",
    "Refused": "Rejection",
    "journal_events": "tail_events (a launch record's events are its tail)",
    "SNAPSHOT_EVERY": "SAVE_EVERY (the projection is saved)",
    "SNAPSHOT_OPEN_TURN": "SAVE_OPEN_TURN",
    "checkpoint_full": "wal_checkpoint_full (a bare checkpoint is the working tree's)",
    "checkpoint_wal": "wal_checkpoint",
    "_checkpoint_then_spawn": "_wal_checkpoint_then_spawn",
    "Cells": "Confinement (how an Owner confines its Cells; the State's Cells keep the word)",
    "fresh_cell_home": "ConfinementSettings.fresh_home",
    "Harness": "RoundLoop (rio_ci/rounds/loop.py); the harness is rio-ci's whole trusted side",
    "DEFAULT_MODEL": "DEFAULT_SPEC (rio_ci/model/providers.py): the model table's default model",
    "ActionEnv": "ActionInputs (rio_ci/github/contract.py: GitHub's variables and the inputs)",
    "check_success": "pull_request_gate (rio_ci/run/gate.py: supervision, not a report)",
    "History": "Timeline (rio_ci/core/timeline.py: what reports read; the Journal is the record)",
    "fold_history": "fold_timeline",
    "read_history": "read_timeline",
    "recent_history": "recent_timeline",
    "_History": "JournalFacts (what admission asks of the Journal: rio_ci/session/facts.py)",
}
# Modules retired when their name was given to one idea only, and where what they held went.
RETIRED_MODULES = {
    "rio_ci/harness.py": "rio_ci/rounds/loop.py (the round loop; the harness is the trusted side)",
    "rio_ci/core/history.py": "rio_ci/core/timeline.py (the reports' Timeline)",
    "rio_ci/reports/history.py": "rio_ci/reports/timeline.py",
    "rio_ci/github/events.py": "rio_ci/github/triggers.py (events are the Journal's)",
    "rio_ci/github/env.py": "rio_ci/github/contract.py (ActionInputs, the config, the outputs)",
    "rio_ci/model/environment.py": "rio_ci/model/environment_block.py",
    "rio_ci/entry.py": "rio_ci/start/early.py (rio_ci/__main__.py is the one entry)",
    "rio_ci/sdk_preload.py": "rio_ci/start/preload.py",
}
# Prose that gives a retired meaning to a word.
MISUSED = re.compile(
    r"\bfold(?:s|ed|ing)?\b[^.;:]{0,30}\bWAL\b|\bWAL\b[^.;:]{0,30}\bfold(?:s|ed|ing)?\b|"
    r"\bfold(?:s|ed|ing)?\b (?:it |them )?into the (?:database )?file|"
    r"\bTurn's snapshot\b|\bsnapshot of the projection\b|"
    r"\b(?:fold|folds|folded)\b[^.;]{0,40}(?:<details>|::group::|\bfold, table\b)|"
    r"\blogs? (?:is |are )?folded\b|\(folded[;)]",
    re.IGNORECASE,
)


def retired_names(source: str) -> list[str]:
    """Identifiers in ``source`` (defined, assigned, called or read) that RETIRED names."""
    found = []
    for node in ast.walk(ast.parse(source)):
        name = (
            getattr(node, "name", None) or getattr(node, "id", None) or getattr(node, "attr", None)
        )
        if isinstance(name, str) and name in RETIRED:
            found.append(f"line {node.lineno}: {name} ({RETIRED[name]})")  # type: ignore[attr-defined]
    return found


@pytest.mark.parametrize("module", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_retired_name_is_used(module: Path) -> None:
    assert retired_names(module.read_text()) == []


@pytest.mark.parametrize("page", PROSE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_word_is_given_a_retired_meaning(page: Path) -> None:
    lines = [
        f"{number}: {line.strip()}"
        for number, line in enumerate(page.read_text().splitlines(), start=1)
        if MISUSED.search(line)
    ]
    assert lines == []


def test_the_session_records_a_result_and_the_journal_checkpoints() -> None:
    """The methods the words left: an Execution's result is recorded, never "finished" by a
    Session method; copying the WAL into the file is a WAL checkpoint, never a "fold" (and
    a bare "checkpoint" is the working tree's, pushed to the Session's branch)."""
    assert hasattr(Session, "record_result") and not hasattr(Session, "finish")
    assert hasattr(Journal, "wal_checkpoint_full") and not hasattr(Journal, "fold")
    assert not hasattr(Session, "checkpoint") and not hasattr(Journal, "checkpoint")


@pytest.mark.parametrize("path", sorted(RETIRED_MODULES))
def test_no_retired_module_comes_back(path: str) -> None:
    assert not (ROOT / path).exists(), f"{path}: its name was retired; {RETIRED_MODULES[path]}"


def test_a_request_names_its_environment_block() -> None:
    """A request's block about where the model is, is its ``environment_block``; a bare
    ``environment`` is a process's variables."""
    fields = {field.name for field in dataclasses.fields(ModelRequest)}
    assert "environment_block" in fields and "environment" not in fields


def test_the_checks_catch_a_retired_name_and_a_retired_meaning() -> None:
    assert retired_names("class _Reject(Exception):\n    pass\n")
    assert retired_names("x = journal_events(s, 0)\n")
    assert retired_names("from rio_ci.store.journal import SNAPSHOT_EVERY\n")
    assert not retired_names("x = tail_events(s, 0)\n")
    assert retired_names("self.confinement = Cells(None, print)\n")
    assert not retired_names("cells = proj.cells\n")
    assert MISUSED.search("the Owner folds the WAL into the file")
    assert MISUSED.search("its launch was folded into the file itself")
    assert MISUSED.search("evaluated against the Turn's snapshot")
    assert MISUSED.search("Long logs are folded with `::group::`")
    assert MISUSED.search("the model's last rationale (folded), and usage")
    assert not MISUSED.search("the fold rebuilds the projection from the Journal")
    assert not MISUSED.search("a WAL checkpoint copies the WAL into the file")
