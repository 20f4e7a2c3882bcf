"""Running the workload driver as a real process, and killing it."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.kit import ROOT, cli_env

DRIVER_TIMEOUT = 120.0


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
    return subprocess.Popen(
        [sys.executable, "-m", "tests.faults.workload", verb, str(directory)],
        cwd=ROOT,
        env=cli_env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


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
