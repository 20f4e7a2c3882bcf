"""A fresh virtual environment can run the README's main-job command, and the ``rio-ci`` it
installs runs nothing from a ``PYTHONPATH`` a Cell could write (docs/design.md, "The rio-ci
command"): a ``sitecustomize`` there runs in the demo's Cells, never in rio-ci's own
processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
    planted, ran = tmp_path / "planted", tmp_path / "ran"
    planted.mkdir()
    ran.mkdir()
    (planted / "sitecustomize.py").write_text(
        "import os\n"
        "if 'RIO_WORKER_TOKEN' not in os.environ:  # not a Cell: one of rio-ci's own\n"
        f"    open(os.path.join({str(ran)!r}, str(os.getpid())), 'w').close()\n"
    )
    demo = subprocess.run(
        [str(venv / "bin" / "rio-ci"), "demo", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(planted)},
    )
    assert demo.returncode == 0, demo.stderr[-3000:]
    summary = json.loads(demo.stdout.strip().splitlines()[-1])
    assert summary["status"] == "succeeded"
    assert summary["unknown_executions"] == 1
    assert "session.sqlite3" in demo.stderr  # the story says where the Session file is
    assert os.listdir(ran) == []
