"""The ``rio-ci`` command (bin/rio-ci; docs/design.md, "The rio-ci command"): a shell script
that starts the Python beside it as ``python -I -m rio_ci``, so nothing on ``PYTHONPATH`` or in
the working directory runs before rio-ci's own code — not a ``sitecustomize``, not an
``encodings`` package, which Python imports while it starts, before any ``site`` hook — and
that runs nothing it would find on ``PATH``.

The fast tests copy the script into a virtual environment of the test's own
(``tests.kit.python_with``); the slow ones install the project for real, the ways people do,
and check that what lands in ``bin/`` is this script and starts isolated."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rio_ci import __version__
from tests.kit import ROOT, python_with

LAUNCHER = ROOT / "bin" / "rio-ci"
UV = shutil.which("uv", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
# Every way a planted program, module or package could run leaves a marker naming itself.
RAN = "import posix; posix.close(posix.open({marker!r}, posix.O_CREAT | posix.O_WRONLY, 0o644))\n"


def marked(folder: Path, name: str) -> str:
    return RAN.format(marker=str(folder / f"ran-{name}"))


def markers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("ran-"))


def installed(python: Path) -> Path:
    """The launcher copied beside ``python`` (a venv's ``bin``), as an installer copies it."""
    command = python.with_name("rio-ci")
    shutil.copy(LAUNCHER, command)
    command.chmod(0o755)
    return command


def plants(folder: Path, found: Path) -> Path:
    """A folder of what a Cell could write into a checkout that ``PYTHONPATH`` names: a
    ``sitecustomize``, an ``encodings`` package (the standard one, with a marker first) and a
    ``rio_ci`` package. Each writes a marker into ``found`` when Python imports it."""
    import encodings

    folder.mkdir()
    (folder / "sitecustomize.py").write_text(marked(found, "sitecustomize"))
    shutil.copytree(Path(encodings.__file__).parent, folder / "encodings")
    init = folder / "encodings" / "__init__.py"
    init.write_text(marked(found, "encodings") + init.read_text())
    (folder / "rio_ci").mkdir()
    (folder / "rio_ci" / "__init__.py").write_text(marked(found, "rio_ci"))
    (folder / "rio_ci" / "__main__.py").write_text(marked(found, "rio_ci_main"))
    return folder


def run(
    argv: list[str], env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def hostile_env(planted: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "RIO_"))}
    env.update(PYTHONPATH=str(planted), **extra)
    return env


def test_the_rio_ci_command_is_the_launcher_not_an_entry_point() -> None:
    """An entry point's wrapper is a Python script, whose ``#!python`` line an installer
    rewrites to the bare interpreter, dropping any flag; so the command is a script-file."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "scripts" not in project["project"]
    assert project["tool"]["setuptools"]["script-files"] == ["bin/rio-ci"]
    assert LAUNCHER.read_text().startswith("#!/bin/sh\n")
    assert os.access(LAUNCHER, os.X_OK)


def test_the_command_starts_python_isolated_from_its_first_instruction(tmp_path: Path) -> None:
    found = tmp_path / "found"
    found.mkdir()
    planted = plants(tmp_path / "checkout", found)
    command = installed(python_with(tmp_path / "venv"))
    env = hostile_env(planted)

    done = run([str(command), "--version"], env, cwd=planted)  # rio_ci/ in the working directory

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"rio-ci {__version__}"
    assert markers(found) == []
    # The plants are live: the same interpreter started without -I runs them all.
    plain = run([str(command.with_name("python")), "-m", "rio_ci", "--version"], env, planted)
    assert markers(found) == ["ran-encodings", "ran-rio_ci", "ran-rio_ci_main", "ran-sitecustomize"]
    assert plain.returncode == 0


@pytest.mark.parametrize("how", ["absolute link", "relative link", "link to a link", "./rio-ci"])
def test_the_command_finds_its_python_however_it_is_reached(tmp_path: Path, how: str) -> None:
    """pipx and ``uv tool`` link the command into ``~/.local/bin``; a PATH entry may be
    relative. The Python used is the one beside the real script, never one beside a link."""
    found = tmp_path / "found"
    found.mkdir()
    command = installed(python_with(tmp_path / "venv"))
    links = tmp_path / "links"
    links.mkdir()
    decoy = links / "python"  # what a link's own folder may hold
    decoy.write_text(f"#!/bin/sh\n: > {found / 'ran-decoy'}\n")
    decoy.chmod(0o755)
    argv, cwd = [str(links / "rio-ci"), "--version"], None
    if how == "absolute link":
        (links / "rio-ci").symlink_to(command)
    elif how == "relative link":
        (links / "rio-ci").symlink_to(os.path.relpath(command, links))
    elif how == "link to a link":
        (links / "middle").symlink_to(command)
        (links / "rio-ci").symlink_to("middle")
    else:
        argv, cwd = ["./rio-ci", "--version"], command.parent

    done = run(argv, hostile_env(tmp_path), cwd=cwd)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"rio-ci {__version__}"
    assert markers(found) == []


def test_the_command_runs_nothing_it_would_find_on_path(tmp_path: Path) -> None:
    """Reached through a link (so it reads the link) with ``PATH`` naming only a folder of
    planted programs: the shell's builtins and readlink's absolute path do all the work."""
    found = tmp_path / "found"
    found.mkdir()
    command = installed(python_with(tmp_path / "venv"))
    planted = tmp_path / "planted"
    planted.mkdir()
    names = ["readlink", "dirname", "basename", "python", "python3", "sh", "env", "test", "["]
    for name in [*names, "printf", "echo", "cat", "realpath"]:
        program = planted / name
        program.write_text(f"#!/bin/sh\n: > '{found}/ran-{name}'\n")
        program.chmod(0o755)
    (tmp_path / "rio-ci").symlink_to(command)

    done = run([str(tmp_path / "rio-ci"), "--version"], {"PATH": str(planted)})

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"rio-ci {__version__}"
    assert markers(found) == []


def test_without_a_python_beside_it_the_command_says_so_in_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    command = installed(folder / "python")  # which does not exist
    done = run([str(command), "--version"], {"PATH": os.environ["PATH"]})
    assert done.returncode == 127
    assert done.stdout == ""
    assert done.stderr == (
        f"rio-ci: no Python beside this command ({folder}/python): install rio-ci into a "
        "virtual environment, or run python3 -I -m rio_ci\n"
    )


# --- the ways rio-ci is installed ------------------------------------------------------------


def project_copy(tmp_path: Path) -> Path:
    """What a source distribution holds, copied: builds write into the tree they build."""
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "rio_ci", copy / "rio_ci", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "bin", copy / "bin")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    return copy


@pytest.mark.slow
@pytest.mark.parametrize("how", ["pip install .", "pip install -e .", "a wheel, by uv"])
def test_every_install_lands_the_launcher_and_it_starts_isolated(tmp_path: Path, how: str) -> None:
    """pip, pip's editable install and uv (the action's installer) copy the script as it is;
    the dependencies come from this venv (``--no-deps``), rio-ci from the install."""
    project = project_copy(tmp_path)
    python = python_with(tmp_path / "venv", checkout=False)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
    if how == "pip install .":
        done = run([*pip, str(project)], dict(os.environ))
    elif how == "pip install -e .":
        done = run([*pip, "-e", str(project)], dict(os.environ))
    else:
        if UV is None:
            pytest.skip("uv is not installed (rio-ci depends on it)")
        wheels = tmp_path / "wheels"
        built = run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "-w",
                str(wheels),
                str(project),
            ],
            dict(os.environ),
        )
        assert built.returncode == 0, built.stderr[-3000:]
        (wheel,) = wheels.glob("rio_ci-*.whl")
        install = [UV, "pip", "install", "-q", "--no-deps", "--python", str(python), str(wheel)]
        done = run(install, {**os.environ, "UV_NO_CONFIG": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    command = python.with_name("rio-ci")
    assert command.read_bytes() == LAUNCHER.read_bytes()
    found = tmp_path / "found"
    found.mkdir()
    planted = plants(tmp_path / "checkout", found)
    where = "import rio_ci, sys; sys.stdout.write(rio_ci.__file__)"
    origin = run([str(python), "-I", "-c", where], dict(os.environ)).stdout
    assert Path(origin).is_relative_to(project if how == "pip install -e ." else python.parents[1])

    started = run([str(command), "--version"], hostile_env(planted), cwd=planted)

    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == f"rio-ci {__version__}"
    assert markers(found) == []
