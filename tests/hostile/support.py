"""Shared tools for the hostile tests: strict reading of rio-ci's stdout, directory
listings, and running rio-ci as a user that is not root (a read-only file means nothing to
root, and neither does a process that is not dumpable)."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.kit import ROOT, cli_env, python_with

NOBODY = 65534


def strict(line: str) -> Any:
    """``line`` as strict JSON: NaN, Infinity and -Infinity are refused."""

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} in rio-ci's output")

    return json.loads(line, parse_constant=refuse)


def one_error(
    done: subprocess.CompletedProcess[bytes] | subprocess.CompletedProcess[str], code: int
) -> str:
    """The reason of a failure that printed exactly one strict JSON line ``{"error"}`` (or
    ``{"rejected"}``), exited ``code`` and printed no traceback; stdout must be UTF-8."""
    stdout = done.stdout if isinstance(done.stdout, str) else done.stdout.decode("utf-8")
    stderr = done.stderr if isinstance(done.stderr, str) else done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in stderr, stderr
    lines = stdout.splitlines()
    assert len(lines) == 1, stdout
    value = strict(lines[0])
    assert done.returncode == code, (done.returncode, stdout, stderr)
    reason = value.get("error") or value.get("rejected")
    assert isinstance(reason, str) and reason and "\n" not in reason, value
    return reason


def listing(*folders: Path) -> dict[str, list[str]]:
    """Every name in ``folders`` (not recursive): what a command must leave unchanged."""
    return {str(f): sorted(os.listdir(f)) for f in folders}


def rio(
    *args: str | bytes,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    input: bytes | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[bytes]:
    """``python -m rio_ci ARGS`` with bytes in and out (arguments may be raw bytes)."""
    return subprocess.run(
        [sys.executable, "-m", "rio_ci", *args],
        env=env or cli_env(),
        cwd=cwd,
        input=input,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


# --- not root ---------------------------------------------------------------------------------


@functools.cache
def _unprivileged_python() -> tuple[list[str], str] | None:
    """(command prefix, interpreter) that runs Python as a user who is not root, with this
    checkout's rio_ci and its dependencies importable; None when there is no way.

    rio-ci re-executes itself isolated (``python -I``: no ``PYTHONPATH``), so the interpreter
    is a virtual environment that imports them by itself (``tests.kit.python_with``), in a
    folder every user may read, made from an interpreter every user may run: this one may
    live where nobody can reach it (/root), so the system's is tried too."""
    if os.geteuid() != 0:
        return [], sys.executable
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    probe = (
        "import os, sys; os.execv(sys.executable, "
        "[sys.executable, '-I', '-c', 'import rio_ci, psutil, yaml'])"
    )
    for base in dict.fromkeys((sys.executable, shutil.which("python3"), "/usr/bin/python3")):
        if not base or not os.access(base, os.X_OK):
            continue
        folder = Path(tempfile.mkdtemp(prefix="rio-python-"))
        folder.chmod(0o755)
        atexit.register(shutil.rmtree, folder, True)
        python = str(python_with(folder / "venv", base=base))
        probed = subprocess.run(
            [*prefix, python, "-c", probe], env=unprivileged_env(), capture_output=True, check=False
        )
        if probed.returncode == 0:
            return prefix, python
    return None


def everyone_python() -> str:
    """An interpreter every user may run that imports this checkout's rio_ci and its
    dependencies, also when started isolated (``-I``) as rio-ci re-executes itself."""
    found = _unprivileged_python()
    if found is None:
        pytest.skip("no interpreter every user may run imports this checkout's rio_ci")
    return found[1]


def unprivileged_env(**extra: str) -> dict[str, str]:
    site = [p for p in sys.path if p.endswith("site-packages")]
    env = cli_env(**extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *site])
    env["HOME"] = tempfile.gettempdir()
    return env


def unprivileged_rio(
    *args: str, env: dict[str, str], cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[bytes]:
    found = _unprivileged_python()
    assert found is not None
    prefix, python = found
    return subprocess.run(
        [*prefix, python, "-m", "rio_ci", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def unprivileged_command() -> tuple[list[str], str]:
    """(prefix, interpreter) that run Python as a user who is not root (see
    ``unprivileged_rio``), for a command of a test's own."""
    found = _unprivileged_python()
    assert found is not None
    return found


def unprivileged_python() -> str:
    """The interpreter the unprivileged rio-ci runs with (Cells may use it too)."""
    found = _unprivileged_python()
    assert found is not None
    return found[1]


@contextmanager
def shared_folder() -> Iterator[Path]:
    """A folder the unprivileged user owns (tmp_path's parents are root's alone). On the
    same file system as the other tests' folders: never a tmpfs."""
    if _unprivileged_python() is None:
        pytest.skip("no way to run rio-ci as a user that is not root here")
    folder = Path(tempfile.mkdtemp(prefix="rio-hostile-"))
    try:
        folder.chmod(0o755)
        if os.geteuid() == 0:
            os.chown(folder, NOBODY, NOBODY)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
