"""What a Worker starts with: its environment, its scratch folder, the in-Cell modules, uv —
and what it must never get, the harness's secrets (model API key, forge token).

Two ways a Cell could read them: its own environment, and the Owner's — Linux shows every
process's *initial* environment to processes of the same user in ``/proc/<pid>/environ``.
So a Worker's environment is filtered, and an Owner command that finds secrets in its own
environment re-executes itself once without them, receiving their values through a pipe.
Values set after exec live on the heap, where ``/proc/<pid>/environ`` does not look.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from rio_ci.session import Session

SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|PRIVATE_KEY|CREDENTIAL", re.I)
# Harness plumbing that must not reach a Worker either.
PRIVATE_VARS = frozenset({"RIO_CRASH_AT", "RIO_SECRETS_FD", "RIO_SCRUBBED"})
_MIN_SECRET = 6  # shorter values would match innocent text


def secret_names(environ: Mapping[str, str], keep: Iterable[str] = ()) -> set[str]:
    kept = set(keep)
    return {k for k in environ if SECRET_NAME.search(k) and k not in kept}


def worker_environment(environ: Mapping[str, str], keep: Iterable[str] = ()) -> dict[str, str]:
    """``environ`` without secrets: names that look like credentials (unless listed in
    ``keep``, the Session's explicit pass-through), any value that contains one of their
    values (a remote URL, an Authorization header), and the harness's private variables."""
    names = secret_names(environ, keep)
    values = {environ[k] for k in names if len(environ[k]) >= _MIN_SECRET}
    return {k: v for k, v in environ.items()
            if k not in names and k not in PRIVATE_VARS and not any(s in v for s in values)}


def scrub_own_environment(argv: list[str]) -> None:
    """Re-execute this command once without secrets in its initial environment.

    Called by Owner commands before anything else. After the re-exec the secrets are put
    back into ``os.environ`` from the pipe, so the harness can still use them."""
    fd = os.environ.pop("RIO_SECRETS_FD", None)
    if fd is not None:
        with os.fdopen(int(fd)) as stream:
            os.environ.update(json.load(stream))
        return
    names = secret_names(os.environ)
    if not names or os.environ.get("RIO_SCRUBBED"):
        return
    secrets = {k: os.environ[k] for k in names}
    read, write = os.pipe()
    payload = json.dumps(secrets).encode()
    if len(payload) > 60_000:  # a pipe holds 64 KiB; never block before exec
        return
    os.write(write, payload)
    os.close(write)
    os.set_inheritable(read, True)
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(RIO_SECRETS_FD=str(read), RIO_SCRUBBED="1")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "rio_ci.cli", *argv], env)


def secret_values(environ: Mapping[str, str], keep: Iterable[str] = ()) -> list[str]:
    """The values captured output must never show (replaced by ``***`` before commit):
    those of credential-named variables, longest first, shorter ones than ``_MIN_SECRET``
    left out (they would match innocent text)."""
    values = {environ[k] for k in secret_names(environ, keep) if len(environ[k]) >= _MIN_SECRET}
    return sorted(values, key=len, reverse=True)


def worker_env(session: Session, cell_id: int | None) -> dict[str, str]:
    env = worker_environment(os.environ, session.proj.session.get("pass_env", []))
    shim = str(api_shim(session))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [shim, env.get("PYTHONPATH")]))
    env.update(RIO_SESSION_DB=str(session.journal.path), RIO_PYTHON=sys.executable)
    if cell_id is not None:
        env["RIO_CELL_ID"] = str(cell_id)
    return env


def scratch_dir(session: Session) -> Path:
    path = session.journal.path.parent / f"{session.journal.path.name}.d"
    path.mkdir(exist_ok=True)
    return path


def api_shim(session: Session) -> Path:
    """A folder holding only the in-Cell modules of rio_ci (``api.py`` and ``tools/``, both
    standard library only), so a Cell can import them and nothing else of the harness."""
    shim = scratch_dir(session) / "pylib"
    package = shim / "rio_ci"
    (package / "tools").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    root = Path(__file__).parents[1]
    for path in [root / "api.py", *sorted((root / "tools").glob("*.py"))]:
        source, copy = path.read_text(), package / path.relative_to(root)
        if not copy.exists() or copy.read_text() != source:
            copy.write_text(source)
    return shim


@functools.cache  # finding it searches several install locations (~0.3 ms a launch)
def uv_binary() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())
