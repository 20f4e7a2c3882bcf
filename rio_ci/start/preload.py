"""The SDK import started in a thread, when this process is a ``rio-ci run`` or the run phase
of ``rio-ci action`` (a GitHub job) that will talk to a model: the SDK import (seconds on a
busy runner) is the floor under a job's first model request, and the thread lets it overlap
with everything a run does first (its own imports, opening the Session, recovery, the Owner's
checks, a job's restore), wherever that work waits on the disk, the network or a process.
``rio_ci.model.anthropic`` imports the SDK as usual; Python's import lock makes it wait for
this import rather than start another.

Only the SDK (which imports nothing of rio_ci) is imported here, and only for ``run`` (model
from ``--model``, the default when absent) or ``action [run]`` (model from ``RIO_MODEL``)
with a model that is not scripted: any other command or phase imports nothing.
docs/performance.md measures it (``start_to_first_request_seconds``).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Mapping

from rio_ci.core.credentials import SECRET_NAME
from rio_ci.start.invocation import Invocation

__all__ = ["PRELOAD", "start", "wanted"]

SCRIPTED = "scripted:"  # the one kind of --model spec that talks to no provider

# The thread started by ``start``, if any (tests join it).
PRELOAD: threading.Thread | None = None


def start(invocation: Invocation, environ: Mapping[str, str]) -> None:
    """Start the SDK import in a thread when ``invocation`` wants it and this process will
    not re-execute first."""
    global PRELOAD
    if PRELOAD is None and wanted(invocation, environ) and not will_reexec(environ):
        PRELOAD = threading.Thread(target=_import_sdk, name="rio-sdk-import", daemon=True)
        PRELOAD.start()


def wanted(invocation: Invocation, environ: Mapping[str, str]) -> bool:
    """Whether ``invocation`` is a ``rio-ci run`` or ``rio-ci action [run]`` whose model needs
    the SDK (arguments only the command line's parser can read want nothing)."""
    positionals = invocation.positionals
    if positionals is None:
        return False
    if invocation.command == "action":
        phase = positionals[0] if positionals else "run"
        return phase == "run" and not environ.get("RIO_MODEL", "").startswith(SCRIPTED)
    model = invocation.options.get("--model", "")  # absent: the default model, never scripted
    return invocation.command == "run" and not model.startswith(SCRIPTED)


def will_reexec(environ: Mapping[str, str]) -> bool:
    """Whether this process still holds a credential in its environment, so the Owner will
    re-execute itself without it before anything else (``rio_ci.start.handover``): an import
    started here would be thrown away and would only slow this process's own imports."""
    if environ.get("RIO_SCRUBBED") == "1":
        return False
    return any(SECRET_NAME.search(name) for name in environ)


def _import_sdk() -> None:
    with contextlib.suppress(Exception):  # the real import, later, reports it properly
        importlib.import_module("anthropic")
