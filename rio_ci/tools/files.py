"""Reading and editing one text file: ``view``, ``replace``, ``insert``, ``create``.

Files are UTF-8. An edit keeps the file's line endings ("\\r\\n" when most of its lines end
so, else "\\n"; the ``"\\n"`` in the text you pass becomes that ending) and a missing final
newline, and replaces the file through a temporary file, keeping its permission bits. Every
function returns the report the command prints; a failure raises ``ToolError`` saying what to
do instead.

Writes stay inside the working directory (the current directory): a path that is absolute
outside it, climbs out with ``..``, or reaches out through a symbolic link is refused, and so
is any path with a ``.git`` component (hooks and config there would run as the harness's
git). No write sets the setuid, setgid or sticky bit (docs/tools.md, "What the tools never
write").
"""

from __future__ import annotations

import os
import tempfile

VIEW_CHARS = 12_000  # a view must fit a Cell's retained output (output_bytes: 16 KB by default)
LINE_CHARS = 1_000  # longer lines (minified files) are clipped in views
CONTEXT = 3  # lines shown around an edit


class ToolError(ValueError):
    """A tool could not do what was asked; the message says why and what to do instead."""


def read_bytes(path: str) -> bytes:
    if os.path.isdir(path):
        raise ToolError(f"{path} is a directory: list it with find('*', {path!r})")
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        raise ToolError(f"no such file: {path}") from None
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror}") from None


def read_text(path: str) -> str:
    """The text of a UTF-8 file; ToolError for a binary or a non-UTF-8 file."""
    data = read_bytes(path)
    if b"\0" in data[:8192]:
        raise ToolError(f"{path} looks binary ({len(data)} bytes); these tools edit text files")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(
            f"{path} is not UTF-8 (byte {data[exc.start]:#04x} at offset "
            f"{exc.start}); edit it in a code Cell with its encoding"
        ) from None


PLAIN_MODE = 0o777  # permission bits only: never setuid (0o4000), setgid (0o2000), sticky


def confined(path: str) -> str:
    """The real path a write to ``path`` reaches (through symbolic links), or ToolError when
    that is outside the working directory or inside a ``.git`` folder."""
    root = os.path.realpath(os.getcwd())
    target = os.path.realpath(path)
    if target != root and not target.startswith(root.rstrip(os.sep) + os.sep):
        raise ToolError(
            f"{path} is outside the working directory {root} (through '..', an absolute "
            "path or a symbolic link): the tools write only inside it"
        )
    inside = os.path.relpath(target, root).split(os.sep)
    given = os.path.normpath(path).split(os.sep)
    if any(part.lower() == ".git" for part in inside + given):
        raise ToolError(f"{path} is inside .git: the tools never write git's own files")
    return target


def check_mode(path: str, mode: int) -> int:
    """The permission bits a diff's git mode (``100644``, ``100755``) gives ``path``;
    ToolError for a mode that is not a plain file's or that sets setuid, setgid or sticky."""
    kind = mode & ~0o7777
    if kind not in (0, 0o100000):
        raise ToolError(f"mode {mode:o} for {path} is not a regular file's (100644 or 100755)")
    if mode & ~PLAIN_MODE & 0o7777:
        raise ToolError(
            f"mode {mode:o} for {path} sets setuid, setgid or sticky bits: the tools write "
            "only plain permissions (100644 or 100755)"
        )
    return mode & PLAIN_MODE


def write_text(path: str, text: str, mode: int | None = None) -> None:
    """Make ``text`` the content of ``path`` (through a symlink, to its target, which must
    be inside the working directory: see ``confined``). An existing file is replaced
    atomically and keeps its permission bits (never setuid, setgid or sticky); a new one gets
    ``mode`` (default: as ``open`` creates it) and its missing folders."""
    target = confined(path)
    if mode is not None:
        mode = check_mode(path, mode)
    data = text.encode("utf-8")
    try:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        if not os.path.exists(target):
            with open(target, "xb") as handle:
                handle.write(data)
            if mode is not None:
                os.chmod(target, mode)
            return
        old_mode = os.stat(target).st_mode & PLAIN_MODE
        fd, temp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".rio-tools-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(temp, old_mode if mode is None else mode)
            os.replace(temp, target)
        except BaseException:
            os.unlink(temp)
            raise
    except OSError as exc:
        raise ToolError(f"cannot write {path}: {exc.strerror or exc}") from None


def split_lines(text: str) -> list[str]:
    """Lines with their endings ("\\n" or "\\r\\n"); only the last may lack one. Unlike
    ``str.splitlines`` this splits at "\\n" only, as git and diff do."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def body(line: str) -> str:
    """A line without its ending."""
    if line.endswith("\r\n"):
        return line[:-2]
    return line[:-1] if line.endswith("\n") else line


def newline_of(text: str) -> str:
    return "\r\n" if text.count("\r\n") * 2 > text.count("\n") else "\n"


def adapt(text: str, newline: str) -> str:
    """``text`` with every line break written as ``newline``."""
    text = text.replace("\r\n", "\n")
    return text.replace("\n", newline) if newline != "\n" else text


def count(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def excerpt(lines: list[str], first: int, last: int) -> tuple[str, int]:
    """Lines ``first``..``last`` (1-based) numbered as ``  12\\tcode``, stopping early once
    about VIEW_CHARS are shown. Returns the text and the last line shown."""
    width = max(4, len(str(last)))
    out: list[str] = []
    size = 0
    for number in range(first, last + 1):
        text = body(lines[number - 1])
        if len(text) > LINE_CHARS:
            text = f"{text[:LINE_CHARS]} … [{len(text) - LINE_CHARS} more characters]"
        size += len(text) + width + 2
        if out and size > VIEW_CHARS:
            return "\n".join(out), number - 1
        out.append(f"{number:>{width}}\t{text}")
    return "\n".join(out), last


def region(path: str, lines: list[str], first: int, last: int) -> str:
    """The edited lines ``first``..``last`` with CONTEXT lines around them."""
    if not lines:
        return f"{path} is now empty"
    lo = max(1, first - CONTEXT)
    hi = min(len(lines), max(last, first) + CONTEXT)
    text, shown = excerpt(lines, lo, hi)
    more = f"\n[clipped: view({path!r}, start={shown + 1}) shows the rest]" if shown < hi else ""
    return f"{path} lines {lo}-{shown} of {len(lines)} now read:\n{text}{more}"


def view(path: str, start: int = 1, end: int | None = None) -> str:
    """Lines ``start``..``end`` of a text file (1-based, inclusive; ``end`` defaults to the
    last line), numbered, under a header naming the path and its line count. A view is clipped
    at about 12,000 characters; its last line then says where to continue."""
    text = read_text(path)
    lines = split_lines(text)
    total = len(lines)
    if total == 0:
        return f"{path}: empty file (0 lines)"
    if not 1 <= start <= total:
        raise ToolError(f"start {start} is outside {path}, which has lines 1-{total}")
    last = total if end is None else min(end, total)
    if last < start:
        raise ToolError(f"end {end} is before start {start}")
    shown_text, shown = excerpt(lines, start, last)
    crlf = ", CRLF line endings" if newline_of(text) == "\r\n" else ""
    span = "" if (start, shown) == (1, total) else f", showing {start}-{shown}"
    parts = [f"{path} ({total} lines{crlf}{span}):", shown_text]
    if shown < last:
        parts.append(
            f"[clipped: lines {shown + 1}-{last} not shown; continue with "
            f"start={shown + 1} (--start {shown + 1})]"
        )
    elif shown == total and not lines[-1].endswith("\n"):
        parts.append("[no newline at end of file]")
    return "\n".join(parts)


def not_found(path: str, text: str, old: str) -> str:
    """Why ``old`` is not in ``text``, and where it would match if only whitespace differed."""
    want = [line.strip() for line in old.strip("\r\n").split("\n")]
    have = [body(line).strip() for line in split_lines(text)]
    hits = [
        i + 1
        for i in range(len(have) - len(want) + 1)
        if have[i] == want[0] and have[i : i + len(want)] == want
    ]
    if hits:
        where = ", ".join(map(str, hits[:10]))
        return (
            f"old text not found in {path}, but it matches at line {where} if indentation "
            f"and spaces are ignored: copy the exact text from view({path!r}, "
            f"start={hits[0]})"
        )
    return (
        f"old text not found in {path}: copy it exactly (whitespace and line breaks "
        f"included) from view({path!r}), or use grep to find it"
    )


def replace(path: str, old: str, new: str) -> str:
    """Replace the one occurrence of ``old`` in ``path`` with ``new``; return the edited
    region with line numbers. ``old`` must occur exactly once: none or several raise
    ToolError (several: naming their lines, so you can add context to make it unique)."""
    if not old:
        raise ToolError("old text is empty: to add text use insert or create")
    text = read_text(path)
    newline = newline_of(text)
    old, new = adapt(old, newline), adapt(new, newline)
    starts = []
    at = text.find(old)
    while at >= 0:
        starts.append(at)
        at = text.find(old, at + 1)  # overlapping ones too: "aa" is ambiguous in "aaa"
    if not starts:
        raise ToolError(not_found(path, text, old))
    if len(starts) > 1:
        numbers = sorted({line_of(text, s) for s in starts})
        where = ", ".join(map(str, numbers[:20])) + (", …" if len(numbers) > 20 else "")
        raise ToolError(
            f"old text occurs {len(starts)} times in {path} (at line {where}); "
            "include more surrounding lines so that it occurs once"
        )
    if old == new:
        raise ToolError("old and new text are the same: nothing to change")
    at = starts[0]
    edited = text[:at] + new + text[at + len(old) :]
    write_text(path, edited)
    first = line_of(text, at)
    before, after = len(split_lines(old)), len(split_lines(new))
    span = f"line {first}" if before == 1 else f"lines {first}-{first + before - 1}"
    summary = f"replaced {span} of {path} ({before} → {after} lines)"
    return f"{summary}\n{region(path, split_lines(edited), first, first + after - 1)}"


def insert(path: str, line: int, text: str) -> str:
    """Insert ``text`` after line ``line`` of ``path`` (0: before the first line; the line
    count: at the end) and return the region with line numbers."""
    if not text:
        raise ToolError("text is empty: nothing to insert")
    content = read_text(path)
    lines = split_lines(content)
    if not 0 <= line <= len(lines):
        raise ToolError(
            f"line {line} is outside {path}: use 0 (the top) to {len(lines)} (after the last line)"
        )
    newline = newline_of(content)
    added = split_lines(adapt(text, newline))
    if not added[-1].endswith("\n"):
        added[-1] += newline
    if line == len(lines) and lines and not lines[-1].endswith("\n"):
        lines[-1] += newline  # the file had no final newline: it still has none afterwards
        added[-1] = body(added[-1])
    lines[line:line] = added
    write_text(path, "".join(lines))
    return (
        f"inserted {count(len(added))} after line {line} of {path}\n"
        f"{region(path, lines, line + 1, line + len(added))}"
    )


def create(path: str, text: str, overwrite: bool = False) -> str:
    """Create ``path`` (and its missing folders) holding ``text``. An existing file is an
    error unless ``overwrite``; when overwritten, it keeps its line endings and mode."""
    if os.path.isdir(path):
        raise ToolError(f"{path} is a directory")
    if os.path.lexists(path):
        if not overwrite:
            raise ToolError(
                f"{path} already exists: edit it with replace, insert or "
                "apply_diff, or pass overwrite=True (--overwrite) to replace it"
            )
        text = adapt(text, newline_of(read_bytes(path).decode("utf-8", "replace")))
        verb = "overwrote"
    else:
        verb = "created"
    write_text(path, text)
    return f"{verb} {path} ({count(len(split_lines(text)))})"
