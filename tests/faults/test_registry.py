"""The crash-point registry is complete and documented: every ``crash_point("…")`` in rio_ci
is in ``POINTS``, every registered point is called somewhere, and docs/durability.md lists each
one."""

from __future__ import annotations

import re
from pathlib import Path

from rio_ci.faults.crashpoints import FINISH_POINTS, MIGRATION_POINTS, POINTS

ROOT = Path(__file__).resolve().parents[2]


def test_every_crash_point_is_registered_called_and_documented() -> None:
    called: set[str] = set()
    for source in (ROOT / "rio_ci").rglob("*.py"):
        called |= set(re.findall(r'crash_point\("([a-z_]+)"\)', source.read_text()))
    called |= set(
        re.findall(
            r'crash_before="([a-z_]+)"',
            "".join(p.read_text() for p in (ROOT / "rio_ci").rglob("*.py")),
        )
    )
    registered = POINTS + FINISH_POINTS + MIGRATION_POINTS
    assert called - set(registered) == set(), "crash points missing from the registry"
    assert set(registered) - called == set(), "registered crash points nothing passes"
    assert len(set(registered)) == len(registered)
    doc = (ROOT / "docs" / "durability.md").read_text()
    assert [p for p in registered if f"`{p}`" not in doc] == []
