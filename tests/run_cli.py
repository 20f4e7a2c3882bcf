"""Running `rio-ci` as a real subprocess for the harness and scripted-model tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from rio_ci.session import Session

ROOT = Path(__file__).resolve().parents[1]


def clean_env(**extra: str) -> dict[str, str]:
    """No crash point, no real endpoint or key; this checkout's rio_ci; plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RIO_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(ROOT)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def rio(*args: str, env: dict[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rio_ci.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env or clean_env())


def spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rio_ci.cli", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or clean_env())


def status(stdout: str) -> dict[str, Any]:
    line: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return line


def new_session(tmp_path: Path, *limits: str) -> Path:
    db = tmp_path / "s.db"
    args = ["new", str(db), "--goal", "harness test", "--cwd", str(tmp_path)]
    for limit in limits:
        args += ["--limit", limit]
    done = rio(*args)
    assert done.returncode == 0, done.stdout + done.stderr
    return db


def events(db: Path) -> list[dict[str, Any]]:
    session = Session.open(db)
    try:
        return list(session.journal.events())
    finally:
        session.close()


def write_script(tmp_path: Path, rounds: list[list[dict[str, Any]]]) -> Path:
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(rounds))
    return path
