"""Running the workload driver as a real process, and killing it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]
DRIVER_TIMEOUT = 120.0


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RIO_")}
    base["PYTHONPATH"] = str(ROOT)
    base.update(extra)
    return base


@dataclass
class Finished:
    code: int
    out: Any
    err: str


def _parse(stdout: str) -> Any:
    for line in reversed(stdout.splitlines()):
        with contextlib.suppress(json.JSONDecodeError):
            return json.loads(line)
    return None


def start(verb: str, directory: Path, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tests.faults.workload", verb, str(directory)],
                            cwd=ROOT, env=env(**extra), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def wait(proc: subprocess.Popen[str], timeout: float = DRIVER_TIMEOUT) -> Finished:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, err = proc.communicate()
        err += f"\n[fault suite] killed after {timeout} s: the driver hung"
        return Finished(-999, _parse(out), err)
    return Finished(proc.returncode, _parse(out), err)


def drive(verb: str, directory: Path, **extra: str) -> Finished:
    return wait(start(verb, directory, **extra))


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and every descendant (Workers sit in their own sessions but are
    still its children). Returns the pids signalled."""
    try:
        root = psutil.Process(pid)
        family = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    for proc in family:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
    return [p.pid for p in family]


def until(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
