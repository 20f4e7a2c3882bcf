"""Launching and watching one Worker: the launch protocol of SPEC §5 and output capture.

``Launch.start`` commits ``started`` before any process exists, spawns the gated Worker,
commits its identity, and only then releases it. ``Capture`` commits output at least every
``flush_seconds`` (nothing is shown before it is committed), keeps a prefix of
``output_bytes`` per stream with an explicit truncation flag, and commits the result with
its Inbox notice in one transaction.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import os
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from rio_ci.crashpoints import crash_point
from rio_ci.credentials import worker_environment
from rio_ci.errors import RecoveryError
from rio_ci.process import TOKEN_VAR, Worker
from rio_ci.session import Session

EXIT_GRACE = 1.0  # seconds to wait for pipes held by leftovers after the script exited


def worker_env(session: Session, cell_id: int | None) -> dict[str, str]:
    env = worker_environment(os.environ, session.proj.session.get("pass_env", []))
    shim = str(api_shim(session))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [shim, env.get("PYTHONPATH")]))
    env.update(RIO_SESSION_DB=str(session.journal.path), RIO_PYTHON=sys.executable)
    if cell_id is not None:
        env["RIO_CELL_ID"] = str(cell_id)
    return env


def scratch_dir(session: Session) -> Path:
    path = session.journal.path.parent / f"{session.journal.path.name}.d"
    path.mkdir(exist_ok=True)
    return path


def api_shim(session: Session) -> Path:
    """A folder holding only ``rio_ci/api.py`` and ``rio_ci/tools/``, so a Cell can import
    them and nothing else."""
    shim = scratch_dir(session) / "pylib"
    package = shim / "rio_ci"
    (package / "tools").mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    here = Path(__file__).parent
    for path in [here / "api.py", *sorted((here / "tools").glob("*.py"))]:
        source, copy = path.read_text(), package / path.relative_to(here)
        if not copy.exists() or copy.read_text() != source:
            copy.write_text(source)
    return shim


@functools.cache  # finding it searches several install locations (~0.3 ms a launch)
def uv_binary() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


def unknown(cell_id: int, reason: str, *, worker_stopped: bool) -> dict[str, Any]:
    return {"type": "UnknownExecution", "cell_id": cell_id, "reason": reason,
            "worker_stopped": worker_stopped}


def finish(w: Any, cell_id: int, result: dict[str, Any]) -> int:
    """Commit a result and its Inbox notice as one event (inside the caller's transaction).
    An UnknownExecution's evidence_refs name that very event."""
    seq = int(w.next_seq())
    if result["type"] == "UnknownExecution":
        result = {**result, "evidence_refs": [f"session:event:{seq}"]}
    w.append("execution_finished", {"cell_id": cell_id, "result": result, "message": {
        "id": f"execution:{cell_id}", "kind": "execution", "payload": result}}, ref=cell_id)
    return seq


def unresolved_summary(ex: dict[str, Any]) -> dict[str, Any]:
    return {"cell_id": ex["cell_id"], "reason": ex["result"].get("reason"),
            "evidence_refs": ex["result"].get("evidence_refs", [])}


def stop_session_leftovers(session_id: str) -> list[int]:
    """Stop every process still carrying one of this Session's Worker tokens (validators,
    Workers that were spawned but never registered). Raises RecoveryError if any survive."""
    prefix = f"rio-{session_id}-"
    found = []
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get(TOKEN_VAR, "").startswith(prefix):
                found.append(proc)
    for proc in found:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    _, alive = psutil.wait_procs(found, timeout=5)
    alive = [p for p in alive if _running(p)]
    if alive:
        raise RecoveryError(f"processes {[p.pid for p in alive]} of this Session survived "
                            "SIGKILL; cannot prove the old Workers stopped")
    return [p.pid for p in found]


def _running(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


class Prefix:
    """The retained prefix of one stream, decoded as UTF-8: at most ``limit`` bytes once
    encoded again. A character cut by the limit is dropped, not replaced, and bytes that are
    not UTF-8 count as the replacement characters (3 bytes each) they become."""

    def __init__(self, limit: int):
        self.room = limit  # UTF-8 bytes of text still allowed
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.pending = ""
        self.dropped = False

    def take(self, data: bytes) -> None:
        if not data:
            return
        kept = data[: self.room]
        cut = len(kept) < len(data)
        text = self.decoder.decode(kept)
        encoded = text.encode()
        if len(encoded) > self.room:  # replacement characters made the text grow
            text = encoded[: self.room].decode("utf-8", "ignore")
            cut = True
        self.room -= len(text.encode())
        self.pending += text
        if cut:
            # A prefix has no holes: nothing after the cut is kept, not even the rest of a
            # character whose first bytes the decoder still holds.
            self.dropped = True
            self.room = 0

    def drain(self) -> tuple[str, bool]:
        text, self.pending = self.pending, ""
        return text, self.dropped


class Launch:
    def __init__(self, session: Session):
        self.session = session

    def start(self, ex: dict[str, Any]) -> Capture | None:
        """Launch one queued Execution. Returns its Capture, or None when nothing runs: it
        finished at once (a launch that failed before the gate opened: known not to have
        run), or it stayed queued because a Control was committed meanwhile."""
        session, cell = self.session, ex["cell"]
        cell_id = ex["cell_id"]
        token = f"rio-{session.proj.session['id']}-{cell_id}-{uuid.uuid4().hex[:12]}"
        with session.journal.write() as w:
            if w.proj.controls:
                # A Control committed since the caller looked: it goes first (SPEC §5), so
                # nothing is authorised; the Execution stays queued.
                return None
            w.append("execution_started", {"cell_id": cell_id, "token": token}, ref=cell_id)
        crash_point("launch_before_spawn")
        cwd = session.proj.session["cwd"]
        env = worker_env(session, cell_id)
        problem = None
        if cell["kind"] == "code":
            # One path for every code Cell of this Session: uv keys its cached script
            # environment by path, so a new path per Cell would build a new one each time.
            script = scratch_dir(session) / "cells" / "cell.py"
            script.parent.mkdir(exist_ok=True)
            script.write_text(cell["source"])
            argv = [uv_binary(), "run", "--quiet", "--script", str(script)]
        else:
            argv = list(cell["argv"])
            if shutil.which(argv[0], path=env.get("PATH")) is None and not (
                    "/" in argv[0] and os.access(Path(cwd, argv[0]), os.X_OK)):
                problem = f"program not found: {argv[0]}"
        if not Path(cwd).is_dir():
            problem = f"working directory {cwd} does not exist"
        worker = None
        if problem is None:
            try:
                worker = Worker.spawn(argv, cwd, env, token)
            except OSError as exc:
                problem = f"could not start the Worker: {exc}"
        if worker is None:
            with session.journal.write() as w:
                finish(w, cell_id, {"type": "error", "cell_id": cell_id, "exit_code": None,
                                    "reason": f"launch_failed: {problem}"})
            return None
        crash_point("worker_spawned")
        with session.journal.write() as w:
            w.append("worker_registered", {"cell_id": cell_id,
                                           "identity": worker.identity.to_dict()}, ref=cell_id)
        crash_point("worker_before_release")
        worker.release()
        crash_point("script_running")
        return Capture(session, cell_id, worker)

    def validator(self, note_id: int, index: int, argv: list[str],
                  interrupted: threading.Event) -> dict[str, Any]:
        """Run one validator under the same supervision; commit and return its result."""
        session = self.session
        token = f"rio-{session.proj.session['id']}-validator-{uuid.uuid4().hex[:12]}"
        limit = session.limits["output_bytes"]
        streams = {"stdout": Prefix(limit), "stderr": Prefix(limit)}
        result: dict[str, Any]
        try:
            worker = Worker.spawn(argv, session.proj.session["cwd"], worker_env(session, None),
                                  token)
        except OSError as exc:
            result = {"type": "error", "exit_code": None, "reason": f"launch_failed: {exc}"}
        else:
            worker.release()
            deadline = time.monotonic() + session.limits["execution_seconds"]
            code = exited_at = None
            while code is None or not worker.output_eof:
                for stream, data in worker.read_output(0.05):
                    streams[stream].take(data)
                if worker.output_eof and code is None:
                    worker.wait(0.05)  # pipes closed: sleep until the exit instead of spinning
                code = worker.poll()
                now = time.monotonic()
                if code is not None:
                    exited_at = now if exited_at is None else exited_at
                    if now - exited_at > EXIT_GRACE:
                        break  # leftovers hold the pipes, as in Capture.pump; stop() ends them
                if now > deadline or interrupted.is_set():
                    break
            worker.stop()
            worker.close()
            if code is None:
                why = "interrupted" if interrupted.is_set() else "timeout"
                result = {"type": "error", "exit_code": None, "reason": why}
            else:
                result = {"type": "success" if code == 0 else "error", "exit_code": code}
        out, out_dropped = streams["stdout"].drain()
        err, err_dropped = streams["stderr"].drain()
        with session.journal.write() as w:
            w.append("validator_result", {
                "note_id": note_id, "index": index, "argv": argv, "result": result,
                "stdout": out, "stderr": err, "truncated": out_dropped or err_dropped},
                ref=note_id)
        return result


class Capture:
    """Output and result of one running Execution."""

    def __init__(self, session: Session, cell_id: int, worker: Worker):
        self.session = session
        self.cell_id = cell_id
        self.worker = worker
        limits = session.limits
        self.streams = {"stdout": Prefix(limits["output_bytes"]),
                        "stderr": Prefix(limits["output_bytes"])}
        self.flush_every = float(limits["flush_seconds"])
        self.deadline = time.monotonic() + float(limits["execution_seconds"])
        self.last_flush = time.monotonic()
        self.exited_at: float | None = None
        self.reported: set[str] = set()  # streams whose truncation is already committed

    def pump(self, wait: float) -> dict[str, Any] | None:
        """Read, commit output when due, and commit the result once the Worker is done.
        Returns the result when finished, else None."""
        for stream, data in self.worker.read_output(wait):
            self.streams[stream].take(data)
        if self.worker.output_eof and self.exited_at is None:
            self.worker.wait(wait)  # pipes closed: sleep until the exit instead of spinning
        now = time.monotonic()
        code = self.worker.poll()
        if code is not None and self.exited_at is None:
            self.exited_at = now
        exited_at = self.exited_at
        if code is not None and exited_at is not None and (
                self.worker.output_eof or now - exited_at > EXIT_GRACE):
            for stream, data in self.worker.read_output(0):
                self.streams[stream].take(data)
            self.worker.stop()  # leftovers of the group holding the pipes go too
            self.worker.close()
            crash_point("result_before_commit")
            result: dict[str, Any] = {"type": "success" if code == 0 else "error",
                                      "cell_id": self.cell_id, "exit_code": code}
            self._commit(result)
            crash_point("result_after_commit")
            return result
        if now > self.deadline:
            return self.abort("timeout")
        if now - self.last_flush >= self.flush_every:
            crash_point("output_before_commit")
            self._commit(None)
            crash_point("output_after_commit")
        return None

    def abort(self, reason: str, note: dict[str, Any] | None = None) -> dict[str, Any]:
        """Stop the Worker group; commit what was read and an UnknownExecution, or the
        script's own result if it had already exited (only leftovers held its pipes)."""
        code = self.worker.poll()  # before stop(), whose signals would set the status
        stopped = True
        try:
            self.worker.stop()
        except RecoveryError:
            stopped = False
        for stream, data in self.worker.read_output(0):
            self.streams[stream].take(data)
        self.worker.close()
        result = unknown(self.cell_id, reason, worker_stopped=stopped)
        if code is not None:  # the outcome is known: never turn it into an UnknownExecution
            result = {"type": "success" if code == 0 else "error", "cell_id": self.cell_id,
                      "exit_code": code}
        self._commit(result, note)
        if not stopped:
            raise RecoveryError(f"the Worker of cell {self.cell_id} could not be stopped")
        return result

    def _commit(self, result: dict[str, Any] | None, note: dict[str, Any] | None = None) -> None:
        chunks = [(name, *s.drain()) for name, s in self.streams.items()]
        was_dropped = self.reported
        with self.session.journal.write() as w:
            for stream, text, dropped in chunks:
                if text or (dropped and stream not in was_dropped):
                    w.append("output", {"cell_id": self.cell_id, "stream": stream, "text": text,
                                        "dropped": dropped}, ref=self.cell_id)
            if result is not None:
                finish(w, self.cell_id, result)
            if note is not None:
                w.append("control_applied", {"note_id": note["note_id"], "role": "cancel",
                                             "target_cell_id": self.cell_id},
                         ref=note["note_id"])
        self.reported = was_dropped | {s for s, _, d in chunks if d}
        self.last_flush = time.monotonic()
