"""A fresh virtual environment can run the README's main-job command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_fresh_venv_installs_the_project_and_runs_the_demo(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    install = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    demo = subprocess.run(
        [str(venv / "bin" / "rio-ci"), "demo", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr[-3000:]
    summary = json.loads(demo.stdout.strip().splitlines()[-1])
    assert summary["status"] == "succeeded"
    assert summary["unknown_executions"] == 1
    assert "session.sqlite3" in demo.stderr  # the story says where the Session file is
