"""Re-executing this process without its credentials, which the new process reads back from
an anonymous file (docs/security.md, "Secrets").

Linux shows a process's initial environment to the processes of the same user
(``/proc/<pid>/environ``), and values set after exec live on the heap, where that file does
not look. So an Owner command that finds a credential in its initial environment starts
itself again with ``python -I -m rio_ci`` and the same arguments, the credentials left out of
the new environment and written to a file no name reaches (a memfd: no size limit, never on
disk), whose descriptor the new process inherits (``RIO_SECRETS_FD``) and reads once.

``early`` does it before the command line is imported, where it can; the Owner's own start-up
(``rio_ci.run.environment.scrub_own_environment``) reads the credentials back, and does it
again for whatever that reading left. Only the standard library's lightest modules load here.
"""

from __future__ import annotations

import json
import os
import sys

from rio_ci.core.errors import RioError

__all__ = ["reexec_without", "take_over"]


def reexec_without(names: set[str], argv: list[str]) -> None:
    """Start this command (``argv``: ``sys.argv[1:]``) again, isolated, without ``names`` in
    its environment, their values handed over in an anonymous file. Does not return; raises
    a RioError saying why when the file cannot be made or the interpreter not started."""
    secrets = {k: os.environ[k] for k in names}
    try:
        fd = _anonymous_file(json.dumps(secrets).encode("utf-8", "surrogateescape"))
    except OSError as exc:
        raise RioError(
            f"cannot move the credentials out of this process's initial "
            f"environment ({exc.strerror}); refusing to start an Owner that a "
            "script could read them from"
        ) from None
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.update(RIO_SECRETS_FD=str(fd), RIO_SCRUBBED="1")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        # -I: neither PYTHONPATH nor the working directory (a checkout a Cell may have written
        # a rio_ci/ or a sitecustomize.py into) nor the user site is on sys.path, so the
        # process that gets the credentials runs rio-ci's own code only.
        os.execve(sys.executable, [sys.executable, "-I", "-m", "rio_ci", *argv], env)
    except OSError as exc:
        os.close(fd)  # a caller that tries again must not leave a copy of the secrets open
        raise RioError(
            f"cannot re-execute {sys.executable} without the credentials "
            f"({exc.strerror}); refusing to start"
        ) from None


def take_over(fd: str) -> dict[str, str]:
    """The credentials a re-execution handed over in the file ``fd`` (``RIO_SECRETS_FD``),
    read once and closed; a RioError when it does not hold them."""
    try:
        with os.fdopen(int(fd), "rb") as stream:
            values = json.loads(stream.read().decode("utf-8", "surrogateescape"))
    except (OSError, ValueError) as exc:
        raise RioError(
            f"RIO_SECRETS_FD={fd!r} does not carry rio-ci's credentials ({exc}); "
            "it is set only by rio-ci itself"
        ) from None
    if not isinstance(values, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in values.items()
    ):
        raise RioError("RIO_SECRETS_FD does not carry rio-ci's credentials")
    return values


def _anonymous_file(payload: bytes) -> int:
    """A descriptor, inheritable and at offset 0, of a file holding ``payload`` that no
    name reaches: a memfd where Linux offers one, else an unlinked temporary file."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("rio-ci-secrets", 0)
    else:
        import tempfile

        with tempfile.TemporaryFile() as spare:
            fd = os.dup(spare.fileno())
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        os.set_inheritable(fd, True)
    except OSError:
        os.close(fd)  # part of the secrets must not stay open, to be inherited later
        raise
    return fd
