"""Keeping the harness's secrets (model API key, forge token) away from Workers.

Two ways a Cell could read them: its own environment, and the Owner's — Linux shows every
process's *initial* environment to processes of the same user in ``/proc/<pid>/environ``.
So a Worker's environment is filtered, and an Owner command that finds secrets in its own
environment re-executes itself once without them, receiving their values through a pipe.
Values set after exec live on the heap, where ``/proc/<pid>/environ`` does not look.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping

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
