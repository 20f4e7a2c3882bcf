"""The SDK import started in a thread, when this process is a ``rio-ci run`` or the run phase
of ``rio-ci action`` (a GitHub job) that will talk to a model: the SDK import (seconds on a
busy runner) is the floor under a job's first model request, and the thread lets it overlap
with everything a run does first (its own imports, opening the Session, recovery, the Owner's
checks, a job's restore), wherever that work waits on the disk, the network or a process.
The provider's module imports the SDK as usual; Python's import lock makes it wait for this
import rather than start another.

Only the SDK that the model's row of the providers table names (rio_ci/model/providers.py;
an SDK imports nothing of rio_ci) is imported here, and only for ``run`` (model from
``--model``, the default when absent) or ``action [run]`` (model from ``RIO_MODEL``): any
other command or phase, or a scripted model, imports nothing. docs/performance.md measures
it (``start_to_first_request_seconds``).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Mapping

from rio_ci.core.credentials import SECRET_NAME
from rio_ci.model.providers import sdk_of
from rio_ci.start.invocation import Invocation

__all__ = ["PRELOAD", "sdk_wanted", "start", "wanted"]

# The thread started by ``start``, if any (tests join it).
PRELOAD: threading.Thread | None = None


def start(invocation: Invocation, environ: Mapping[str, str]) -> None:
    """Start the SDK import in a thread when ``invocation`` wants it and this process will
    not re-execute first."""
    global PRELOAD
    sdk = sdk_wanted(invocation, environ)
    if PRELOAD is None and sdk is not None and not will_reexec(environ):
        PRELOAD = threading.Thread(
            target=_import_sdk, args=(sdk,), name="rio-sdk-import", daemon=True
        )
        PRELOAD.start()


def sdk_wanted(invocation: Invocation, environ: Mapping[str, str]) -> str | None:
    """The SDK that ``invocation`` needs when it is a ``rio-ci run`` or ``rio-ci action
    [run]``, as the providers table names it for the model (arguments only the command line's
    parser can read want nothing); None otherwise."""
    positionals = invocation.positionals
    if positionals is None:
        return None
    if invocation.command == "action":
        phase = positionals[0] if positionals else "run"
        return sdk_of(environ.get("RIO_MODEL", "").strip() or None) if phase == "run" else None
    if invocation.command != "run":
        return None
    return sdk_of(invocation.options.get("--model") or None)  # absent: the default model


def wanted(invocation: Invocation, environ: Mapping[str, str]) -> bool:
    """Whether ``invocation`` is a ``rio-ci run`` or ``rio-ci action [run]`` whose model
    needs an SDK."""
    return sdk_wanted(invocation, environ) is not None


def will_reexec(environ: Mapping[str, str]) -> bool:
    """Whether this process still holds a credential in its environment, so the Owner will
    re-execute itself without it before anything else (``rio_ci.start.handover``): an import
    started here would be thrown away and would only slow this process's own imports."""
    if environ.get("RIO_SCRUBBED") == "1":
        return False
    return any(SECRET_NAME.search(name) for name in environ)


def _import_sdk(name: str) -> None:
    with contextlib.suppress(Exception):  # the real import, later, reports it properly
        importlib.import_module(name)
