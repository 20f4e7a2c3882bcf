"""The action installs exactly what is locked (docs/github.md, "How the action installs
rio-ci"): ``uv.lock`` matches ``pyproject.toml``, ``uv-bootstrap.txt`` pins the same uv with
hashes, and the action's install step, run for real, lands a working rio-ci of the locked
versions in ``$RUNNER_TEMP`` with nothing group- or world-writable."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from action_install import action_copy, install_as_the_action_does, install_step

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
needs_uv = pytest.mark.skipif(UV is None, reason="uv is not installed (rio-ci depends on it)")


def locked_versions() -> dict[str, str]:
    lock = tomllib.loads((ROOT / "uv.lock").read_text())
    return {p["name"]: p["version"] for p in lock["package"] if "version" in p}


def check_lock(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [UV or "uv", "lock", "--check", "--offline", "--project", str(project)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "UV_NO_CONFIG": "1"},
    )


@needs_uv
def test_the_lock_file_matches_the_declared_dependencies() -> None:
    done = check_lock(ROOT)
    assert done.returncode == 0, f"uv.lock is stale: run `uv lock` (docs/github.md)\n{done.stderr}"


@needs_uv
def test_a_changed_dependency_makes_the_lock_check_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the test above relies on: a bound edited in pyproject.toml without `uv lock`
    makes the same check fail, though the locked version still satisfies the new bound.

    `uv lock --check` re-resolves whenever the declared requirements differ from the lock's,
    and offline a resolution reads registry metadata only from uv's cache, which is empty on a
    fresh machine. So the project here is a small one whose registry is a local directory
    holding one wheel, locked by uv in the test with an empty cache of its own: no network,
    nothing from the machine's cache."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _write_wheel(wheels, "helper", "1.2")
    project = tmp_path / "project"
    project.mkdir()
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        '[project]\nname = "app"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["helper>=1.0"]\n\n'
        f'[[tool.uv.index]]\nname = "local"\nurl = "{wheels.as_uri()}"\nformat = "flat"\n'
        'explicit = true\n\n[tool.uv.sources]\nhelper = { index = "local" }\n'
    )
    locked = subprocess.run(
        [UV or "uv", "lock", "--offline", "--project", str(project)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "UV_NO_CONFIG": "1"},
    )
    assert locked.returncode == 0, locked.stderr
    assert 'version = "1.2"' in (project / "uv.lock").read_text()
    fresh = check_lock(project)
    assert fresh.returncode == 0, fresh.stderr  # the check passes on a lock that is current

    pyproject.write_text(pyproject.read_text().replace('"helper>=1.0"', '"helper>=1.1"'))
    done = check_lock(project)
    assert done.returncode != 0
    assert "needs to be updated" in done.stderr, done.stderr


def _write_wheel(directory: Path, name: str, version: str) -> None:
    """A minimal pure-Python wheel: what a flat index needs to offer ``name==version``."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": "",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
    }
    with zipfile.ZipFile(directory / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)
        wheel.writestr(f"{info}/RECORD", "".join(f"{path},,\n" for path in files))


def test_the_bootstrap_uv_is_the_locked_uv_and_every_file_is_hashed() -> None:
    text = (ROOT / "uv-bootstrap.txt").read_text()
    requirements = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)
    assert requirements == [("uv", locked_versions()["uv"])]
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", text)) >= 5  # one per platform wheel


def test_the_install_step_checks_hashes_and_never_resolves() -> None:
    run = str(install_step()["run"])
    assert "--require-hashes" in run and "uv-bootstrap.txt" in run
    assert "sync --quiet --locked" in run  # fails instead of re-resolving a stale lock
    assert "--no-index" in run  # rio-ci itself is built from the action, nothing fetched
    assert "UV_NO_CONFIG=1" in run and 'UV_CACHE_DIR="$RUNNER_TEMP/' in run


@pytest.mark.slow
def test_the_install_step_lands_the_locked_versions_where_cells_cannot_write(
    tmp_path: Path,
) -> None:
    """The action's own install commands, run by bash as the composite runs them."""
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    done = install_as_the_action_does(runner_temp, action_copy(tmp_path / "action"))
    assert done.returncode == 0, done.stderr[-3000:]
    venv = runner_temp / "rio-ci-venv"
    assert (venv / "bin" / "rio-ci").read_bytes() == (ROOT / "bin" / "rio-ci").read_bytes()
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "rio_ci", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert listed.stdout.startswith("rio-ci ")
    freeze = subprocess.run(
        [UV or "uv", "pip", "freeze", "--python", str(venv / "bin" / "python")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    installed = dict(line.split("==", 1) for line in freeze.splitlines() if "==" in line)
    locked = {_normal(name): version for name, version in locked_versions().items()}
    assert "rio-ci @ file://" in freeze  # built from the action's own tree, not an index
    for name, version in installed.items():
        assert locked.get(_normal(name)) == version, (name, version)
    writable = [
        path
        for top in (venv, runner_temp / "rio-ci-uv")
        for path in top.rglob("*")
        if not path.is_symlink() and path.lstat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    ]
    assert writable == []


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_bounds() -> dict[str, str]:
    """pyproject.toml's runtime dependencies and their lower bounds."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    bounds = {}
    for requirement in project["dependencies"]:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)(?:,<[0-9.]+)?", requirement)
        assert found, f"{requirement!r}: every runtime dependency has a lower bound"
        bounds[_normal(found.group(1))] = found.group(2)
    return bounds


def test_every_lower_bound_is_the_one_the_design_notes_checked() -> None:
    """docs/design.md, "Declared versions are the versions used", names for each runtime
    dependency the release that first has what rio-ci calls; pyproject.toml must say the
    same (PyGithub 2.9 for ``create_dispatch(throw=True)``, uv 0.4.19 for ``--script``)."""
    design = (ROOT / "docs" / "design.md").read_text()
    section = design.split("## Declared versions are the versions used", 1)[1]
    table = {
        _normal(name): bound
        for name, bound in re.findall(r"^\| ([A-Za-z0-9_.-]+) \| ([0-9.]+) \|", section, re.M)
    }
    assert declared_bounds() == table
    assert table["pygithub"] == "2.9" and table["uv"] == "0.4.19"
