"""The in-Cell API: ``from rio_ci.api import timer, cancel_timer, records, output``.

Standard library only: a Cell runs in uv's isolated environment with ``dependencies = []``,
where only this module is importable. Every call goes through the harness's own
interpreter (``RIO_PYTHON``) and its real commit path, so ``timer()`` returns only after the
Timer is committed.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

__all__ = ["cancel_timer", "output", "records", "timer"]


def _harness(*args: str) -> str:
    python = os.environ.get("RIO_PYTHON")
    db = os.environ.get("RIO_SESSION_DB")
    if not python or not db:
        raise RuntimeError("rio_ci.api works only inside a Cell run by rio-ci")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the real rio_ci, not us
    # -P: never import from the working directory, which may hold another rio_ci.
    done = subprocess.run(
        [python, "-P", "-m", "rio_ci.cell_bridge", db, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        try:
            reason = json.loads(done.stdout.strip().splitlines()[-1])["error"]
        except (IndexError, KeyError, ValueError):
            reason = done.stderr.strip() or f"exit {done.returncode}"
        raise RuntimeError(f"rio_ci.api: {reason}")
    return done.stdout


def timer(id: str, deadline_unix: float, payload: Any = None) -> dict[str, Any]:
    """Register a durable Timer; returns after it is committed. When due, one Inbox message
    ``timer:<id>`` (kind ``timer``) carries ``payload``. Re-registering the identical Timer
    is harmless; a conflicting one raises RuntimeError."""
    cell = os.environ.get("RIO_CELL_ID", "")
    try:
        text = json.dumps(payload, allow_nan=False)
    except ValueError:
        raise RuntimeError(
            "rio_ci.api: a Timer payload must be JSON: it holds NaN or Infinity"
        ) from None
    out = _harness("timer", id, repr(float(deadline_unix)), text, cell)
    result: dict[str, Any] = json.loads(out)
    return result


def cancel_timer(id: str) -> dict[str, Any]:
    """Withdraw a waiting Timer so it never fires (a waiting Timer blocks a success
    conclusion). Returns ``{"id", "cancelled"}``; ``cancelled`` is False when the Timer had
    already fired, was already cancelled, or never existed."""
    result: dict[str, Any] = json.loads(_harness("cancel_timer", id))
    return result


def records(after: int = 0) -> list[dict[str, Any]]:
    """Committed Journal events with seq > ``after`` (read-only)."""
    out = _harness("records", str(int(after)))
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def output(cell_id: int, stream: str = "stdout") -> str:
    """The full retained output of one Cell's Execution (``stdout`` or ``stderr``), also when
    the State shows only a marker in its place to stay within the context budget."""
    result: dict[str, Any] = json.loads(_harness("output", str(int(cell_id)), stream))
    return str(result["text"])
