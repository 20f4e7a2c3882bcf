"""What a Worker starts with: its environment, the scratch folder beside its Session, uv
(what it reads of rio-ci is in the Cell folder, ``confinement/folder.py``) — and what it must
never get: the harness's secrets (model API key, forge token, and every variable a Session names
with ``--secret``).

Three ways a Cell could read them: its own environment, the Owner's initial environment
(Linux shows it to processes of the same user in ``/proc/<pid>/environ``), and the Owner's
memory. So a Worker's environment is filtered; an Owner command that finds secrets in its own
environment re-executes itself once without them and reads their values back from an
anonymous file (a memfd: no size limit, never on disk, gone once read); and the Owner marks
itself not dumpable, which makes its ``/proc`` entries (environ, mem, fd …) unreadable to
other processes of the same user unless they are root or hold ``CAP_SYS_PTRACE``. Values
set after exec live on the heap, where ``/proc/<pid>/environ`` does not look.

The re-execution and the hand-over are ``rio_ci.start.handover``'s: start-up does them before
the command line is imported where it can, and ``scrub_own_environment`` here, after the
command line's checks, for whatever is left.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from rio_ci.core.credentials import secret_names
from rio_ci.core.errors import RioError, StorageError
from rio_ci.start.handover import reexec_without, take_over

if TYPE_CHECKING:
    from pathlib import Path

    from rio_ci.session.session import Session

# Harness plumbing that must not reach a Worker either.
PRIVATE_VARS = frozenset({"RIO_CRASH_AT", "RIO_SECRETS_FD", "RIO_SCRUBBED"})
_MIN_SECRET = 6  # shorter values would match innocent text
_PR_SET_DUMPABLE = 4  # <linux/prctl.h>


def worker_environment(
    environ: Mapping[str, str], keep: Iterable[str] = (), extra: Iterable[str] = ()
) -> dict[str, str]:
    """``environ`` without secrets: credential names (unless listed in ``keep``, the
    Session's explicit pass-through), the names in ``extra``, any value that contains one of
    their values (a remote URL, an Authorization header), and the harness's private
    variables."""
    names = secret_names(environ, keep, extra)
    values = {environ[k] for k in names if len(environ[k]) >= _MIN_SECRET}
    return {
        k: v
        for k, v in environ.items()
        if k not in names and k not in PRIVATE_VARS and not any(s in v for s in values)
    }


def scrub_own_environment(argv: list[str], extra: Iterable[str] = ()) -> None:
    """Re-execute this command without secrets in its initial environment, then mark the
    process not dumpable.

    Called by Owner commands before anything else. The re-executed process reads the
    secrets back into ``os.environ`` from an anonymous file, so the harness can still use
    them. It checks its own initial environment too: what re-executed it may have judged
    from less than this command line (``rio_ci.start.early``), so a secret it missed is
    moved out by one more re-execution, carrying both. Never skipped: a secret that cannot
    be moved out of the initial environment stops the command with a RioError."""
    fd = os.environ.pop("RIO_SECRETS_FD", None)
    os.environ.pop("RIO_SCRUBBED", None)
    left = secret_names(os.environ, extra=extra)  # what this process's initial environment holds
    carried = take_over(fd) if fd is not None else {}
    os.environ.update(carried)
    if left:
        reexec_without(left | carried.keys(), argv)  # does not return
    protect_own_memory()


def protect_own_memory() -> bool:
    """Mark this process not dumpable (``prctl(PR_SET_DUMPABLE, 0)``): its ``/proc/<pid>``
    entries then belong to root, so a script of the same user cannot read its environment,
    memory or descriptors, nor ptrace it. Processes it starts get the flag back at exec.
    False where there is no such call (not Linux)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def session_secret_names(db: str) -> list[str]:
    """The ``--secret`` names a Session holds, read before an Owner command re-executes
    itself (an unreadable Session names none here; the Owner then fails on its own)."""
    settings = _session_settings(db)
    return list(settings.get("secrets", [])) if settings else []


def session_tree(db: str) -> str | None:
    """The working directory a Session's Cells run in, read before an Owner command looks
    up any program (rio_ci.untrusted.programs); None when the Session cannot be read here."""
    settings = _session_settings(db)
    return str(settings["cwd"]) if settings else None


@functools.lru_cache(maxsize=2)  # an Owner command asks for both: one open
def _session_settings(db: str) -> dict[str, Any] | None:
    from rio_ci.session.session import Session

    try:
        session = Session.open(db)
    except RioError:
        return None
    try:
        return dict(session.proj.session)
    finally:
        session.close()


def secret_values(environ: Mapping[str, str], extra: Iterable[str] = ()) -> list[str]:
    """The values captured output must never show (replaced by ``***`` before commit):
    those of credential-named variables and of the names in ``extra`` (a Session's
    ``--secret``), passed-through ones included, longest first; values shorter than
    ``_MIN_SECRET`` are left out (they would match innocent text)."""
    values = {
        environ[k] for k in secret_names(environ, extra=extra) if len(environ[k]) >= _MIN_SECRET
    }
    return sorted(values, key=len, reverse=True)


def redacted_values(session: Session) -> list[str]:
    """``secret_values`` of this process's environment for ``session``."""
    return secret_values(os.environ, session.proj.session.get("secrets", []))


def worker_env(session: Session, cell_id: int | None, pylib: Path) -> dict[str, str]:
    """A Worker's environment: ``worker_environment`` with the Session's pass-through, and
    ``pylib`` (the Cell folder's in-Cell modules) first on ``PYTHONPATH``."""
    settings = session.proj.session
    env = worker_environment(os.environ, settings.get("pass_env", []), settings.get("secrets", []))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pylib), env.get("PYTHONPATH")]))
    env["RIO_SESSION_DB"] = str(session.path)  # dropped under a Cell user
    if cell_id is not None:
        env["RIO_CELL_ID"] = str(cell_id)
    return env


def scratch_dir(session: Session) -> Path:
    """``<session>.d`` beside the Session, a real directory (never through a link)."""
    path = session.path.parent / f"{session.path.name}.d"
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create {path}: {exc.strerror}") from None
    if path.is_symlink() or not path.is_dir():
        raise StorageError(f"{path} is not a directory rio-ci made (a link or a file); remove it")
    return path


@functools.cache  # finding it searches several install locations (~0.3 ms a launch)
def uv_binary() -> str:
    """The uv installed with rio-ci, which every code Cell starts with: never one on the
    Cells' ``PATH``, and refused where a Cell could have replaced it (rio_ci.untrusted.programs)."""
    from uv import find_uv_bin

    from rio_ci.untrusted import programs

    try:
        found = str(find_uv_bin())
    except FileNotFoundError:
        raise RioError(
            "uv, which rio-ci installs with itself, is missing: reinstall rio-ci"
        ) from None
    problem = programs.trusted_file(found)
    if problem is not None:
        raise RioError(f"rio-ci will not run {found}: {problem}; install rio-ci elsewhere")
    return found
