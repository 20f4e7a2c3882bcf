"""Becoming root through the runner's ``sudo``, whichever it is (docs/design.md, "Becoming
root").

Two implementations answer to ``sudo`` on the runners rio-ci supports: classic sudo
(Ubuntu 24.04) and sudo-rs (Ubuntu 25.10 and later, so today's ``ubuntu-latest``). sudo-rs
ignores ``-E`` and always resets the command's environment; both drop or rewrite some
variables whatever they are told, and classic sudo logs the value of every variable passed
on its command line or with ``--preserve-env``. What both pass on untouched is the
command's standard input, when it is not a terminal. So an Owner that re-executes itself
through sudo hands its environment over as data on standard input: an anonymous file (a
memfd, never on disk, no name) holding the environment, whose digest the command line
carries in the ``RIO_AS_ROOT`` mark. The re-executed Owner takes the environment over
before anything else (``arrive``), empties that file and puts ``/dev/null`` in its place,
or ends at once with one line naming the sudo that lost it.

What crosses is the Owner's whole environment, credentials included, except what names
the user the process runs as (``USER``, ``LOGNAME``, ``MAIL``, ``SUDO_*``: sudo's values
stay) and what would load code into a root process from the runner's settings (the dynamic
linker's ``LD_*`` and ``GCONV_PATH``, exported shell functions), which every sudo drops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import select
import stat
import subprocess
import time
from collections.abc import Iterable, Iterator, Mapping

from rio_ci.core.errors import RioError, UsageError
from rio_ci.untrusted import programs

MARK = "RIO_AS_ROOT"  # set on the command rio-ci re-executes through sudo (once)
FORMAT = "rio-ci hand-over 1"
MAX_BYTES = 16 * 1024 * 1024  # an environment is at most a few hundred KiB (ARG_MAX)
WAIT_SECONDS = 10.0  # for a standard input that is a pipe: how long to wait for its end
# Names whose value describes the user a process runs as: the target's, as sudo set them.
IDENTITY = frozenset(
    {"USER", "LOGNAME", "MAIL", "SUDO_USER", "SUDO_UID", "SUDO_GID", "SUDO_COMMAND", "SUDO_HOME"}
)
# What sudo itself runs in (it reads no message catalogue); not the job's, which the
# hand-over carries: a name the job did not set is removed again on arrival.
C_LOCALE = {"LC_ALL": "C", "LANGUAGE": ""}
# Harness plumbing that belongs to one process: never handed over.
_PLUMBING = frozenset({MARK, "RIO_SECRETS_FD", "RIO_SCRUBBED"})
_LABEL = re.compile(r"[^A-Za-z0-9 ._+~:()/-]+")
_VERSION = (
    ("sudo", re.compile(r"^Sudo version (\S+)")),
    ("sudo-rs", re.compile(r"^sudo-rs (\S+)")),
)


@dataclasses.dataclass(frozen=True)
class SudoFound:
    """The ``sudo`` on PATH: ``kind`` is ``sudo`` (classic), ``sudo-rs``, ``unknown`` (it
    answers ``-V`` with something else) or None (there is none)."""

    path: str | None
    kind: str | None
    version: str = ""

    def describe(self) -> str:
        if self.kind is None:
            return "no sudo"
        if self.kind == "sudo":
            return f"classic sudo {self.version}"
        if self.kind == "sudo-rs":
            return f"sudo-rs {self.version}"
        return f"an unknown sudo ({self.path})"


def find_sudo() -> SudoFound:
    """Which ``sudo`` this process would run, from its own ``-V`` (no password needed)."""
    path = programs.find("sudo")  # the sudo become_root runs, never one of the checkout's
    return SudoFound(None, None) if path is None else identify(path)


def identify(path: str) -> SudoFound:
    """Which sudo the program at ``path`` is, from the first line of its ``-V``."""
    try:
        done = subprocess.run(
            [path, "-V"],
            env=programs.with_search_path(os.environ),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return SudoFound(path, "unknown")
    first = (done.stdout.splitlines() or [""])[0].strip()
    for kind, pattern in _VERSION:
        matched = pattern.match(first)
        if matched:
            return SudoFound(path, kind, matched.group(1))
    return SudoFound(path, "unknown")


# --- the sender: before ``sudo`` ----------------------------------------------------------


def handed_over(environ: Mapping[str, str]) -> dict[str, str]:
    """What of ``environ`` crosses sudo (see the module's docstring)."""
    return {
        k: v
        for k, v in environ.items()
        if k not in IDENTITY
        and k not in _PLUMBING
        and not k.startswith("LD_")
        and k != "GCONV_PATH"
        and not v.startswith("()")
    }


def _payload(environ: Mapping[str, str]) -> bytes:
    document = {"format": FORMAT, "environ": handed_over(environ)}
    return json.dumps(document).encode("utf-8", "surrogateescape")


def mark(payload: bytes, sudo: SudoFound) -> str:
    """``RIO_AS_ROOT``'s value: the payload's digest, then which sudo carried it."""
    label = _LABEL.sub("?", sudo.describe())[:80]
    return f"{hashlib.sha256(payload).hexdigest()[:32]} {label}"


@contextlib.contextmanager
def on_standard_input(environ: Mapping[str, str], sudo: SudoFound) -> Iterator[str]:
    """Put the hand-over of ``environ`` on file descriptor 0 for the ``exec`` of sudo inside
    the block, and yield the mark for its command line. If the block ends (the ``exec``
    failed), standard input is what it was."""
    payload = _payload(environ)
    fd = os.memfd_create("rio-ci-hand-over", os.MFD_CLOEXEC)
    saved = os.dup(0)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        os.dup2(fd, 0)
        yield mark(payload, sudo)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
        os.close(fd)


# --- the arrival: the re-executed Owner ------------------------------------------------------


def arrive(needed: Iterable[str] = ()) -> None:
    """In an Owner started through sudo by ``on_standard_input`` (``RIO_AS_ROOT`` set): take
    over the environment the hand-over carries, then empty it and close standard input.
    Without a complete hand-over the command ends at once: a UsageError (exit 2) naming the
    sudo and, of ``needed`` (the names the command's contract requires), those not set."""
    value = os.environ.pop(MARK, None)
    if value is None:
        return
    digest, _, label = value.partition(" ")
    try:
        environ = _received(digest)
    finally:
        _close_standard_input()
    if environ is None:
        raise UsageError(_lost(label or "sudo", needed))
    os.environ.update(environ)
    for name in C_LOCALE.keys() - environ.keys():
        os.environ.pop(name, None)


def _lost(label: str, needed: Iterable[str]) -> str:
    missing = [name for name in needed if not os.environ.get(name)]
    unset = f" ({', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set)"
    return (
        f"rio-ci re-executed itself as root through {label}, and its "
        f"environment did not come with it{unset if missing else ''}: that sudo did not pass "
        "on the standard input rio-ci hands its environment over on; run Cells as the "
        "runner's user (cell-user none) or give the runner a sudo that does"
    )


def _received(digest: str) -> dict[str, str] | None:
    """The environment on standard input when it is the hand-over ``digest`` names."""
    try:
        data = _read_standard_input()
    except OSError:
        return None
    if data is None or hashlib.sha256(data).hexdigest()[:32] != digest:
        return None
    try:
        document = json.loads(data.decode("utf-8", "surrogateescape"))
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return None
    environ = document.get("environ")
    if not isinstance(environ, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in environ.items()):
        return None
    return handed_over(environ)


def _read_standard_input() -> bytes | None:
    """Everything on file descriptor 0, at most ``MAX_BYTES``; None for a terminal, more
    than that, or a pipe whose writer neither writes nor closes within ``WAIT_SECONDS``."""
    info = os.fstat(0)
    if os.isatty(0):
        return None
    if stat.S_ISREG(info.st_mode):  # a memfd: read at once
        return _bounded(os.read(0, MAX_BYTES + 1))
    chunks: list[bytes] = []
    deadline = time.monotonic() + WAIT_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([0], [], [], left)
        if not ready:
            return None
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return _bounded(b"".join(chunks))
        chunks.append(chunk)
        if sum(map(len, chunks)) > MAX_BYTES:
            return None
    return None


def _bounded(data: bytes) -> bytes | None:
    return data if len(data) <= MAX_BYTES else None


def _close_standard_input() -> None:
    """Empty the hand-over (sudo's own processes hold it too) and put ``/dev/null`` on file
    descriptor 0, so nothing this Owner starts inherits the credentials."""
    with contextlib.suppress(OSError):
        os.ftruncate(0, 0)  # a memfd we may write; a pipe or a terminal refuses
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    except OSError as exc:
        raise RioError(f"cannot close standard input ({exc.strerror})") from None
    finally:
        os.close(null)
