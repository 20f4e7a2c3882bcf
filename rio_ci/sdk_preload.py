"""Importing this module starts importing the model SDK in a thread, when this process is a
``rio-ci run`` or the run phase of ``rio-ci action`` (a GitHub job) that will talk to a
provider: the SDK import (seconds on a busy runner) is the floor under a job's first model
request, and the thread lets it overlap with everything a run does first (its own imports,
opening the Session, recovery, the Owner's checks, a job's restore), wherever that work
waits on the disk, the network or a process. The provider's module imports the SDK as
usual; Python's import lock makes it wait for this import rather than start another.

Only the SDK that the model's row of the providers table names (rio_ci/model/providers.py;
an SDK imports nothing of rio_ci) is imported here, and only for ``run`` (model from
``--model``) or ``action [run]`` (model from ``RIO_MODEL``): any other command or phase, or a
scripted model, imports nothing. docs/performance.md measures it
(``start_to_first_request_seconds``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Mapping

from rio_ci.core.credentials import SECRET_NAME
from rio_ci.model.providers import sdk_of

__all__ = ["PRELOAD", "sdk_wanted", "wanted"]


def sdk_wanted(argv: list[str], environ: Mapping[str, str] = os.environ) -> str | None:
    """The SDK that ``argv`` (``sys.argv``) needs when it is a ``rio-ci run`` or ``rio-ci
    action [run]``, as the providers table names it for the model; None otherwise."""
    program = os.path.basename(argv[0]) if argv else ""
    if program not in ("rio-ci", "cli.py") or len(argv) < 2:
        return None
    if argv[1] == "action":
        phase = next((arg for arg in argv[2:] if not arg.startswith("-")), "run")
        return sdk_of(environ.get("RIO_MODEL", "").strip() or None) if phase == "run" else None
    if argv[1] != "run":
        return None
    model = None
    for number, arg in enumerate(argv[2:], start=2):
        if arg == "--model" and number + 1 < len(argv):
            model = argv[number + 1]
        elif arg.startswith("--model="):
            model = arg.removeprefix("--model=")
    return sdk_of(model)


def wanted(argv: list[str], environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``argv`` is a ``rio-ci run`` or ``rio-ci action [run]`` whose model needs an
    SDK."""
    return sdk_wanted(argv, environ) is not None


def _import_sdk(name: str) -> None:
    with contextlib.suppress(Exception):  # the real import, later, reports it properly
        importlib.import_module(name)


def will_reexec(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process still holds a credential in its environment, so the Owner will
    re-execute itself without it before anything else (rio_ci.run.environment): an import
    started here would be thrown away and would only slow this process's own imports."""
    if environ.get("RIO_SCRUBBED") == "1":
        return False
    return any(SECRET_NAME.search(name) for name in environ)


PRELOAD: threading.Thread | None = None
if (_SDK := sdk_wanted(sys.argv)) is not None and not will_reexec():
    PRELOAD = threading.Thread(target=_import_sdk, args=(_SDK,), name="rio-sdk-import", daemon=True)
    PRELOAD.start()
