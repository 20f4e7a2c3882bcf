"""Anchored patterns end with ``\\Z`` (or are used with ``fullmatch``): ``$`` also matches
before a final newline, so ``/cells/1\\n`` or the kind ``execution\\n`` would pass for the
real thing. A raw-string pattern in rio_ci that ends in ``$`` is refused here (multi-line
patterns, ``(?m)``, mean line ends and are allowed)."""

from __future__ import annotations

import re
from pathlib import Path

from rio_ci.core.admission import _INDEX_PATH
from rio_ci.core.inbox import message_problem
from rio_ci.core.state import EVIDENCE_REF
from rio_ci.forge.issues import issue_of_branch

ROOT = Path(__file__).resolve().parents[2]
_ENDS_IN_DOLLAR = re.compile(r"""r["']([^"'\n]*)\$["']""")


def test_no_pattern_in_rio_ci_ends_with_a_dollar() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path in sorted((ROOT / "rio_ci").rglob("*.py"))
        for match in _ENDS_IN_DOLLAR.finditer(path.read_text())
        if "(?m)" not in match.group(0)
    ]
    assert found == []


def test_the_anchored_patterns_refuse_a_trailing_newline() -> None:
    assert _INDEX_PATH.match("/cells/1") and not _INDEX_PATH.match("/cells/1\n")
    assert EVIDENCE_REF.match("session:event:3") and not EVIDENCE_REF.match("session:event:3\n")
    assert issue_of_branch("rio/issue-7") == 7 and issue_of_branch("rio/issue-7\n") is None
    assert message_problem("m", "note", {}) is None
    assert message_problem("m", "note\n", {}) is not None
