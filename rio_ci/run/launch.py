"""Launching one Execution (docs/sessions.md) and running validators under the same supervision.

``Launch.start`` asks the Session to commit ``started`` before any process exists, spawns the
gated Worker, has its identity committed, and only then releases it. A crash anywhere in
between leaves a ``started`` Execution that recovery turns into an UnknownExecution.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rio_ci.core import events as ev
from rio_ci.core.entities import Cell, Execution
from rio_ci.faults.crashpoints import crash_point
from rio_ci.run.capture import Capture, Watch, run_to_end
from rio_ci.run.confinement.confinement import Confinement
from rio_ci.run.confinement.settings import ConfinementSettings
from rio_ci.run.environment import redacted_values, worker_env
from rio_ci.run.worker import Worker
from rio_ci.session.session import Session

# Called with (cell id, token) after ``started`` is committed and before the Worker is
# spawned: a place to make the launch durable elsewhere too (GitHub: a write-ahead record
# pushed to the repository). If it raises, nothing is spawned and the Execution stays
# ``started``, to be recovered as an UnknownExecution.
BeforeSpawn = Callable[[int, str], None]


class Launch:
    def __init__(
        self,
        session: Session,
        before_spawn: BeforeSpawn | None = None,
        confinement: Confinement | None = None,
    ):
        self.session = session
        self.before_spawn = before_spawn
        self.confinement = (
            confinement if confinement is not None else Confinement(ConfinementSettings(), print)
        )
        self.secrets = redacted_values(session)
        self._env: dict[str, str] | None = None
        self._found: dict[tuple[str, str | None], str] = {}  # (program, PATH) -> its path

    def env(self, cell_id: int | None) -> dict[str, str]:
        """A Worker's environment (``worker_env``). Built once per Launch, after the Cell
        folder's in-Cell modules were copied (``Confinement.prepare``): filtering the environment
        and comparing those files took more than the rest of a launch together. The
        Owner's environment does not change while it runs; a Cell that damages the modules
        breaks only its own imports (under a Cell user it cannot)."""
        self.confinement.prepare(self.session)
        if self._env is None:
            assert self.confinement.folder is not None  # made by prepare()
            self._env = self.confinement.environment(
                worker_env(self.session, None, self.confinement.folder.pylib)
            )
        return (
            {**self._env, "RIO_CELL_ID": str(cell_id)} if cell_id is not None else dict(self._env)
        )

    def token(self, what: str) -> str:
        return f"rio-{self.session.proj.session['id']}-{what}-{uuid.uuid4().hex[:12]}"

    def start(self, ex: Execution) -> Capture | None:
        """Launch one queued Execution. Returns its Capture, or None when nothing runs: it
        finished at once (a launch that failed before the gate opened: known not to have
        run), or it stayed queued because a Control was committed meanwhile."""
        session, cell, cell_id = self.session, ex["cell"], ex["cell_id"]
        token = self.token(str(cell_id))
        env = self.env(cell_id)  # prepares the Cell user's side before anything is committed
        if not session.authorize_launch(cell_id, token):
            return None
        if self.before_spawn is not None:
            self.before_spawn(cell_id, token)
        cwd = session.proj.session["cwd"]
        argv, problem = self._argv(cell, cwd, env)
        worker = None
        if problem is None:
            try:
                worker = Worker.spawn(argv, cwd, env, token, self.confinement.spawn())
            except OSError as exc:
                problem = f"could not start the Worker: {exc}"
        if worker is None:
            session.record_result(cell_id, ev.launch_failed(cell_id, problem or "unknown"))
            return None
        crash_point("worker_spawned")
        session.register_worker(cell_id, worker.identity.to_dict())
        crash_point("worker_before_release")
        self.confinement.begin(cell_id)
        worker.release()
        crash_point("script_running")
        watch = Watch(worker, session.limits.output_bytes, self.secrets)
        return Capture(session, cell_id, watch, lambda: self.confinement.end(cell_id))

    def _argv(self, cell: Cell, cwd: str, env: dict[str, str]) -> tuple[list[str], str | None]:
        """The command to run, or why it cannot run (known before anything starts)."""
        if not Path(cwd).is_dir():
            return [], f"working directory {cwd} does not exist"
        if cell["kind"] == "code":
            # One path for every code Cell of this Owner (the Cell folder's): uv keys its
            # cached script environment by path, so a new path per Cell would build a new
            # one each time.
            folder = self.confinement.folder
            assert folder is not None  # made by prepare(), in env()
            script = folder.write_script(cell["source"])
            return [folder.uv, "run", "--quiet", "--script", str(script)], None
        argv = list(cell["argv"])
        if not self._found_program(argv[0], env.get("PATH")) and not (
            "/" in argv[0] and os.access(Path(cwd, argv[0]), os.X_OK)
        ):
            exists = "/" in argv[0] and Path(cwd, argv[0]).is_file()
            return argv, f"program {'not executable' if exists else 'not found'}: {argv[0]}"
        return argv, None

    def _found_program(self, program: str, path: str | None) -> bool:
        """Whether ``program`` is on ``path``. A path found before is checked again with one
        ``access`` (searching PATH took a tenth of a ``cmd`` launch)."""
        known = self._found.get((program, path))
        if known is not None and os.access(known, os.X_OK):
            return True
        found = shutil.which(program, path=path)
        if found is not None:
            self._found[(program, path)] = found
        return found is not None

    def validator(
        self,
        note_id: int,
        index: int,
        argv: list[str],
        interrupted: threading.Event,
        stop_at: float | None = None,
    ) -> dict[str, Any]:
        """Run one validator under the same supervision; commit and return its result
        (``stop_at``: see ``run_to_end``)."""
        session = self.session
        watch = None
        result: dict[str, Any]
        try:
            worker = Worker.spawn(
                argv,
                session.proj.session["cwd"],
                self.env(None),
                self.token("validator"),
                self.confinement.spawn(),
            )
        except OSError as exc:
            result = {"type": "error", "exit_code": None, "reason": f"launch_failed: {exc}"}
        else:
            tag = f"validator {index}"
            self.confinement.begin(tag)
            worker.release()
            watch = Watch(worker, session.limits.output_bytes, self.secrets)
            end = run_to_end(watch, session.limits.execution_seconds, interrupted, stop_at)
            egress, refused = self.confinement.end(tag)
            if egress:
                session.record_egress(egress)
            result = _validator_result(end) | ({"refused_hosts": refused} if refused else {})
        streams = watch.streams if watch else {}
        session.record_validator(
            {
                "note_id": note_id,
                "index": index,
                "argv": argv,
                "result": result,
                "stdout": streams["stdout"].text() if streams else "",
                "stderr": streams["stderr"].text() if streams else "",
                "truncated": any(r.elided for r in streams.values()),
            }
        )
        return result


def _validator_result(end: int | str) -> dict[str, Any]:
    if isinstance(end, str):
        return {"type": "error", "exit_code": None, "reason": end}
    return {"type": "success" if end == 0 else "error", "exit_code": end}
