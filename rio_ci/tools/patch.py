"""``apply_diff``: apply a unified diff (``git diff``, ``diff -u``) all-or-nothing.

Every change is computed in memory first; files are written only when every hunk of every
file applied. A hunk is placed where its context and removed lines match, nearest to the line
its header names (an offset when earlier edits moved it); failing that, with trailing
whitespace ignored, then with one or two outer context lines dropped (fuzz). Hunk line counts
are trusted when they fit and otherwise recounted, so a hand-written diff with wrong counts or
a missing "@@" range still applies. Added lines get the file's line endings.
"""

from __future__ import annotations

import codecs
import os
import re
from dataclasses import dataclass, field

from rio_ci.tools.files import (
    ToolError,
    body,
    check_mode,
    confined,
    newline_of,
    read_text,
    split_lines,
    write_text,
)

HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
SHOWN = 20  # lines of a failed hunk (and of the file) quoted in the error


@dataclass
class Hunk:
    header: str
    origin: int | None  # 0-based line where its old lines begin; None: no range in the header
    lines: list[tuple[str, str, bool]] = field(default_factory=list)  # tag " -+", text, eol

    def side(self, skip: str) -> list[str]:
        return [text for tag, text, _ in self.lines if tag != skip]


@dataclass
class FilePatch:
    old: str | None = None  # None: /dev/null, the file is created
    new: str | None = None  # None: /dev/null, the file is deleted
    hunks: list[Hunk] = field(default_factory=list)
    mode: int | None = None
    git: bool = False
    has_paths: bool = False  # seen its ---/+++ lines


def unquote(path: str) -> str:
    """A path as git writes it: C-quoted when it holds unusual bytes."""
    if len(path) > 1 and path.startswith('"') and path.endswith('"'):
        raw = codecs.escape_decode(path[1:-1].encode("utf-8"))[0]
        return bytes(raw).decode("utf-8", "replace")
    return path


def header_path(text: str) -> str | None:
    path = unquote(text.split("\t")[0].rstrip())
    return None if path == "/dev/null" else path


def git_paths(rest: str) -> tuple[str, str]:
    """The two paths of ``diff --git a/X b/X`` (X may hold spaces: the halves are equal)."""
    if rest.startswith('"'):
        end = rest.index('"', 1) + 1 if '"' in rest[1:] else len(rest)
        return unquote(rest[:end]), unquote(rest[end:].strip())
    for at in [m.start() for m in re.finditer(" ", rest)]:
        if rest[:at].split("/", 1)[-1] == rest[at + 1 :].split("/", 1)[-1]:
            return rest[:at], rest[at + 1 :]
    old, _, new = rest.partition(" ")
    return old, new


def parse_diff(text: str) -> list[FilePatch]:
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    patches: list[FilePatch] = []
    cur: FilePatch | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            cur = FilePatch(*git_paths(line[len("diff --git ") :]), git=True)
            patches.append(cur)
        elif (
            cur is not None
            and cur.git
            and not cur.hunks
            and not cur.has_paths
            and (git_header(cur, line))
        ):
            pass
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            if cur is None or cur.hunks or cur.has_paths:
                cur = FilePatch()
                patches.append(cur)
            cur.old, cur.new = header_path(line[4:]), header_path(lines[i + 1][4:])
            cur.has_paths = True
            i += 1
        elif line.startswith("@@"):
            if cur is None:
                raise ToolError(
                    f"hunk {line!r} comes before any file header ('--- a/FILE' and '+++ b/FILE')"
                )
            i = parse_hunk(lines, i, cur)
            continue
        i += 1  # anything else (a commit message, "Only in ...") is not part of a change
    return patches


def git_header(cur: FilePatch, line: str) -> bool:
    """Take one extended header line of a git diff into ``cur``; False if it is none."""
    key = line.partition(" ")[0]
    if line.startswith(("new file mode ", "deleted file mode ")):
        if key == "new":
            cur.old, cur.mode = None, octal(line)
        else:
            cur.new = None
    elif line.startswith(("rename from ", "copy from ")):
        cur.old = "a/" + unquote(line.split(" ", 2)[2])
    elif line.startswith(("rename to ", "copy to ")):
        cur.new = "b/" + unquote(line.split(" ", 2)[2])
    elif line.startswith("new mode "):
        cur.mode = octal(line)
    elif line.startswith(("Binary files ", "GIT binary patch")):
        raise ToolError(f"binary diffs are not supported ({line.strip()})")
    else:
        return line.startswith(("index ", "old mode ", "similarity index ", "dissimilarity "))
    return True


def octal(line: str) -> int:
    """The mode at the end of a ``new mode`` / ``new file mode`` line."""
    digits = line.split()[-1]
    if not (len(digits) <= 7 and all(c in "01234567" for c in digits)):
        raise ToolError(f"{line.strip()!r}: the mode is not an octal number like 100644")
    return int(digits, 8)


def parse_hunk(lines: list[str], i: int, cur: FilePatch) -> int:
    """Read the hunk starting at ``lines[i]`` into ``cur``; return the index after it."""
    m = HUNK_HEADER.match(lines[i])
    want = (int(m[2] or 1), int(m[4] or 1)) if m else (0, 0)
    # "-5,0" (nothing removed) means "after line 5"; "-5,2" means "from line 5".
    hunk = Hunk(lines[i], (int(m[1]) - (want[0] > 0)) if m else None)
    seen = [0, 0]
    i += 1
    while i < len(lines):
        line = lines[i]
        short = seen[0] < want[0] or seen[1] < want[1]
        if line.startswith("\\"):  # "\ No newline at end of file": the line before has no eol
            if hunk.lines:
                hunk.lines[-1] = (*hunk.lines[-1][:2], False)
            i += 1
            continue
        if line[:1] not in ("", " ", "-", "+") or file_header(lines, i, "@@"):
            break
        if not short and not body_line(lines, i):
            break  # counts satisfied: only an unambiguous change line extends the hunk
        tag = line[:1] or " "  # an empty line is an empty context line whose space was lost
        hunk.lines.append((tag, line[1:], True))
        seen[0] += tag != "+"
        seen[1] += tag != "-"
        i += 1
    cur.hunks.append(hunk)
    return i


def body_line(lines: list[str], i: int) -> bool:
    """Whether ``lines[i]``, read past the hunk's declared counts, still belongs to it."""
    line = lines[i]
    if line == "":  # blank lines belong to the hunk only when more change lines follow
        j = i
        while j < len(lines) and lines[j] == "":
            j += 1
        return j < len(lines) and lines[j][:1] in (" ", "-", "+") and body_line(lines, j)
    if line == "-- " or file_header(lines, i):
        return False  # a mail signature, or the next file's header
    return line[:1] in (" ", "-", "+")


def file_header(lines: list[str], i: int, then: str = "") -> bool:
    """Whether a file header ("--- X" and "+++ Y") starts at ``i``, followed by a line that
    starts with ``then``: inside a hunk, "--- X" may as well be a removed "-- X"."""
    if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
        return False
    return not then or (i + 2 < len(lines) and lines[i + 2].startswith(then))


def locate(have: list[str], want: list[str], lo: int, expected: int) -> int | None:
    """The start of ``want`` in ``have[lo:]`` nearest to ``expected``."""
    last = len(have) - len(want)
    expected = min(max(expected, lo), max(last, lo))
    for distance in range(max(expected - lo, last - expected) + 1):
        for at in (expected - distance, expected + distance):
            if lo <= at <= last and have[at : at + len(want)] == want:
                return at
    return None


def apply_hunks(name: str, text: str, hunks: list[Hunk]) -> tuple[str, list[str]]:
    """``text`` with ``hunks`` applied, and notes on hunks placed with an offset or fuzz."""
    lines = split_lines(text)
    newline = newline_of(text)
    exact = [body(line) for line in lines]
    out: list[str] = []
    notes: list[str] = []
    pos = drift = 0
    for number, hunk in enumerate(hunks, 1):
        if hunk.origin is None and lines and not hunk.side("+"):
            raise ToolError(
                f"hunk {number} of {name} has no range and no context lines: "
                "add its '@@ -START,COUNT +START,COUNT @@' header"
            )
        expected = pos if hunk.origin is None else hunk.origin + drift
        placed = place(hunk, exact, pos, expected)
        if placed is None:
            raise ToolError(mismatch(name, number, hunk, exact, expected))
        at, front, entries, how = placed
        # Like patch(1), the offset is counted from the line the header names.
        offset = 0 if hunk.origin is None else at - front - hunk.origin
        if hunk.origin is not None:
            drift = offset
        if offset or how:
            notes.append(
                f"  hunk {number} of {name} applied at line {at + 1}"
                f"{f' (offset {offset:+d})' if offset else ''}{how}"
            )
        out += lines[pos:at]
        for tag, content, eol in entries:
            if tag == " ":
                out.append(lines[at])
            elif tag == "+":
                out.append(content + newline if eol else content)
            at += tag != "+"
        pos = at
    out += lines[pos:]
    for k, line in enumerate(out[:-1]):  # a line added after a last line that had no eol
        if not line.endswith("\n"):
            out[k] = line + newline
    return "".join(out), notes


def place(
    hunk: Hunk, exact: list[str], lo: int, expected: int
) -> tuple[int, int, list[tuple[str, str, bool]], str] | None:
    """Where the hunk applies: the line, how many leading context lines fuzz dropped, the
    entries applied there, and how it matched ("" when exactly)."""
    entries = hunk.lines
    lead = next((k for k, e in enumerate(entries) if e[0] != " "), len(entries))
    trail = next((k for k, e in enumerate(reversed(entries)) if e[0] != " "), len(entries))
    loose = [text.rstrip() for text in exact]
    for fuzz in range(3):
        front, back = min(fuzz, lead), min(fuzz, trail)
        part = entries[front : len(entries) - back]
        want = [text for tag, text, _ in part if tag != "+"]
        if fuzz and (front + back < fuzz or not want):
            continue  # nothing more to drop, or nothing left to anchor the hunk
        for have, key, how in (
            (exact, want, ""),
            (loose, [t.rstrip() for t in want], " ignoring trailing whitespace"),
        ):
            at = locate(have, key, lo, expected + front)
            if at is not None:
                return at, front, part, how + (f" with fuzz {fuzz}" if fuzz else "")
    return None


def mismatch(name: str, number: int, hunk: Hunk, exact: list[str], expected: int) -> str:
    want = hunk.side("+")
    quoted = "\n".join(f"  | {text}" for text in want[:SHOWN])
    more = f"\n  … {len(want) - SHOWN} more" if len(want) > SHOWN else ""
    message = (
        f"hunk {number} of {name} ({hunk.header}) does not match the file, so nothing "
        f"was written. Expected these lines near line {expected + 1}:\n{quoted}{more}"
    )
    if want and exact:
        stripped = [text.strip() for text in want]
        scores = [
            sum(
                exact[at + k].strip() == stripped[k] for k in range(min(len(want), len(exact) - at))
            )
            for at in range(max(len(exact) - len(want), 0) + 1)
        ]
        best = max(range(len(scores)), key=lambda at: (scores[at], -abs(at - expected)))
        if scores[best]:
            found = "\n".join(f"  | {text}" for text in exact[best : best + len(want)][:SHOWN])
            message += f"\nThe closest lines in {name} start at line {best + 1}:\n{found}"
    return message


def target(patch: FilePatch, exists: dict[str, bool]) -> tuple[str | None, str | None]:
    """The path to read and the path to write: git's a/ b/ prefixes dropped. A plain
    ``diff -u`` changes one file in place: of its two names (or, failing that, the names
    without their top folder, as ``diff -ru A B`` writes them) the existing one with the
    fewest folders, then the shortest name (``f.py`` over ``f.py.orig``), as GNU patch picks."""
    old, new = patch.old, patch.new
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")):
        return (old and old[2:]), (new and new[2:])
    if patch.git or old is None or new is None:
        return old, new
    for names in ([old, new], [old.split("/", 1)[-1], new.split("/", 1)[-1]]):
        found = [p for p in names if exists.get(p, os.path.lexists(p))]
        if found:
            path = min(found, key=lambda p: (p.count("/"), len(os.path.basename(p)), len(p)))
            return path, path
    return new, new


def apply_diff(diff: str) -> str:
    """Apply a unified diff to the files under the current directory, all or nothing:
    several files, new files (``--- /dev/null``), deleted files (``+++ /dev/null``),
    renames, hunks that moved (offset) or whose outer context changed (fuzz). Returns a
    summary of the files changed; a hunk that cannot be placed raises ToolError naming the
    file, the hunk and the lines it expected, and nothing is written."""
    patches = parse_diff(diff)
    if not patches:
        raise ToolError(
            "no file changes in the diff: expected '--- a/FILE', '+++ b/FILE' and "
            "'@@ -START,COUNT +START,COUNT @@' hunks"
        )
    pending: dict[str, str | None] = {}  # path -> new content, None: deleted
    modes: dict[str, int] = {}
    summary: list[str] = []
    notes: list[str] = []
    for patch in patches:
        exists = {path: text is not None for path, text in pending.items()}
        old, new = target(patch, exists)
        name = new or old or "?"
        # Refused before anything is read, so the reason is plain: the path written, and
        # the one a deletion or a rename removes.
        for path in {new, old if old != new else None} - {None}:
            confined(str(path))
        if old is None:
            if new is None:
                raise ToolError("a file diff names /dev/null on both sides")
            if exists.get(new, os.path.lexists(new)):
                raise ToolError(
                    f"the diff creates {new}, which already exists: edit it with "
                    "a diff against its current content"
                )
            before = ""
        else:
            before_text = pending[old] if old in pending else read_text(old)
            if before_text is None:
                raise ToolError(f"no such file: {old} (an earlier part of the diff deleted it)")
            before = before_text
        after, placed = apply_hunks(name, before, patch.hunks)
        notes += placed
        added = sum(tag == "+" for h in patch.hunks for tag, _, _ in h.lines)
        removed = sum(tag == "-" for h in patch.hunks for tag, _, _ in h.lines)
        if new is None:
            if after.strip() or (before.strip() and not patch.hunks):
                raise ToolError(
                    f"the diff deletes {old} but does not remove all of its lines; "
                    "diff it against its current content"
                )
            pending[str(old)] = None
            summary.append(f"  D {old} (-{removed})")
            continue
        if old is not None and old != new:
            if exists.get(new, os.path.lexists(new)):
                raise ToolError(f"the diff renames {old} to {new}, which already exists")
            pending[old] = None
        pending[new] = after
        if patch.mode is not None:
            modes[new] = check_mode(new, patch.mode)
        kind = "A" if old is None else "M" if old == new else f"R {old} ->"
        summary.append(f"  {kind} {new} (+{added} -{removed})")
    for path in pending:  # every path checked before anything is written
        confined(path)
    for path, text in pending.items():
        if text is None:
            if os.path.lexists(path):
                os.remove(path)
        else:
            write_text(path, text, modes.get(path))
    return "\n".join([f"applied the diff to {len(summary)} file(s):", *summary, *notes])
