"""``rio-ci``'s entry, for the ``rio-ci`` command (which runs ``python -I -m rio_ci``) and for
``python -m rio_ci.cli``: what a process does before it imports the command line.

An Owner command (``work``, ``run``, ``action``) holding a credential in its environment
re-executes itself without it (rio_ci.run.environment). Whatever the first process imported
is thrown away with it, and the command line's imports (argparse, the Session, the Journal …)
are about 50 ms of CPU, paid again by the process that does the work (docs/performance.md). So
this module tells from ``sys.argv`` and the environment alone whether such a command can
re-execute at once, reads its Session's ``--secret`` names at rest, and has it re-execute
before any of those imports. What it cannot tell that cheaply (an option it does not know, a
Cell user that may need sudo first, a Session with a WAL beside it, a path that is not a
Session) it leaves to the command line, which re-executes after its own checks or reports the
error, as before; the re-executed process checks its initial environment again either way.

Then the SDK import starts in a thread for a run (rio_ci.sdk_preload), ahead of the command
line's own imports, and the command line runs. Before that, only the standard library's
lightest modules, the environment module (which keeps its own imports as light) and, for a
Session's names, ``rio_ci.store.at_rest`` (``sqlite3`` alone) are imported.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from rio_ci.core.credentials import SECRET_NAME
from rio_ci.run.environment import scrub_before_imports
from rio_ci.store.at_rest import session_secret_names_at_rest

__all__ = [
    "OWNER_OPTIONS",
    "early_secret_names",
    "main",
    "owner_sessions",
]

# The options of the Owner commands that take a value, as rio_ci.cli's parser declares them
# (tests/test_entry.py keeps the two equal); ``--human`` is their one flag.
OWNER_OPTIONS: dict[str, frozenset[str]] = {
    "work": frozenset({"--timeout", "--cell-user"}),
    "run": frozenset(
        {"--model", "--deadline", "--cell-user", "--price", "--effort", "--fallback-model"}
    ),
    "action": frozenset(),
}
_FLAGS = frozenset({"--human"})
# rio_ci.run.confinement.user's NONE and SUDO_MARK, not imported: that module imports much more.
_NO_CELL_USER = ("", "none")
_SUDO_MARK = "RIO_AS_ROOT"


def main() -> int:
    """Run ``rio-ci`` with ``sys.argv``: an Owner command holding a credential re-executes
    without it first where that can be decided here, then the command line runs."""
    argv = sys.argv[1:]
    extra = early_secret_names(argv, os.environ)
    if extra is not None:
        scrub_before_imports(argv, extra)  # does not return when it re-executes
    import rio_ci.sdk_preload  # noqa: F401  (starts the SDK import for a run)
    from rio_ci import cli

    return cli.main()


def early_secret_names(argv: list[str], environ: Mapping[str, str]) -> list[str] | None:
    """The ``--secret`` names the Owner command ``argv`` (``sys.argv[1:]``) must move out of
    its initial environment too, when it may re-execute before the command line is imported
    (``owner_sessions``) and its Session's names can be read at rest; None otherwise."""
    sessions = owner_sessions(argv, environ)
    if sessions is None:
        return None
    names: list[str] = []
    for db in sessions:
        named = session_secret_names_at_rest(db)
        if named is None:
            return None
        names += named
    return names


def owner_sessions(argv: list[str], environ: Mapping[str, str]) -> list[str] | None:
    """The Session files (one for ``work`` and ``run``, none for ``action``) whose
    ``--secret`` names the Owner command ``argv`` must read before it re-executes without its
    credentials, when it can re-execute before the command line is imported. None when it
    cannot or need not: not an Owner command, no credential-named variable in ``environ``,
    already re-executed, a Cell user that rio_ci.run.confinement.user may first re-execute through
    sudo for (sudo closes the descriptor carrying the credentials), or arguments whose
    meaning only the command line's parser knows (``-h``, ``--``, an abbreviated or unknown
    option, a missing value, another number of positionals)."""
    if not argv or argv[0] not in OWNER_OPTIONS or not any(map(SECRET_NAME.search, environ)):
        return None
    if "RIO_SECRETS_FD" in environ or "RIO_SCRUBBED" in environ:
        return None
    command = argv[0]
    parsed = _plain_arguments(OWNER_OPTIONS[command], argv[1:])
    if parsed is None:
        return None
    positionals, options = parsed
    cell_user = environ.get("RIO_CELL_USER", "") if command == "action" else ""
    if _may_become_root(options.get("--cell-user", cell_user), environ):
        return None
    if command == "action":  # its one positional is the phase; it names no Session
        return [] if len(positionals) <= 1 else None
    return positionals if len(positionals) == 1 else None


def _plain_arguments(
    valued: frozenset[str], args: list[str]
) -> tuple[list[str], dict[str, str]] | None:
    """``args`` as the positionals and the (last) value of each option, or None unless every
    option is spelled out in full from ``valued`` (``--name VALUE`` or ``--name=VALUE``) or
    is ``--human``."""
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
    return positionals, options


def _may_become_root(cell_user: str, environ: Mapping[str, str]) -> bool:
    """Whether rio_ci.run.confinement.user.become_root may re-execute this command through sudo."""
    return (
        cell_user.strip() not in _NO_CELL_USER
        and sys.platform.startswith("linux")
        and os.geteuid() != 0
        and not environ.get(_SUDO_MARK)
    )
