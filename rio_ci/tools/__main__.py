"""``python -m rio_ci.tools COMMAND …``: the tools as a command, for ``cmd`` Cells.

Prints what the function returns and exits 0; a failure prints ``error: …`` on stderr (no
traceback) and exits 1. Multi-line text can be passed as one argument (argv elements may
hold newlines) or read from a file or stdin (``--old-file -``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from rio_ci.tools import ToolError, apply_diff, create, find, grep, insert, replace, view

TEXT_OPTIONS = ("--old", "--new", "--text", "--glob")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ToolError(f"{message} ({' '.join(self.format_usage().split())})")


def build_parser() -> Parser:
    parser = Parser(
        prog="python -m rio_ci.tools",
        allow_abbrev=False,
        description="Read and change files precisely (rio_ci.tools).",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    cmd = sub.add_parser("view", help="numbered lines of a file", allow_abbrev=False)
    cmd.add_argument("file")
    cmd.add_argument("--start", type=int, default=1, help="first line (default 1)")
    cmd.add_argument("--end", type=int, help="last line (default: the last)")
    cmd = sub.add_parser("replace", help="replace the one occurrence of a text", allow_abbrev=False)
    cmd.add_argument("file")
    text_option(cmd, "old")
    text_option(cmd, "new")
    cmd = sub.add_parser("insert", help="insert text after a line", allow_abbrev=False)
    cmd.add_argument("file")
    cmd.add_argument("--line", type=int, required=True, help="insert after it (0: the top)")
    text_option(cmd, "text")
    cmd = sub.add_parser("create", help="create a file", allow_abbrev=False)
    cmd.add_argument("file")
    text_option(cmd, "text")
    cmd.add_argument("--overwrite", action="store_true", help="replace an existing file")
    cmd = sub.add_parser("find", help="paths matching a glob", allow_abbrev=False)
    cmd.add_argument("pattern", help="'*.py' (names) or 'src/**/*.py' (paths)")
    cmd.add_argument("root", nargs="?", default=".")
    cmd = sub.add_parser("grep", help="lines matching a regular expression", allow_abbrev=False)
    cmd.add_argument("pattern")
    cmd.add_argument("paths", nargs="*", metavar="PATH")
    cmd.add_argument("--glob", help="only files whose name (or path) matches")
    cmd.add_argument("-i", "--ignore-case", action="store_true")
    cmd.add_argument("-F", "--fixed", action="store_true", help="PATTERN is plain text")
    cmd = sub.add_parser(
        "apply-diff", help="apply a unified diff, all or nothing", allow_abbrev=False
    )
    cmd.add_argument("patch", nargs="?", default="-", help="PATCHFILE, or - for stdin")
    return parser


def text_option(parser: argparse.ArgumentParser, name: str) -> None:
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(f"--{name}", metavar="TEXT")
    group.add_argument(f"--{name}-file", metavar="FILE", help="read it from FILE (- : stdin)")


def attach_values(argv: list[str]) -> list[str]:
    """``--old -x`` as ``--old=-x``: a text value may start with "-" (a removed line)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--":
            return out + argv[i:]
        if argv[i] in TEXT_OPTIONS and i + 1 < len(argv):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def read_source(source: str) -> str:
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
        return data.decode("utf-8")
    except OSError as exc:
        raise ToolError(f"cannot read {source}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ToolError(f"{'stdin' if source == '-' else source} is not UTF-8") from None


def text_of(args: argparse.Namespace, name: str) -> str:
    value: str | None = getattr(args, name)
    return value if value is not None else read_source(getattr(args, f"{name}_file"))


def run(args: argparse.Namespace) -> str:
    command = args.command
    if command == "view":
        return view(args.file, args.start, args.end)
    if command == "replace":
        if args.old_file == "-" and args.new_file == "-":
            raise ToolError("only one of --old-file and --new-file can read stdin")
        return replace(args.file, text_of(args, "old"), text_of(args, "new"))
    if command == "insert":
        return insert(args.file, args.line, text_of(args, "text"))
    if command == "create":
        return create(args.file, text_of(args, "text"), overwrite=args.overwrite)
    if command == "find":
        return find(args.pattern, args.root)
    if command == "grep":
        return grep(
            args.pattern,
            *args.paths,
            glob=args.glob,
            ignore_case=args.ignore_case,
            fixed=args.fixed,
        )
    return apply_diff(read_source(args.patch))


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        print(run(build_parser().parse_args(attach_values(sys.argv[1:] if argv is None else argv))))
    except (ToolError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
