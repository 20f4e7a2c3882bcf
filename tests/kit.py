"""The helpers every kind of test shares, in one place: the environment of a ``rio-ci``
subprocess and the one way to run it (``run_cli``, ``spawn_cli``), the poller, the Cells
(``code_cell``, ``cmd_cell``, ``note_cell``) and a step patch with its ids completed
(``Patch``, ``add``), and the events of a Session file.

Imported as ``tests.kit`` (also from the fault driver and scripts run with this checkout on
``PYTHONPATH``), so each helper exists once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

# Variables no rio-ci subprocess of a test inherits: RIO_* (a crash point, a Cell's context, a
# model or config of the developer's shell) and whatever could be a real credential or a real
# runner (ANTHROPIC_*, GITHUB_*, RUNNER_*). A test that needs one passes it explicitly.
DROPPED = ("RIO_", "ANTHROPIC_", "GITHUB_", "RUNNER_")


def cli_env(*, checkout: bool = True, **extra: str) -> dict[str, str]:
    """This process's environment without the ``DROPPED`` variables, plus ``extra``.

    With ``checkout`` (the default) it runs this checkout's rio_ci: the repository on
    ``PYTHONPATH``, this venv's ``bin`` first on ``PATH``, and the local fakes on 127.0.0.1
    reached without a proxy. ``checkout=False`` only cleans: for a job that installs rio-ci
    by itself (the act end-to-end tests), where nothing may point at this checkout.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED)}
    if checkout:
        env["PYTHONPATH"] = str(ROOT)
        env["PATH"] = os.pathsep.join(filter(None, [str(VENV_BIN), env.get("PATH")]))
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


# --- the CLI -------------------------------------------------------------------------------

RIO = [sys.executable, "-m", "rio_ci"]  # this checkout's rio-ci (a prefix of its own: setpriv …)


class CliResult(subprocess.CompletedProcess[str]):
    """What one ``rio-ci`` run produced. Unpacks as ``code, out, err``.

    ``out`` is the JSON printed: one value for one line, a list for several (use ``lines``
    when the count varies, as with ``events``), None when stdout was empty or not JSON.
    """

    @property
    def code(self) -> int:
        return self.returncode

    @property
    def err(self) -> str:
        return str(self.stderr)

    @property
    def lines(self) -> list[Any]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]

    @property
    def out(self) -> Any:
        try:
            parsed = self.lines
        except json.JSONDecodeError:
            return None
        return parsed[0] if len(parsed) == 1 else (parsed or None)

    @property
    def last(self) -> Any:
        """The last line's JSON (a command's status line)."""
        return json.loads(self.stdout.strip().splitlines()[-1])

    def __iter__(self) -> Iterator[Any]:
        return iter((self.code, self.out, self.err))


def run_cli(
    *args: Any,
    input: Any = None,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> CliResult:
    """Run ``python -m rio_ci ARGS`` (this checkout's, in ``cli_env()`` unless ``env``) as a
    subprocess. ``input`` that is not a string is sent as JSON (``step DB TURN -``)."""
    text = input if input is None or isinstance(input, str) else json.dumps(input)
    done = subprocess.run(
        [*RIO, *map(str, args)],
        input=text,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env or cli_env(),
        timeout=timeout,
        check=False,
    )
    return CliResult(done.args, done.returncode, done.stdout, done.stderr)


def spawn_cli(
    *args: Any, cwd: str | Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start ``python -m rio_ci ARGS`` in the background, its output piped."""
    return subprocess.Popen(
        [*RIO, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env or cli_env(),
    )


def python_with(
    directory: Path, *, base: str | None = None, start: str = "", checkout: bool = True
) -> Path:
    """The interpreter of a virtual environment (no pip) made in ``directory`` from ``base``
    (this interpreter's by default), which imports this checkout's rio_ci (unless not
    ``checkout``: a test installs rio-ci into it) and this venv's packages also when started
    isolated (``-I``, as rio-ci starts every Python of its own): a ``.pth`` file in its
    site-packages adds them. ``start`` is code it runs at every start before anything else
    (what a ``sitecustomize`` would be without ``-I``)."""
    command = [base or sys.executable, "-m", "venv", "--without-pip", str(directory)]
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    python = directory / "bin" / "python"
    found = subprocess.run(
        [str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    site = Path(found.stdout.strip())
    packages = [p for p in sys.path if p.endswith("site-packages")]
    lines = [str(ROOT), *packages] if checkout else packages
    if start:
        (site / "rio_test_start.py").write_text(start)
        lines.append("import rio_test_start")
    (site / "rio-test.pth").write_text("".join(f"{line}\n" for line in dict.fromkeys(lines)))
    return python


T = TypeVar("T")


def until(
    predicate: Callable[[], T],
    timeout: float,
    what: str = "",
    *,
    fail: bool = True,
    every: float = 0.02,
) -> T:
    """Poll ``predicate()`` until it is truthy and return its value.

    After ``timeout`` seconds it fails the test with an assertion naming ``what`` (or the
    predicate); with ``fail=False`` it returns the last, falsy value instead, for a test to
    which "not yet" is an answer too.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            assert not fail, f"timed out after {timeout:g} s waiting for {what or predicate}"
            return value
        time.sleep(every)


# --- Cells and patches ---------------------------------------------------------------------

PEP723 = "# /// script\n# dependencies = []\n# ///\n"


def code_cell(body: str = "print('hello')\n", header: str = PEP723) -> dict[str, Any]:
    """A code Cell: the PEP 723 header (no dependencies) and ``body`` (dedented)."""
    return {
        "kind": "code",
        "runtime": "python",
        "source": header + textwrap.dedent(body).lstrip("\n"),
    }


def cmd_cell(*argv: str) -> dict[str, Any]:
    """A cmd Cell (``true`` when no argv is given)."""
    return {"kind": "cmd", "argv": list(argv or ("true",))}


def note_cell(text: str = "a note", **extra: Any) -> dict[str, Any]:
    return {"kind": "note", "text": text, **extra}


def add(cell: dict[str, Any]) -> dict[str, Any]:
    """The patch operation that appends ``cell`` (a scripted model completes its ids)."""
    return {"op": "add", "path": "/cells/-", "value": cell}


class Patch:
    """A step patch against a State: the ``/revision`` test first, then operations applied
    in order. New Cells get ``id`` (``runtime.next_cell_id``, +1 per version) and
    ``previous_id`` (null on add, the replaced id on replace) unless the Cell sets them."""

    def __init__(self, state: dict[str, Any]):
        self.ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/revision", "value": state["revision"]}
        ]
        self.next_id: int = state["runtime"]["next_cell_id"]
        self._ids = [c["id"] for c in state["cells"]]  # ids in array order, as ops apply

    @classmethod
    def at(cls, revision: int, next_cell_id: int) -> Patch:
        """A patch for a State known only by its revision and next id (a scripted model's
        reply written ahead of time); only additions know their ids then."""
        return cls({"revision": revision, "runtime": {"next_cell_id": next_cell_id}, "cells": []})

    def test(self, path: str, value: Any) -> Patch:
        self.ops.append({"op": "test", "path": path, "value": value})
        return self

    def add(self, *cells: dict[str, Any]) -> Patch:
        for each in cells:
            cell = {"id": self.next_id, "previous_id": None, **each}
            self.ops.append({"op": "add", "path": "/cells/-", "value": cell})
            self._ids.append(cell["id"])
            self.next_id += 1
        return self

    def replace(self, index: int, cell: dict[str, Any]) -> Patch:
        cell = {"id": self.next_id, "previous_id": self._ids[index], **cell}
        self.ops.append({"op": "replace", "path": f"/cells/{index}", "value": cell})
        self._ids[index] = cell["id"]
        self.next_id += 1
        return self

    def remove(self, index: int) -> Patch:
        self.ops.append({"op": "remove", "path": f"/cells/{index}"})
        del self._ids[index]
        return self

    def op(self, **raw: Any) -> Patch:
        """Append any operation as written."""
        self.ops.append(raw)
        return self

    def build(self) -> list[dict[str, Any]]:
        return [dict(op) for op in self.ops]


def events(db: str | Path) -> list[dict[str, Any]]:
    """Every event of the Session file ``db``, as rio_ci reads them."""
    from rio_ci.session.session import Session

    session = Session.open(Path(db))
    try:
        return list(session.events())
    finally:
        session.close()
