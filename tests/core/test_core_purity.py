"""rio_ci/core is pure (rio_ci/core/__init__.py states the rule; admission: docs/patches.md).

Every module there may import only the standard library's pure parts and rio_ci.core
itself; imports under ``if TYPE_CHECKING:`` count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "rio_ci" / "core"
# The standard library's pure parts, and jsonpointer (pure: RFC 6901 pointers, no I/O).
ALLOWED = {
    "__future__",
    "typing",
    "dataclasses",
    "json",
    "re",
    "hashlib",
    "copy",
    "tomllib",
    "collections.abc",
    "math",
    "jsonpointer",
}


def offending_imports(source: str, package: str = "rio_ci.core") -> list[str]:
    """Every import in ``source`` outside ALLOWED and ``rio_ci.core``, with its line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: stays inside rio_ci.core only at level 1
                names = [package if node.level == 1 else "rio_ci"]
            else:
                names = [node.module or ""]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            names = ["__import__()"]
        else:
            continue
        for name in names:
            if name not in ALLOWED and name != package and not name.startswith(package + "."):
                found.append(f"line {node.lineno}: {name}")
    return found


def core_modules() -> list[Path]:
    return sorted(CORE.glob("*.py"))


def test_core_has_the_expected_modules() -> None:
    names = {p.stem for p in core_modules()}
    assert {"state", "admission", "reducer", "limits"} <= names


@pytest.mark.parametrize("module", core_modules(), ids=lambda p: p.name)
def test_core_modules_import_only_pure_modules(module: Path) -> None:
    bad = offending_imports(module.read_text())
    assert not bad, f"rio_ci/core/{module.name} imports outside the pure set: {bad}"


@pytest.mark.parametrize(
    "source, culprit",
    [
        ("import os", "os"),
        ("import json, sqlite3", "sqlite3"),
        ("from subprocess import run", "subprocess"),
        ("import collections", "collections"),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import socket", "socket"),
        ("def f():\n    import time", "time"),
        ("from .. import journal", "rio_ci"),
        ("from rio_ci.store.journal import Journal", "rio_ci.store.journal"),
        ("mod = __import__('os')", "__import__()"),
    ],
)
def test_the_check_catches_impure_imports(source: str, culprit: str) -> None:
    assert [item.split(": ", 1)[1] for item in offending_imports(source)] == [culprit]


def test_the_check_allows_the_pure_set() -> None:
    source = "\n".join(
        [
            "from __future__ import annotations",
            "import json, re, hashlib, copy, tomllib",
            "from typing import Any",
            "from dataclasses import dataclass",
            "from collections.abc import Iterator",
            "from rio_ci.core.state import SCHEMA",
            "from . import reducer",
        ]
    )
    assert offending_imports(source) == []
