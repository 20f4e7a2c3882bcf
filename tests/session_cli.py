"""Drive a Session through the ``rio-ci`` command line, the way a user or a script would.

Used by the Owner tests (test_owner*.py, test_controls.py, test_timers.py). Every call is a
real ``python -m rio_ci`` process on a real SQLite file; Cells really run (code Cells
with ``uv run --script``). Cells that must leave a trace append to an external side-effect
log (``CliSession.log``): one line per write, ``<unix time> <pid> <words...>``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import textwrap
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.kit import CliResult, Patch, code_cell, run_cli, spawn_cli

TOKEN_VAR = "RIO_WORKER_TOKEN"


def gone(pid: int) -> bool:
    """Dead for our purposes: no such process, or a zombie nobody reaped yet."""
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


class CliSession:
    """One Session file in ``root`` (``s.db``), its working directory ``root/cwd`` and a
    side-effect log ``root/effects.log`` outside the working directory."""

    def __init__(self, root: Path):
        self.root = root
        self.db = root / "s.db"
        self.cwd = root / "cwd"
        self.log = root / "effects.log"
        self.procs: list[subprocess.Popen[str]] = []
        self.session_id = ""
        self._patches = 0

    @classmethod
    def create(
        cls,
        root: Path,
        *,
        limits: Iterable[str] = (),
        validators: Iterable[str] = (),
        goal: str = "exercise the Owner",
        options: Iterable[str] = (),
    ) -> CliSession:
        """``options``: more of ``rio-ci new``'s (``--network``, ``--allow-host``)."""
        root.mkdir(parents=True, exist_ok=True)
        sess = cls(root)
        sess.cwd.mkdir()
        args = ["new", str(sess.db), "--goal", goal, "--cwd", str(sess.cwd)]
        for item in limits:
            args += ["--limit", item]
        for item in validators:
            args += ["--validator", item]
        args += list(options)
        sess.session_id = sess.json(*args)["session"]
        return sess

    # --- running commands ---------------------------------------------------------------

    def run(
        self,
        *args: str,
        code: int | None = 0,
        env: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> CliResult:
        done = run_cli(*args, env=env, timeout=timeout, cwd=self.root)
        if code is not None:
            assert done.returncode == code, (
                f"rio-ci {' '.join(args)} exited {done.returncode}, expected {code}\n"
                f"stdout: {done.stdout}\nstderr: {done.stderr}"
            )
        return done

    def json(
        self,
        *args: str,
        code: int | None = 0,
        env: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> Any:
        out = self.run(*args, code=code, env=env, timeout=timeout).stdout.strip()
        return json.loads(out.splitlines()[-1])

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start ``rio-ci ARGS`` in the background (killed at cleanup if still running)."""
        proc = spawn_cli(*args, env=env, cwd=self.root)
        self.procs.append(proc)
        return proc

    def start_work(self, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return self.start("work", str(self.db), env=env)

    # --- the commands -------------------------------------------------------------------

    def turn(self, code: int = 0) -> dict[str, Any]:
        result: dict[str, Any] = self.json("turn", str(self.db), code=code)
        return result

    def step(
        self,
        turn_id: str,
        ops: list[dict[str, Any]],
        *,
        code: int | None = 0,
        env: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        self._patches += 1
        path = self.root / f"patch-{self._patches}.json"
        path.write_text(json.dumps({"patch": ops}))
        done = self.run("step", str(self.db), turn_id, str(path), code=code, env=env)
        lines = done.stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines else {}

    def propose(
        self,
        *cells: dict[str, Any],
        turn: dict[str, Any] | None = None,
        code: int | None = 0,
        env: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Add ``cells`` (ids from ``next_cell_id``) in ``turn`` (default: a new Turn)."""
        turn = turn or self.turn()
        return self.step(
            turn["turn_id"], Patch(turn["state"]).add(*cells).build(), code=code, env=env
        )

    def work(
        self,
        *,
        code: int | None = 0,
        env: dict[str, str] | None = None,
        timeout: float = 120,
        args: Iterable[str] = (),
    ) -> dict[str, Any]:
        result: dict[str, Any] = self.json(
            "work", str(self.db), *args, code=code, env=env, timeout=timeout
        )
        return result

    def state(self) -> dict[str, Any]:
        result: dict[str, Any] = self.json("state", str(self.db))
        return result

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        out = self.run("events", str(self.db)).stdout
        events = [json.loads(line) for line in out.splitlines() if line.strip()]
        return [e for e in events if kind is None or e["kind"] == kind]

    def receive(self, message_id: str, kind: str, payload: Any, code: int = 0) -> Any:
        return self.json("receive", str(self.db), message_id, kind, json.dumps(payload), code=code)

    # --- reading ------------------------------------------------------------------------

    def runtime(self, cell_id: int, state: dict[str, Any] | None = None) -> dict[str, Any]:
        cells: dict[str, Any] = (state or self.state())["runtime"]["cells"]
        return dict(cells[str(cell_id)])

    def result(self, cell_id: int) -> dict[str, Any]:
        """The committed result of ``cell_id``'s Execution (from the Journal)."""
        finished = [e for e in self.events("execution_finished") if e["cell_id"] == cell_id]
        assert len(finished) == 1, f"cell {cell_id} has {len(finished)} results"
        result: dict[str, Any] = finished[0]["result"]
        return result

    def lines(self) -> list[list[str]]:
        """The side-effect log, split into words: ``[time, pid, words...]`` per line."""
        if not self.log.exists():
            return []
        return [line.split() for line in self.log.read_text().splitlines() if line.strip()]

    def token_holders(self) -> list[int]:
        """Live processes carrying one of this Session's Worker tokens."""
        prefix = f"rio-{self.session_id}-"
        found = []
        for proc in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error):
                if (
                    proc.environ().get(TOKEN_VAR, "").startswith(prefix)
                    and proc.status() != psutil.STATUS_ZOMBIE
                ):
                    found.append(proc.pid)
        return found

    def cleanup(self) -> None:
        """Kill what this test started and left behind: background rio-ci processes, then
        every process still carrying this Session's Worker token (all started by us)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=10)
        for pid in self.token_holders():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def log_prelude(log: Path) -> str:
    """Python source defining ``log(*words)``, appending one line to the side-effect log."""
    return textwrap.dedent(f"""\
        import os as _os, time as _time
        def log(*words):
            line = " ".join(str(w) for w in (repr(_time.time()), _os.getpid(), *words))
            fd = _os.open({str(log)!r}, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o644)
            try:
                _os.write(fd, (line + "\\n").encode())
            finally:
                _os.close(fd)
        """)


def logged(log: Path, body: str) -> dict[str, Any]:
    """A code Cell whose ``body`` may call ``log(...)``."""
    return code_cell(log_prelude(log) + textwrap.dedent(body).lstrip("\n"))


New = Callable[..., CliSession]


@pytest.fixture
def new(tmp_path: Path) -> Iterator[New]:
    """Make CLI Sessions in ``tmp_path``; their leftover processes are killed afterwards."""
    made: list[CliSession] = []

    def make(**options: Any) -> CliSession:
        sess = CliSession.create(tmp_path / f"s{len(made)}", **options)
        made.append(sess)
        return sess

    yield make
    for sess in made:
        sess.cleanup()
