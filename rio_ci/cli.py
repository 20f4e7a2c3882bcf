"""``rio-ci``: the command line. JSON on stdout; exit 0 ok · 1 failed/ended · 2 usage ·
3 rejected · 4 storage or ownership.

One error path: every failure a user can cause ends as one line ``{"error": reason}`` on
stdout with a documented exit status. Input JSON is strict (no NaN or Infinity), numbers are
bounded, text arguments must be UTF-8, and stdout is always valid UTF-8 strict JSON."""

from __future__ import annotations

if __name__ == "__main__":  # `python -m rio_ci`: not an entry (rio-ci's is `-m rio_ci`)
    import sys

    sys.stdout.write(
        '{"error": "usage: run python -m rio_ci (the rio-ci command), not rio_ci.cli"}\n'
    )
    raise SystemExit(2)

import argparse
import math
import os
import re
import shlex
import sys
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

import rio_ci
from rio_ci.commands.human import add_output_flags, render
from rio_ci.core.admission import Receipt, Rejection
from rio_ci.core.errors import Rejected, RioError, UsageError
from rio_ci.core.json_value import MAX_SEQ, is_text_safe
from rio_ci.core.limits import DEFAULTS, Limits
from rio_ci.model import providers
from rio_ci.run.confinement.settings import ConfinementSettings
from rio_ci.run.confinement.sudo import arrive
from rio_ci.run.confinement.user import become_root
from rio_ci.run.environment import scrub_own_environment, session_secret_names, session_tree
from rio_ci.session.session import Session
from rio_ci.session.settings import Network, Settings
from rio_ci.untrusted import jsonio, programs

MAX_SECONDS = 10**9  # about 31 years: any longer "timeout" means forever, which is no timeout
MAX_INPUT_BYTES = 64 * 2**20  # a PATCH larger than this cannot fit any context budget
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Arguments that name files may hold any bytes Linux allows; every other one is text.
_PATH_ARGS = frozenset({"db", "patch"})


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        _emit({"error": f"usage: {message}"})
        sys.stderr.write(jsonio.printable(self.format_usage()))
        raise SystemExit(2)


def _emit(value: Any) -> None:
    if not jsonio.emit(value):
        raise RioError(
            "the Session holds a number that is not JSON (NaN or Infinity), "
            "so it cannot be printed as JSON"
        )


def _out(args: argparse.Namespace, value: Any) -> None:
    """Print a command's result: one line of JSON, or readable lines with ``--human``.
    Errors never come here: they stay one JSON line whatever the flags."""
    if args.human:
        jsonio.write_stdout(render(value) + "\n")
    else:
        _emit(value)


def _read_json(text: str | bytes, what: str) -> Any:
    try:
        return jsonio.loads(text, what)
    except jsonio.NotJSON as exc:
        raise UsageError(str(exc)) from None


# --- argument types: bounded, finite ----------------------------------------------------


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{text!r}: seconds must be a finite number from 0 to {MAX_SECONDS}"
        )
    return value


def _bounded_int(low: int, high: int, what: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r}: {what} must be from {low} to {high}")
        return value

    parse.__name__ = what
    return parse


def _check_text(args: argparse.Namespace) -> None:
    """Every text argument must be UTF-8 (Python hands undecodable bytes over as lone
    surrogates): it may be stored, echoed in JSON, or sent to a model."""
    for name, value in vars(args).items():
        for item in value if isinstance(value, list) else [value]:
            if name not in _PATH_ARGS and isinstance(item, str) and not is_text_safe(item):
                raise UsageError(
                    f"argument {name}: '{jsonio.printable(item)}' is not valid UTF-8 text"
                )


# --- plumbing ---------------------------------------------------------------------------


def cmd_new(args: argparse.Namespace) -> int:
    try:
        limits = Limits().with_assignments(args.limit)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    validators = [tuple(_validator(text)) for text in args.validator]
    for flag, names in (("--pass-env", args.pass_env), ("--secret", args.secret)):
        for name in names:
            if not _NAME.fullmatch(name):
                raise UsageError(f"{flag} {name!r} is not an environment variable name")
    if args.cwd is not None and not Path(args.cwd).is_dir():
        raise UsageError(f"--cwd {args.cwd}: not a directory")
    try:
        network = Network.asked(args.network, args.allow_host)
    except UsageError as exc:  # nothing is created
        raise UsageError(f"--network/--allow-host: {exc}") from None
    try:
        session = Session.create(
            args.db,
            args.goal,
            Settings(
                cwd=args.cwd,
                validators=tuple(validators),
                limits=limits,
                pass_env=tuple(args.pass_env),
                secrets=tuple(args.secret),
                network=network,
            ),
        )
    except FileExistsError as exc:
        raise RioError(str(exc)) from None
    except ValueError as exc:  # a Session that could never work: nothing is created
        raise UsageError(f"--goal/--limit: {exc}") from None
    _out(args, {"session": session.proj.session["id"], "db": str(session.path)})
    return 0


def _validator(text: str) -> list[str]:
    """``--validator TEXT`` split as a shell would split it (it never runs through one)."""
    try:
        argv = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"--validator {text!r}: {exc}") from None
    if not argv:
        raise UsageError("--validator needs a command")
    return argv


def cmd_turn(args: argparse.Namespace) -> int:
    _out(args, Session.open(args.db).prepare_turn())
    return 0


def cmd_step(args: argparse.Namespace) -> int:
    patch = _read_json(_read_input(args.patch), "PATCH")
    result: Receipt | Rejection | Rejected
    try:
        result = Session.open(args.db).step(args.turn_id, patch)
    except Rejected as exc:  # an unknown or closed Turn: refused like a bad patch, not recorded
        result = exc
    # One idea, two forms (a value, an exception): the failure line, JSON like an error,
    # even --human.
    if isinstance(result, Rejection | Rejected):
        _emit({"rejected": result.reason})
        return 3
    _out(args, result.to_dict())
    return 0


def _read_input(path: str) -> bytes:
    """A file's bytes, or stdin's for ``-``; at most MAX_INPUT_BYTES (``/dev/zero`` ends)."""
    try:
        if path == "-":
            data: bytes = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
        else:
            with open(path, "rb") as stream:
                data = stream.read(MAX_INPUT_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > MAX_INPUT_BYTES:
        raise UsageError(f"{path} is larger than {MAX_INPUT_BYTES} bytes")
    return data


def cmd_receive(args: argparse.Namespace) -> int:
    payload = _read_json(args.payload, "PAYLOAD_JSON")
    ack = Session.open(args.db).receive(args.id, args.kind, payload)
    _out(args, {"id": ack["id"], "seq": ack["seq"]})
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    _out(args, Session.open(args.db).state())
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    session = Session.open(args.db)
    for n, event in enumerate(session.events(after=args.after)):
        if args.human and n:
            jsonio.write_stdout("\n")  # a blank line between events
        _out(args, event)
    return 0


def cmd_output(args: argparse.Namespace) -> int:
    from rio_ci.commands.show import no_output

    session = Session.open(args.db)
    text = session.output(args.cell, args.stream)
    if text is None:
        raise RioError(no_output(session, args.cell, args.db))
    if args.human:
        jsonio.write_stdout(text)
    else:
        _emit({"cell_id": args.cell, "stream": args.stream, "text": text})
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from rio_ci.commands.show import render_text, summary

    session = Session.open(args.db)
    if args.json:
        _emit(summary(session))
    else:
        jsonio.write_stdout(render_text(session) + "\n")
    return 0


# --- owner, harness, product ------------------------------------------------------------


def cmd_work(args: argparse.Namespace) -> int:
    from rio_ci.commands.run import work_command

    return work_command(
        args.db, timeout=args.timeout, confinement=args.confinement, emit=partial(_out, args)
    )


def cmd_run(args: argparse.Namespace) -> int:
    from rio_ci.commands.run import run_command

    return run_command(
        args.db,
        args.model,
        deadline=args.deadline,
        price=args.price,
        effort=args.effort,
        confinement=args.confinement,
        emit=partial(_out, args),
        fallback=args.fallback_model,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from rio_ci.commands.demo import demo_command

    return demo_command(args.dir, human=args.human, emit=_emit)


def cmd_bench(args: argparse.Namespace) -> int:
    from rio_ci.commands.bench import bench_command

    return bench_command(
        as_json=args.json,
        quick=args.quick,
        directory=args.dir,
        emit=_emit,
        chart_path=args.chart,
        before=args.before,
        cell_user=args.confinement.cell_user,
    )


def cmd_eval(args: argparse.Namespace) -> int:
    from rio_ci.commands.eval import eval_command

    return eval_command(
        args.cases,
        spec=args.model,
        trials=args.trials,
        crash=args.crash,
        out=args.out,
        as_json=args.json,
        timeout=args.timeout,
        emit=_emit,
        price=args.price,
        effort=args.effort,
        fallback=args.fallback_model,
        keep=args.keep,
    )


def cmd_action(args: argparse.Namespace) -> int:
    from rio_ci.github.action import action_command

    return action_command(args.phase, emit=partial(_out, args))


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str]] = {
    "new": (cmd_new, "create a Session"),
    "turn": (cmd_turn, "prepare (or return the open) Turn"),
    "step": (cmd_step, "submit a patch for a Turn"),
    "receive": (cmd_receive, "commit an Inbox message"),
    "work": (cmd_work, "become the Owner: recover, then run what is runnable"),
    "run": (cmd_run, "the harness: work and model rounds until the run ends or waits"),
    "state": (cmd_state, "the State a new Turn would see now"),
    "events": (cmd_events, "committed events, one JSON object per line"),
    "show": (cmd_show, "a readable summary of a Session"),
    "output": (cmd_output, "the full retained output of one Cell"),
    "demo": (cmd_demo, "the offline end-to-end demonstration"),
    "bench": (cmd_bench, "measure the performance figures"),
    "eval": (cmd_eval, "measure how well a model fixes the evaluation cases, and recovers"),
    "action": (cmd_action, "the GitHub Actions entry points"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="rio-ci",
        description=(
            "A durable autonomous coding agent: one SQLite Session, one step tool. "
            "Every command prints JSON, or readable text with --human (show prints text "
            "unless --json); errors are one JSON line."
        ),
    )
    parser.add_argument("--version", action="version", version=f"rio-ci {rio_ci.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    specs: dict[str, argparse.ArgumentParser] = {
        name: sub.add_parser(name, help=text, description=text)
        for name, (_, text) in COMMANDS.items()
    }
    _new_options(specs["new"])
    _plumbing_options(specs)
    _run_options(specs)
    _bench_options(specs["bench"])
    _eval_options(specs["eval"])
    p = specs["action"]
    p.add_argument(
        "phase",
        nargs="?",
        choices=["run", "finish", "prune", "sweep", "check"],
        default="run",
        help="run (default): restore and run rounds; finish: persist and report; prune "
        "(after the upload): delete superseded generations; sweep: resume Sessions with a "
        "due Timer; check: check this repository's set-up",
    )
    add_output_flags(specs)
    return parser


def _new_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("db", help="the Session file to create")
    p.add_argument("--goal", required=True, help="what the run should achieve")
    p.add_argument("--cwd", help="the working directory of Executions (default: here)")
    for flag, metavar, text in (
        (
            "--validator",
            "CMD",
            "a command (split like a shell, never run through one) that must pass before success",
        ),
        ("--limit", "NAME=VALUE", f"set a limit ({', '.join(DEFAULTS)})"),
        (
            "--pass-env",
            "NAME",
            "let Executions see this environment variable even though "
            "its name looks like a credential (e.g. NPM_TOKEN)",
        ),
        (
            "--secret",
            "NAME",
            "treat this environment variable as a credential although its "
            "name does not look like one: withheld from Executions (unless also --pass-env) "
            "and its value replaced by *** in captured output",
        ),
    ):
        p.add_argument(
            flag, action="append", default=[], metavar=metavar, help=f"{text}; repeatable"
        )
    p.add_argument(
        "--network",
        default="open",
        metavar="allowlist|open|none",
        help="where Cells may connect, through the egress proxy (docs/network.md): allowlist "
        "(the default list and --allow-host), open (every host, recorded; the default) or "
        "none; fixed for the Session's life",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="PATTERN",
        help="a host Cells may reach: name, *.domain or an IP address, each with an optional "
        ":port (added to the default list under --network allowlist); repeatable",
    )


def _plumbing_options(specs: dict[str, argparse.ArgumentParser]) -> None:
    """turn, step, receive, work, state, events, output, show, demo: a Session and little else."""
    specs["turn"].add_argument("db")
    p = specs["step"]
    p.epilog = (
        "What a patch may contain (the four operations, Cells, Controls), with patches to "
        "copy: docs/patches.md"
    )
    p.add_argument("db")
    p.add_argument("turn_id")
    p.add_argument("patch", help='a file or - (stdin): {"patch": [...]} or a bare list')
    p = specs["receive"]
    p.add_argument("db")
    p.add_argument(
        "id", help="message id (ids starting execution:, control:, timer:, idle: are reserved)"
    )
    p.add_argument("kind", help="message kind, e.g. comment or check")
    p.add_argument("payload", help="the payload as JSON")
    p = specs["work"]
    p.add_argument("db")
    p.add_argument("--timeout", type=_seconds, help="stop after S seconds")
    specs["state"].add_argument("db")
    p = specs["events"]
    p.add_argument("db")
    p.add_argument(
        "--after",
        type=_bounded_int(0, MAX_SEQ, "--after"),
        default=0,
        help="only events with seq > N",
    )
    p = specs["output"]
    p.add_argument("db")
    p.add_argument("cell", type=_bounded_int(0, MAX_SEQ, "CELL"), help="the Cell id")
    p.add_argument(
        "--stream",
        choices=["stdout", "stderr"],
        default="stdout",
        help="which stream (default stdout)",
    )
    specs["show"].add_argument("db")
    specs["demo"].add_argument(
        "dir", nargs="?", help="a new directory for the demo (default: a fresh one)"
    )


def _efforts() -> str:
    """The ``--effort`` levels the providers' models take, for the help."""
    levels = [f"{level} (default)" if level == "high" else level for level in providers.efforts()]
    return ", ".join(levels[:-1]) + " or " + levels[-1]


def _run_options(specs: dict[str, argparse.ArgumentParser]) -> None:
    """run's own options, and those work, bench and eval share with it."""
    p = specs["run"]
    p.add_argument("db")
    p.add_argument(
        "--model",
        default=providers.DEFAULT_SPEC,
        help=f"{providers.spec_forms()} (a YAML list of patches); default: "
        f"{providers.DEFAULT_SPEC}, its provider's default model",
    )
    p.add_argument("--deadline", type=_seconds, help="stop after S seconds")
    for q in (specs["work"], p, specs["bench"]):
        q.add_argument(
            "--cell-user",
            dest="confinement",
            metavar="NAME|none",
            type=ConfinementSettings.asked,
            default=ConfinementSettings(),
            help="run every Cell as this unprivileged user (created when missing) where "
            "rio-ci is root or has passwordless sudo; none (default): as rio-ci's own user",
        )
    for q in (p, specs["eval"]):  # eval passes them on to each run
        q.add_argument(
            "--price",
            metavar="IN/OUT",
            help="USD per million input / output "
            "tokens, for a model without a known price (stored in the Session)",
        )
        q.add_argument(
            "--effort",
            default=providers.DEFAULT_EFFORT,
            help=f"how hard the model thinks: {_efforts()}, where the model offers it "
            f"(default: {providers.DEFAULT_EFFORT})",
        )
        q.add_argument(
            "--fallback-model",
            metavar="MODEL",
            help="the model asked instead after a refusal, for the rest of that Turn (a spec "
            "as for --model, or a model id on the same provider)",
        )


def _bench_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="fewer samples (for CI)")
    p.add_argument("--dir", help="where to measure (default: a folder under the current one)")
    p.add_argument("--chart", metavar="SVG", help="also draw Session size against rounds")
    p.add_argument(
        "--before",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="a line of the chart for the rio_ci source tree in DIR (repeatable)",
    )


def _eval_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "cases",
        nargs="+",
        metavar="CASE_DIR",
        help="a case directory (with case.yml), or a directory of them",
    )
    p.add_argument(
        "--model",
        required=True,
        help="a model spec as for run; scripted:oracle runs each case's own oracle",
    )
    p.add_argument(
        "--trials",
        type=_bounded_int(1, 10_000, "--trials"),
        default=1,
        help="trials per case (default 1)",
    )
    p.add_argument(
        "--crash",
        action="store_true",
        help="SIGKILL the Owner once per trial while a round-2+ Cell runs, then resume",
    )
    p.add_argument(
        "--out",
        default="rio-eval",
        help="where report.json, report.md, report.svg, Sessions and logs go (default: ./rio-eval)",
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=1800.0,
        help="seconds per trial, all runs included (default 1800)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep each trial's working copy (a git repository) in OUT/repos/MODE/CASE-N",
    )


OWNER_COMMANDS = frozenset({"work", "run", "action"})


def _working_trees(args: argparse.Namespace) -> list[str]:
    """The working tree an Owner command's Cells write: no program in it ever runs as the
    harness's (rio_ci.untrusted.programs), whatever ``PATH`` says."""
    if args.command == "action":
        from rio_ci.github.contract import checkout_of

        tree = checkout_of(os.environ)
    else:
        tree = session_tree(args.db)
    return [tree] if tree else []


def main(argv: list[str] | None = None) -> int:
    command = None
    try:
        args = build_parser().parse_args(argv)
        command = args.command
        _check_text(args)
        if command in OWNER_COMMANDS:
            _start_owner(args, sys.argv[1:] if argv is None else argv)
        handler, _ = COMMANDS[command]
        return handler(args)
    except RioError as exc:
        line = re.sub(r"\s*\n\s*", " ", str(exc).strip())  # one line
        _annotate(command, line)
        _emit({"error": line})
        return exc.exit_code
    except KeyboardInterrupt:
        _emit({"error": "interrupted"})
        return 1
    except BrokenPipeError:  # stdout closed early (rio-ci events DB | head): nothing to say
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (the interpreter closes it)
        return 1
    except Exception as exc:  # a bug: still one JSON line, and the traceback for a report
        traceback.print_exc()
        line = (
            f"internal error ({type(exc).__name__}): {exc}; please report it "
            "with the traceback printed on stderr"
        )
        _annotate(command, line)
        _emit({"error": line})
        return 1


def _start_owner(args: argparse.Namespace, argv: list[str]) -> None:
    """What an Owner command does first: take over the environment a re-execution through
    sudo handed over (checking, for ``action``, the variables its contract requires), become
    root for a Cell user, move the credentials out of the initial environment."""
    needed: tuple[str, ...] = ()
    if args.command == "action":
        from rio_ci.github.contract import REQUIRED

        needed = REQUIRED
    arrive(needed)
    programs.settle(*_working_trees(args))  # before the first program it runs: sudo
    asked = (
        ConfinementSettings.asked(os.environ.get("RIO_CELL_USER"))
        if args.command == "action"
        else args.confinement
    )
    become_root(asked, argv)
    names = session_secret_names(args.db) if getattr(args, "db", None) else []
    scrub_own_environment(argv, names)


def _annotate(command: str | None, line: str) -> None:
    """``rio-ci action``'s error is also an error annotation on the workflow run."""
    if command == "action":
        from rio_ci.github.contract import log_error

        log_error(line)
