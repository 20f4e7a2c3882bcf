"""The harness and scripted-model tests' helpers around ``rio-ci`` (tests/kit.py runs it):
a new Session, a script, a signal once something holds, the status line."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.kit import run_cli, until


def interrupt(
    proc: subprocess.Popen[str], ready: Callable[[], Any], what: str, signum: int = signal.SIGTERM
) -> tuple[str, str, float]:
    """Once ``ready()`` holds (within 30 s), send ``signum`` to ``proc`` and wait up to 10 s
    for it to exit. Returns its stdout, its stderr and the seconds from the signal to the
    exit; ``proc`` is killed if it is still running after that."""
    try:
        until(ready, 30, what)
        proc.send_signal(signum)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=10)
        return out, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()


def status(stdout: str) -> dict[str, Any]:
    line: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return line


def new_session(tmp_path: Path, *limits: str) -> Path:
    db = tmp_path / "s.db"
    args = ["new", str(db), "--goal", "harness test", "--cwd", str(tmp_path)]
    for limit in limits:
        args += ["--limit", limit]
    done = run_cli(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    return db


def write_script(tmp_path: Path, rounds: list[list[dict[str, Any]]]) -> Path:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(rounds))
    return path
