"""What a rio-ci process does first, before the command line is imported
(``rio_ci/__main__.py``: ``begin``, then ``rio_ci.cli``).

An Owner command (``work``, ``run``, ``action``) holding a credential in its environment
re-executes itself without it (``handover``). Whatever the first process imported is thrown
away with it, and the command line's imports (argparse, the Session, the Journal …) are about
50 ms of CPU, paid again by the process that does the work (docs/performance.md). So ``begin``
tells from the command's ``Invocation`` and the environment alone whether such a command can
re-execute at once, reads its Session's ``--secret`` names at rest, and has it re-execute
before any of those imports. What it cannot tell that cheaply (an option it does not know, a
Cell user that may need sudo first, a Session with a WAL beside it, a path that is not a
Session) it leaves to the command line, which re-executes after its own checks or reports the
error; the re-executed process checks its initial environment again either way.

Then the SDK import starts in a thread for a run (``preload``), ahead of the command line's
own imports.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Mapping

from rio_ci.core.credentials import SECRET_NAME, secret_names
from rio_ci.core.errors import RioError
from rio_ci.start import preload
from rio_ci.start.handover import reexec_without
from rio_ci.start.invocation import Invocation
from rio_ci.store.at_rest import session_secret_names_at_rest

__all__ = ["begin", "early_secret_names", "owner_sessions"]

# rio_ci.run.confinement.settings' NONE and rio_ci.run.confinement.user's SUDO_MARK, not
# imported: start-up imports neither (tests/start/test_start.py keeps them equal).
_NO_CELL_USER = ("", "none")
_SUDO_MARK = "RIO_AS_ROOT"


def begin(argv: list[str]) -> None:
    """Start this process's command ``argv`` (``sys.argv[1:]``): an Owner command holding a
    credential re-executes without it where that can be decided here (this does not return
    then), and a run that talks to a model starts the SDK import."""
    invocation = Invocation.read(argv)
    extra = early_secret_names(invocation, os.environ)
    if extra is not None:
        names = secret_names(os.environ, extra=extra)
        if names:
            # When it fails, the command line meets the same failure and reports it.
            with contextlib.suppress(RioError):
                reexec_without(names, argv)  # does not return
    preload.start(invocation, os.environ)


def early_secret_names(invocation: Invocation, environ: Mapping[str, str]) -> list[str] | None:
    """The ``--secret`` names the Owner command ``invocation`` must move out of its initial
    environment too, when it may re-execute before the command line is imported
    (``owner_sessions``) and its Session's names can be read at rest; None otherwise."""
    sessions = owner_sessions(invocation, environ)
    if sessions is None:
        return None
    names: list[str] = []
    for db in sessions:
        named = session_secret_names_at_rest(db)
        if named is None:
            return None
        names += named
    return names


def owner_sessions(invocation: Invocation, environ: Mapping[str, str]) -> list[str] | None:
    """The Session files (one for ``work`` and ``run``, none for ``action``) whose
    ``--secret`` names the Owner command ``invocation`` must read before it re-executes
    without its credentials, when it can re-execute before the command line is imported. None
    when it cannot or need not: not an Owner command, no credential-named variable in
    ``environ``, already re-executed, a Cell user that rio_ci.run.confinement.user may first
    re-execute through sudo for (sudo closes the descriptor carrying the credentials), or
    arguments whose meaning only the command line's parser knows (``-h``, ``--``, an
    abbreviated or unknown option, a missing value, another number of positionals)."""
    positionals = invocation.positionals
    if positionals is None or not any(map(SECRET_NAME.search, environ)):
        return None
    if "RIO_SECRETS_FD" in environ or "RIO_SCRUBBED" in environ:
        return None
    command = invocation.command
    cell_user = environ.get("RIO_CELL_USER", "") if command == "action" else ""
    if _may_become_root(invocation.options.get("--cell-user", cell_user), environ):
        return None
    if command == "action":  # its one positional is the phase; it names no Session
        return [] if len(positionals) <= 1 else None
    return list(positionals) if len(positionals) == 1 else None


def _may_become_root(cell_user: str, environ: Mapping[str, str]) -> bool:
    """Whether rio_ci.run.confinement.user.become_root may re-execute this command through sudo."""
    return (
        cell_user.strip() not in _NO_CELL_USER
        and sys.platform.startswith("linux")
        and os.geteuid() != 0
        and not environ.get(_SUDO_MARK)
    )
