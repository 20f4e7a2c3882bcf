"""Finding files by name (``find``) and lines by pattern (``grep``).

Both walk folders in sorted order without following symlinked folders, skip the folders of
version control, caches and virtual environments (SKIP_DIRS), and cap what they list so
their output fits a Cell's retained output.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from rio_ci.tools.files import ToolError

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "__pycache__",
        "node_modules",
        ".venv",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
    }
)
MAX_PATHS = 200
MAX_MATCHES = 100
MAX_FILE_BYTES = 2_000_000  # larger files are generated or data; grep names them instead
MATCH_CHARS = 300


def glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob over "/"-separated paths: ``*`` and ``?`` stay within one name, ``**`` spans
    folders (``**/`` also matches no folder), ``[...]`` is a class (``[!...]`` negated)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        char = pattern[i]
        close = pattern.find("]", i + 2) if char == "[" else -1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif close > 0:
            chars = pattern[i + 1 : close]
            chars = "^" + chars[1:] if chars.startswith("!") else chars
            out.append("[" + chars.replace("\\", "\\\\") + "]")
            i = close
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile("".join(out) + r"\Z")


def matcher(pattern: str) -> tuple[re.Pattern[str], bool]:
    """The regex for a glob and whether it applies to the whole relative path (the glob has
    a "/") rather than to the name alone."""
    pattern = pattern[2:] if pattern.startswith("./") else pattern
    return glob_regex(pattern.rstrip("/") or "*"), "/" in pattern.rstrip("/")


def walk(root: str) -> Iterator[tuple[str, str, bool]]:
    """``(path, path relative to root, is_dir)`` for everything under ``root``."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        rel_folder = os.path.relpath(folder, root)
        for name, is_dir in [*((d, True) for d in dirs), *((f, False) for f in sorted(files))]:
            rel = name if rel_folder == "." else f"{rel_folder}/{name}"
            yield os.path.normpath(os.path.join(folder, name)), rel, is_dir


def find(pattern: str, root: str = ".") -> str:
    """Paths under ``root`` matching the glob ``pattern``, sorted, one a line; folders end in
    "/". A pattern without "/" matches names at any depth (``*.py``); one with "/" matches
    the path relative to ``root`` (``src/**/test_*.py``). At most 200 are listed."""
    if not os.path.isdir(root):
        raise ToolError(f"no such folder: {root}")
    regex, by_path = matcher(pattern)
    found = sorted(
        path + "/" * is_dir
        for path, rel, is_dir in walk(root)
        if regex.match(rel if by_path else os.path.basename(rel))
    )
    if not found:
        return f"no paths match {pattern!r} under {root}"
    listed = found[:MAX_PATHS]
    if len(found) > MAX_PATHS:
        listed.append(
            f"[{len(found)} paths match; showing the first {MAX_PATHS}: narrow the "
            "pattern or the root]"
        )
    return "\n".join(listed)


def grep(
    pattern: str,
    *paths: str,
    glob: str | None = None,
    ignore_case: bool = False,
    fixed: bool = False,
) -> str:
    """Lines matching ``pattern`` (a Python regular expression; with ``fixed``, plain text)
    in the files under ``paths`` (default: "."), one ``path:line:text`` a line. ``glob``
    keeps the files whose name (or, with "/", relative path) matches it. Binary files and
    files over 2 MB are skipped (the latter are named). At most 100 matches are listed."""
    regex = _compile(pattern, ignore_case=ignore_case, fixed=fixed)
    listed: list[str] = []
    count = 0
    big: list[str] = []
    for path in _files(paths or (".",), glob):
        text = _searchable_text(path, big)
        for number, line in enumerate(text.split("\n") if text is not None else (), 1):
            if regex.search(line):
                count += 1
                if len(listed) < MAX_MATCHES:
                    listed.append(f"{path}:{number}:{_clipped(line)}")
    if count > MAX_MATCHES:
        listed.append(
            f"[{count} matches; showing the first {MAX_MATCHES}: narrow the pattern, "
            "the paths or glob]"
        )
    if not count:
        listed.append(f"no matches for {pattern!r} in {', '.join(paths or ('.',))}")
    if big:
        names = ", ".join(big[:5]) + (f" and {len(big) - 5} more" if len(big) > 5 else "")
        listed.append(f"[skipped files over {MAX_FILE_BYTES // 1_000_000} MB: {names}]")
    return "\n".join(listed)


def _compile(pattern: str, *, ignore_case: bool, fixed: bool) -> re.Pattern[str]:
    try:
        return re.compile(
            re.escape(pattern) if fixed else pattern, re.IGNORECASE if ignore_case else 0
        )
    except re.error as exc:
        raise ToolError(
            f"invalid regular expression {pattern!r}: {exc}; pass fixed=True "
            "(--fixed) to search for the text as it is"
        ) from None


def _files(tops: tuple[str, ...], glob: str | None) -> list[str]:
    """The files to search under ``tops``, filtered by ``glob``."""
    files = []
    keep = matcher(glob) if glob else None
    for top in tops:
        if os.path.isdir(top):
            files += [
                path
                for path, rel, is_dir in walk(top)
                if not is_dir
                and (keep is None or keep[0].match(rel if keep[1] else os.path.basename(rel)))
            ]
        elif os.path.exists(top):
            files.append(top)
        else:
            raise ToolError(f"no such file or folder: {top}")
    return files


def _searchable_text(path: str, big: list[str]) -> str | None:
    """The text of ``path``, or None for what is not searched: not a regular file (a
    socket, a fifo, a broken symlink), unreadable, binary, or too large (added to ``big``)."""
    if not os.path.isfile(path):
        return None
    try:
        if os.path.getsize(path) > MAX_FILE_BYTES:
            big.append(path)
            return None
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", "replace")


def _clipped(line: str) -> str:
    text = line.rstrip("\r")
    if len(text) > MATCH_CHARS:
        return f"{text[:MATCH_CHARS]} … [{len(text) - MATCH_CHARS} more]"
    return text
