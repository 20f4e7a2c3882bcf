"""The Owner: the one process that holds a Session's lock and supervises its processes.

At every start it recovers (SPEC §6): stop surviving Workers, turn every ``started``
Execution into an ``UnknownExecution``, fire due Timers, apply Controls, and only then
dispatch queued work, one Execution at a time, in acceptance order. ``tick()`` does one
bounded slice of that work so the harness can keep supervising while a model thinks.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
import uuid
from collections.abc import Callable
from types import FrameType
from typing import Any

from filelock import FileLock, Timeout

from rio_ci import supervision
from rio_ci.core.reducer import Projection
from rio_ci.crashpoints import crash_point
from rio_ci.errors import OwnershipError, RecoveryError, RioError
from rio_ci.journal import resolve
from rio_ci.process import WorkerIdentity, stop_survivors
from rio_ci.session import Session
from rio_ci.supervision import Capture, Launch


class Owner:
    def __init__(self, path: str, *, synchronous: str = "FULL"):
        real = resolve(path)
        self._lock = FileLock(f"{real}.lock")
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise OwnershipError(
                f"{path} already has an Owner (lock {real}.lock is held)") from None
        try:
            self.session = Session.open(real, verify=True, synchronous=synchronous)
        except BaseException:
            self._lock.release()
            raise
        self.launch = Launch(self.session)
        self.running: Running | None = None
        self.ran: list[int] = []
        self.interrupted = threading.Event()

    def close(self) -> None:
        if self.running is not None:
            self.stop_running("owner_stopped")
        self.session.close()
        self._lock.release()

    # --- recovery ------------------------------------------------------------------------

    def recover(self) -> None:
        """SPEC §6 steps 2-4. A second recovery in a row commits nothing."""
        proj = self.session.refresh()
        started = [e for e in proj.pending() if e["phase"] == "started"]
        for ex in started:
            if ex["identity"]:
                stop_survivors(WorkerIdentity.from_dict(ex["identity"]))
        supervision.stop_session_leftovers(proj.session["id"])
        crash_point("recovery_midway")
        if not started:
            return
        with self.session.journal.write() as w:
            for ex in started:
                if w.proj.executions[str(ex["cell_id"])]["phase"] != "started":
                    continue
                reason = ("worker_lost_before_result_commit" if ex["identity"]
                          else "owner_lost_after_launch_authorisation")
                supervision.finish(w, ex["cell_id"], supervision.unknown(
                    ex["cell_id"], reason, worker_stopped=True))
        crash_point("recovery_after_commit")

    # --- one slice of work ---------------------------------------------------------------

    def tick(self, wait: float = 0.05) -> bool:
        """Fire due Timers, apply Controls, then supervise or dispatch. True if anything
        happened or is still running."""
        proj = self.session.refresh()
        if proj.ended:
            if self.running is not None:
                self.stop_running("run_ended")
            return False
        acted = self.fire_timers()
        acted = self.apply_controls() or acted
        if self.session.proj.ended:
            return True
        if self.running is not None:
            self.supervise(wait)
            return True
        return self.dispatch() or acted

    def fire_timers(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        due = sorted((t for t in self.session.proj.timers.values() if t["deadline"] <= now),
                     key=lambda t: (t["deadline"], t["id"]))
        for timer in due:
            crash_point("timer_due_before_commit")
            with self.session.journal.write() as w:
                if timer["id"] in w.proj.timers:
                    w.append("timer_fired", {"id": timer["id"], "message": {
                        "id": f"timer:{timer['id']}", "kind": "timer",
                        "payload": timer["payload"]}}, ref=timer["id"])
            crash_point("timer_after_commit")
        return bool(due)

    def apply_controls(self) -> bool:
        controls = list(self.session.proj.controls)
        for control in controls:
            if control["role"] == "cancel":
                self._cancel(control)
            elif control["result"] == "success":
                self._conclude_success(control)
            else:
                self._conclude_failure(control)
            if self.session.refresh().ended:
                break
        return bool(controls)

    def _cancel(self, control: dict[str, Any]) -> None:
        target = control["target_cell_id"]
        ex = self.session.proj.executions.get(str(target))
        if ex is not None and self.running is not None and self.running.cell_id == target:
            self.stop_running("cancelled_after_launch", note=control)
            return
        with self.session.journal.write() as w:
            ex = w.proj.executions.get(str(target))
            if ex is not None and ex["phase"] == "queued":
                supervision.finish(w, target, {"type": "cancelled", "cell_id": target,
                                               "reason": "cancelled_before_launch"})
            w.append("control_applied", {"note_id": control["note_id"], "role": "cancel",
                                         "target_cell_id": target}, ref=control["note_id"])
        crash_point("control_after_commit")

    def _conclude_success(self, control: dict[str, Any]) -> None:
        proj = self.session.proj
        note = control["note_id"]
        problems = success_problems(proj)
        if not problems:
            for index, argv in enumerate(proj.session["validators"]):
                result = self.launch.validator(note, index, argv, self.interrupted)
                if result["type"] != "success":
                    why = result.get("reason") or f"exit {result.get('exit_code')}"
                    problems.append(f"validator {index} ({' '.join(argv)}) failed: {why}")
                    break
        if self.interrupted.is_set():
            return  # an interrupted validator proves nothing: the Control stays pending
        crash_point("conclusion_before_commit")
        with self.session.journal.write() as w:
            # Validators take time: judge again what other processes committed meanwhile.
            problems = problems or success_problems(w.proj)
            if problems:
                reason = "success rejected: " + "; ".join(problems)
                w.append("control_rejected", {"note_id": note, "reason": reason, "message": {
                    "id": f"control:{note}", "kind": "control_rejected",
                    "payload": {"reason": reason, "note_id": note}}}, ref=note)
            else:
                w.append("control_applied", {"note_id": note, "role": "conclusion",
                                             "result": "success"}, ref=note)
                w.append("run_ended", {"result": "success", "reason": "conclusion accepted",
                                       "note_id": note, "unresolved": []})

    def _conclude_failure(self, control: dict[str, Any], reason: str | None = None) -> None:
        cleanup_error = None
        if self.running is not None:
            try:
                self.stop_running("cancelled_after_launch")
            except RioError as exc:
                cleanup_error = str(exc)
        note = control.get("note_id")
        with self.session.journal.write() as w:
            for ex in w.proj.pending():
                if ex["phase"] == "queued":
                    supervision.finish(w, ex["cell_id"], {
                        "type": "cancelled", "cell_id": ex["cell_id"],
                        "reason": "cancelled_by_failure"})
            if note is not None:
                w.append("control_applied", {"note_id": note, "role": "conclusion",
                                             "result": "failure"}, ref=note)
            w.append("run_ended", {
                "result": "failure", "reason": reason or "conclusion: failure", "note_id": note,
                "unresolved": [supervision.unresolved_summary(e) for e in w.proj.unresolved()],
                "cleanup_error": cleanup_error})

    def end_in_failure(self, reason: str) -> None:
        """The harness's way to end a run that cannot go on within its limits."""
        if not self.session.refresh().ended:
            self._conclude_failure({}, reason)

    # --- dispatch and supervision --------------------------------------------------------

    def dispatch(self) -> bool:
        proj = self.session.proj
        if self.running is not None or proj.pause or proj.ended:
            return False
        queued = [e for e in proj.pending() if e["phase"] == "queued"]
        if not queued:
            return False
        cell_id = queued[0]["cell_id"]
        running = self.launch.start(queued[0])
        if running is not None:
            self.running = Running(cell_id, running)
        elif self.session.proj.executions.get(str(cell_id), {}).get("phase") != "queued":
            self.ran.append(cell_id)  # the launch failed; its error result is committed
        return True

    def supervise(self, wait: float) -> None:
        running = self.running
        assert running is not None
        try:
            outcome = running.capture.pump(wait)
        except RecoveryError:
            # A timeout's abort() committed the UnknownExecution, then its Worker would not
            # die: forget it, so close() cannot commit a second record for the same run.
            self.running = None
            raise
        if outcome is None:
            return
        self.running = None
        self.ran.append(running.cell_id)

    def stop_running(self, reason: str, note: dict[str, Any] | None = None) -> None:
        """Stop the running Worker group and commit an UnknownExecution with ``reason``."""
        running = self.running
        assert running is not None
        self.running = None
        self.ran.append(running.cell_id)
        running.capture.abort(reason, note)

    # --- whole runs ----------------------------------------------------------------------

    def idle(self) -> bool:
        """Nothing runnable: no Worker, no Control, no due Timer, no dispatchable work."""
        proj = self.session.refresh()
        if proj.ended:
            return self.running is None
        due = any(t["deadline"] <= time.time() for t in proj.timers.values())
        queued = any(e["phase"] == "queued" for e in proj.pending())
        return (self.running is None and not proj.controls and not due
                and (proj.pause is not None or not queued))

    def work(self, timeout: float | None = None) -> dict[str, Any]:
        """Recover, then run until nothing is runnable (``rio-ci work``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.recover()
        while not self.interrupted.is_set():
            if deadline is not None and time.monotonic() > deadline:
                break
            self.tick()
            if self.idle():
                break
        if self.running is not None:
            self.stop_running("owner_interrupted" if self.interrupted.is_set()
                              else "owner_deadline")
        return self.status()

    def status(self) -> dict[str, Any]:
        proj = self.session.refresh()
        ended = proj.ended and {"result": proj.ended["result"], "reason": proj.ended["reason"]}
        return {"ended": ended or None, "ran": list(self.ran),
                "pending": [e["cell_id"] for e in proj.pending()], "paused_by": proj.pause}


def success_problems(proj: Projection) -> list[str]:
    """Why a success conclusion cannot be accepted now (validators aside); [] when clean."""
    problems = []
    if proj.pending():
        problems.append(f"work is pending (cells {[e['cell_id'] for e in proj.pending()]})")
    if proj.unresolved():
        problems.append("uncertainty is unresolved (cells "
                        f"{[e['cell_id'] for e in proj.unresolved()]})")
    if proj.timers:
        problems.append(f"Timers are waiting ({sorted(proj.timers)})")
    if proj.inbox:
        problems.append(f"observations are unconsumed ({[m['id'] for m in proj.inbox]})")
    return problems


class Running:
    def __init__(self, cell_id: int, capture: Capture):
        self.cell_id = cell_id
        self.capture = capture


def handle_signals(event: threading.Event) -> Callable[[], None]:
    """Route SIGINT/SIGTERM to ``event``; returns a function restoring the old handlers."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

    def handler(signum: int, frame: FrameType | None) -> None:
        event.set()

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)
    return restore


def work_command(db: str, *, timeout: float | None, emit: Callable[[Any], None]) -> int:
    owner = Owner(db)
    restore = handle_signals(owner.interrupted)
    try:
        status = owner.work(timeout)
    finally:
        restore()
        with contextlib.suppress(RioError):
            owner.close()
    if owner.interrupted.is_set():
        status["interrupted"] = True
    emit(status)
    ended = status["ended"]
    return 1 if owner.interrupted.is_set() or (ended and ended["result"] == "failure") else 0


def new_token(session_id: str, what: str) -> str:
    return f"rio-{session_id}-{what}-{uuid.uuid4().hex[:12]}"
