"""The in-Cell API: ``from rio_ci.api import timer, cancel_timer, records, output``.

Standard library only: a Cell runs in uv's isolated environment with ``dependencies = []``,
where only this module is importable. Every call is a request over the Unix socket the Owner
serves (``RIO_API_SOCKET``; a Cell never opens the Session file, and under a Cell user it
cannot), answered through the harness's real commit path, so ``timer()`` returns only after
the Timer is committed.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

__all__ = ["cancel_timer", "output", "records", "timer"]

_TIMEOUT = 90.0  # the Owner gives a request 60 s


def _harness(*args: str) -> str:
    path = os.environ.get("RIO_API_SOCKET")
    if not path:
        raise RuntimeError("rio_ci.api works only inside a Cell run by rio-ci")
    data = bytearray()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(_TIMEOUT)
            conn.connect(path)
            conn.sendall(json.dumps({"args": list(args)}).encode())
            conn.shutdown(socket.SHUT_WR)
            while chunk := conn.recv(65536):
                data += chunk
        reply = json.loads(data.decode("utf-8"))
        code, out, err = int(reply["code"]), str(reply["stdout"]), str(reply["stderr"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RuntimeError(f"rio_ci.api: the Owner did not answer ({exc})") from None
    if code != 0:
        try:
            reason = json.loads(out.strip().splitlines()[-1])["error"]
        except (IndexError, KeyError, ValueError):
            reason = err.strip() or f"exit {code}"
        raise RuntimeError(f"rio_ci.api: {reason}")
    return out


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
