"""``sys.argv`` read once, before anything else is imported: which command, and — for an Owner
command (``work``, ``run``, ``action``) whose arguments are plain — its positionals and the
value of each option.

Start-up decides two things from the command line: whether an Owner re-executes without its
credentials before the command line's imports (``early``), and whether the SDK import starts
in a thread (``preload``). Both read this one value. The command line's parser
(``rio_ci.cli``) reads ``argv`` again afterwards and judges it: what this reading cannot tell
— an abbreviated or unknown option, ``-h``, ``--``, a missing value — leaves ``positionals``
None, and start-up then decides nothing from the arguments.

A plain class rather than a frozen dataclass: ``dataclasses`` imports ``inspect``, which costs
more than all the rest of start-up, in a process that may be thrown away at once.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["OWNER_OPTIONS", "Invocation"]

# The options of the Owner commands that take a value, as rio_ci.cli's parser declares them
# (tests/start/test_start.py keeps the two equal); ``--human`` is their one flag.
OWNER_OPTIONS: dict[str, frozenset[str]] = {
    "work": frozenset({"--timeout", "--cell-user"}),
    "run": frozenset(
        {"--model", "--deadline", "--cell-user", "--price", "--effort", "--fallback-model"}
    ),
    "action": frozenset(),
}
_FLAGS = frozenset({"--human"})


class Invocation:
    """``argv`` (``sys.argv[1:]``) as start-up reads it. ``command`` is its first word ("" when
    there is none); ``positionals`` and ``options`` (the last value of each) are those of an
    Owner command whose every option is spelled out in full (``--name VALUE``,
    ``--name=VALUE``) or is ``--human``; ``positionals`` is None otherwise. Set once, when
    read."""

    __slots__ = ("argv", "command", "options", "positionals")

    def __init__(
        self,
        argv: list[str],
        positionals: tuple[str, ...] | None = None,
        options: Mapping[str, str] | None = None,
    ) -> None:
        self.argv = tuple(argv)
        self.command = argv[0] if argv else ""
        self.positionals = positionals
        self.options: Mapping[str, str] = options or {}

    @classmethod
    def read(cls, argv: list[str]) -> Invocation:
        """``argv`` read (see the class)."""
        valued = OWNER_OPTIONS.get(argv[0]) if argv else None
        parsed = None if valued is None else _plain_arguments(valued, argv[1:])
        if parsed is None:
            return cls(argv)
        return cls(argv, *parsed)

    def __repr__(self) -> str:
        return f"Invocation({list(self.argv)!r})"


def _plain_arguments(
    valued: frozenset[str], args: list[str]
) -> tuple[tuple[str, ...], dict[str, str]] | None:
    """``args`` as the positionals and the (last) value of each option, or None unless every
    option is spelled out in full from ``valued`` or is one of ``_FLAGS``."""
    positionals: list[str] = []
    options: dict[str, str] = {}
    rest = iter(args)
    for arg in rest:
        name, equals, value = arg.partition("=")
        if arg == "-" or not arg.startswith("-"):
            positionals.append(arg)
        elif name in _FLAGS and not equals:
            continue
        elif name not in valued:
            return None
        elif equals:
            options[name] = value
        else:
            following = next(rest, None)
            if following is None:
                return None
            options[name] = following
    return tuple(positionals), options
