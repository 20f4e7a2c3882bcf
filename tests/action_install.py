"""The action's install step (action.yml, "Install rio-ci"), run for real by bash as the
composite runs it: the ``rio-ci`` that a job's run and finish steps then execute
(``$RUNNER_TEMP/rio-ci-venv/bin/rio-ci``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# What the action's tree must hold for its install step (the build's inputs and the locks).
ACTION_FILES = ("action.yml", "pyproject.toml", "README.md", "uv.lock", "uv-bootstrap.txt")


def install_step() -> dict[str, object]:
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    (step,) = [s for s in action["runs"]["steps"] if s.get("name") == "Install rio-ci"]
    assert isinstance(step, dict)
    return step


def base_python() -> str:
    """The interpreter this venv was made from (the composite uses setup-python's)."""
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info[0]}.{sys.version_info[1]}")


def action_copy(directory: Path) -> Path:
    """The action's tree, copied: a build writes into the tree it builds."""
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "rio_ci", directory / "rio_ci", ignore=ignore)
    shutil.copytree(ROOT / "bin", directory / "bin")
    for name in ACTION_FILES:
        shutil.copy(ROOT / name, directory / name)
    return directory


def install_as_the_action_does(
    runner_temp: Path, action: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """The install step's script, with ``BASE_PYTHON``, ``RIO_ACTION_PATH`` and
    ``RUNNER_TEMP`` set and nothing of this venv, uv or Python in its environment."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_", "PYTHON"))
    }
    env.update(BASE_PYTHON=base_python(), RIO_ACTION_PATH=str(action), RUNNER_TEMP=str(runner_temp))
    return subprocess.run(
        ["bash", "-c", str(install_step()["run"])],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=env,
    )
