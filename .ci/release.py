"""Release checks and notes, for the release workflow and a maintainer (docs/releasing.md).

    python3 .ci/release.py version         the package's version (rio_ci/__init__.py)
    python3 .ci/release.py check TAG       TAG is v<version>, the CHANGELOG's newest release
                                           section is that version's, Unreleased is on top
    python3 .ci/release.py notes VERSION   that version's CHANGELOG section (the release notes)
    python3 .ci/release.py pin SHA         the README's workflow pins SHA with the version

Standard library only: the workflow runs it before anything is installed. ``--root DIR``
(first) reads another tree than this checkout. A refusal is one line on stderr, exit 1.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

UNRELEASED = "Unreleased"
SEMVER = re.compile(r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")
HEADING = re.compile(r"^## (\S+)(?: — (.+))?$")
# The README's workflow line that names this action: its commit (or the placeholder the
# release fills in) and the version in a comment.
PIN = re.compile(r"^(\s*- uses: [\w.-]+/rio-ci@)([0-9a-f]{40}|COMMIT_SHA)(\s+# )v(\S+)(.*)$", re.M)


class Refused(Exception):
    """Why the release cannot go on: one line."""


def version(root: Path) -> str:
    """``__version__`` of ``rio_ci/__init__.py``, read without importing the package."""
    tree = ast.parse((root / "rio_ci" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
            "__version__"
        ]:
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                return value.value
    raise Refused("rio_ci/__init__.py sets no __version__ string")


def sections(root: Path) -> list[tuple[str, list[str]]]:
    """The CHANGELOG's ``## `` sections in order: (name, the lines under the heading)."""
    found: list[tuple[str, list[str]]] = []
    for line in (root / "CHANGELOG.md").read_text().splitlines():
        match = HEADING.match(line)
        if match:
            found.append((match[1], []))
        elif found:
            found[-1][1].append(line)
    return found


def check(root: Path, tag: str) -> str:
    """The version ``tag`` releases, after checking that everything says so."""
    current = version(root)
    if not SEMVER.fullmatch(current):
        raise Refused(f"the version {current!r} is not a semantic version X.Y.Z")
    if tag != f"v{current}":
        raise Refused(f"the tag {tag} is not v{current}, the version rio_ci/__init__.py says")
    names = [name for name, _ in sections(root)]
    if not names or names[0] != UNRELEASED:
        raise Refused(f"CHANGELOG.md must start with a ## {UNRELEASED} section")
    released = [n for n in names[1:] if SEMVER.fullmatch(n)]
    if not released or released[0] != current:
        newest = released[0] if released else "none"
        raise Refused(f"the CHANGELOG's newest release section is {newest}, not {current}")
    if not notes(root, current).strip():
        raise Refused(f"the CHANGELOG's {current} section is empty")
    return current


def notes(root: Path, wanted: str) -> str:
    """The text of ``wanted``'s section (``vX.Y.Z`` or ``X.Y.Z``), without its heading."""
    wanted = wanted.removeprefix("v")
    for name, lines in sections(root):
        if name == wanted:
            return "\n".join(lines).strip() + "\n"
    raise Refused(f"CHANGELOG.md has no ## {wanted} section")


def pin(root: Path, sha: str) -> str:
    """Write ``sha`` and the version into the README's ``uses:`` line; returns the line."""
    if not re.fullmatch(r"[0-9a-f]{40}", sha):
        raise Refused(f"{sha!r} is not a full commit SHA (40 lowercase hex digits)")
    readme = root / "README.md"
    text = readme.read_text()
    lines = PIN.findall(text)
    if len(lines) != 1:
        raise Refused(f"README.md has {len(lines)} rio-ci uses: lines with a version comment")
    text = PIN.sub(lambda m: f"{m[1]}{sha}{m[3]}v{version(root)}{m[5]}", text)
    readme.write_text(text)
    (line,) = [m.group(0) for m in PIN.finditer(text)]
    return line.strip()


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[1]
    if argv[:1] == ["--root"] and len(argv) > 1:
        root, argv = Path(argv[1]), argv[2:]
    commands = {
        "version": lambda: version(root),
        "check": lambda: check(root, argv[1]),
        "notes": lambda: notes(root, argv[1]).rstrip("\n"),
        "pin": lambda: pin(root, argv[1]),
    }
    wanted = 1 if argv[:1] == ["version"] else 2
    if not argv or argv[0] not in commands or len(argv) != wanted:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        print(commands[argv[0]]())
    except Refused as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
