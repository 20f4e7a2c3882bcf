"""Importing this module starts importing the model SDK in a thread, when this process is a
``rio-ci run`` that will talk to Claude: the SDK import (seconds on a busy runner) is the
floor under a job's first model request, and the thread lets it overlap with everything a
run does first (its own imports, opening the Session, recovery, the Owner's checks),
wherever that work waits on the disk or a process. ``rio_ci.model.anthropic`` imports the
SDK as usual; Python's import lock makes it wait for this import rather than start another.

Only the SDK (which imports nothing of rio_ci) is imported here, and only for ``run`` with an
Anthropic, Bedrock or Vertex model: any other command, or a scripted model, imports nothing.
docs/performance.md measures it (``start_to_first_request_seconds``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading

__all__ = ["PRELOAD", "wanted"]


def wanted(argv: list[str]) -> bool:
    """Whether ``argv`` (``sys.argv``) is a ``rio-ci run`` whose model needs the SDK."""
    program = os.path.basename(argv[0]) if argv else ""
    if program not in ("rio-ci", "cli.py") or len(argv) < 2 or argv[1] != "run":
        return False
    model = "anthropic"
    for number, arg in enumerate(argv[2:], start=2):
        if arg == "--model" and number + 1 < len(argv):
            model = argv[number + 1]
        elif arg.startswith("--model="):
            model = arg.removeprefix("--model=")
    return not model.startswith("scripted:")


def _import_sdk() -> None:
    with contextlib.suppress(Exception):  # the real import, later, reports it properly
        importlib.import_module("anthropic")


PRELOAD: threading.Thread | None = None
if wanted(sys.argv):
    PRELOAD = threading.Thread(target=_import_sdk, name="rio-sdk-import", daemon=True)
    PRELOAD.start()
