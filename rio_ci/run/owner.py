"""The Owner: the one process that holds a Session's lock and supervises its processes.

At every start it recovers (docs/sessions.md): stop surviving Workers, turn every ``started``
Execution into an ``UnknownExecution``, fire due Timers, apply Controls, and only then
dispatch queued work, one Execution at a time, in acceptance order. ``tick()`` does one
bounded slice of that work so the harness can keep supervising while a model thinks.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from rio_ci.core.errors import RecoveryError, RioError, StorageError
from rio_ci.core.events import Control
from rio_ci.faults.crashpoints import crash_point
from rio_ci.run.capture import Capture
from rio_ci.run.confinement.confinement import Confinement
from rio_ci.run.confinement.settings import ConfinementSettings
from rio_ci.run.launch import BeforeSpawn, Launch
from rio_ci.run.ownership import FileGuard, FileOwnership
from rio_ci.run.survivors import WorkerIdentity, stop_session_leftovers, stop_survivors
from rio_ci.session.session import Session
from rio_ci.store import sessionfile


class Owner:
    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        before_spawn: BeforeSpawn | None = None,
        confinement: ConfinementSettings | None = None,
        notice: Callable[[str], None] | None = None,
    ):
        """``confinement``: how the Cells are confined (rio_ci.run.confinement; default: as
        this process's user). A Cell user runs every Cell where this process is root;
        elsewhere Cells share its user and ``notice`` says so (default: a line on stderr)."""
        real = sessionfile.resolve(path)
        # Nothing is locked or created until the path is known to name a Session.
        sessionfile.check(real, path)
        problem = sessionfile.recognise(real, path)
        if problem:
            raise StorageError(problem)
        sessionfile.writable(real, path)
        self._ownership = FileOwnership.acquire(real, path)
        try:
            # The Cell user first: it needs nothing of the Session, and a refusal (useradd
            # failed, a user with groups) then leaves no connection open.
            self.confinement = Confinement(
                confinement or ConfinementSettings(), notice or _to_stderr
            )
            doubt = in_doubt(real, self._ownership.fd)
            self.session = Session.open(real, verify=doubt, synchronous=synchronous)
            if self.session.file_identity != self._ownership.identity:
                self.session.close()
                raise StorageError(f"{path} was replaced while its Owner was starting")
            self.guard = FileGuard(self._ownership)
            # Under a Cell user no Cell can reach the file: the checks against damage by
            # Cells would guard against nobody (docs/design.md, "The Cell user").
            self.session.guard_file(None if self.confinement.separate else self._damage)
        except BaseException:
            self._ownership.release()
            raise
        self._before_spawn = before_spawn
        self.launch = Launch(self.session, self._wal_checkpoint_then_spawn, self.confinement)
        self.running: Capture | None = None  # the Execution whose Worker runs now
        self.ran: list[int] = []
        self.interrupted = threading.Event()
        # A time.monotonic() value past which validators are cut off like an interruption
        # (work --timeout, run --deadline): the Control waits for the next Owner.
        self.deadline: float | None = None
        # Told each validator's argv as it is launched (the live log says it started).
        self.validating: Callable[[list[str]], None] | None = None

    def close(self) -> None:
        try:
            if self.running is not None:
                self.stop_running("owner_stopped")
        finally:
            try:
                self.confinement.close(self.session)
            finally:
                self.session.close()
            self.guard.close()
            self._ownership.release()

    def check_file(self) -> None:
        """Raise StorageError (and commit nothing more) when the Session file was renamed,
        replaced or damaged under this Owner; checked before every commit and every tick. A
        renamed or removed file's WAL is copied into it first (a WAL checkpoint), so nothing
        acknowledged is lost under its new name; a garbled one is not."""
        self.session.check_file()

    def _damage(self) -> tuple[str, bool] | None:
        """None while the guard finds nothing wrong; else this Owner's reason to stop, and
        whether the WAL may still be copied into the file first (the Session then commits
        nothing more)."""
        found = self.guard.problem()
        if found is None:
            return None
        problem, wal_checkpoint = found
        return f"{problem}; this Owner stops and commits nothing more", wal_checkpoint

    def hand_back(self) -> None:
        """Stop every process of the Cell user and give the working tree back to its owner
        (``finish`` before its git work; ``close`` does it too). Nothing when Cells share the
        harness's user."""
        self.confinement.hand_back(self.session)

    def _wal_checkpoint_then_spawn(self, cell_id: int, token: str) -> None:
        """Between ``started`` and the spawn: put the launch record into the database file
        itself (a FULL WAL checkpoint), so a script that deletes, truncates or garbles the
        WAL cannot make its own launch disappear (and be run again by the next Owner). Under
        a Cell user no script can reach the WAL, and the checkpoint is left out."""
        if not self.confinement.separate:
            self.check_file()
            self.session.wal_checkpoint_full()
        if self._before_spawn is not None:
            self._before_spawn(cell_id, token)

    # --- recovery ------------------------------------------------------------------------

    def recover(self) -> None:
        """docs/sessions.md steps 2-4. A second recovery in a row commits nothing."""
        self.check_file()
        proj = self.session.refresh()
        started = [e for e in proj.pending() if e["phase"] == "started"]
        # Every process of a Cell user is a Cell's, whatever it did to its group, its
        # environment or its dumpability: all go first, then the Workers' own checks.
        self.confinement.stop_processes(self.session)
        # Channel and Cell folders of killed Owners; this Owner's own, if it has any, stay.
        self.confinement.sweep_stale(self.session)
        for ex in started:
            if ex["identity"]:
                stop_survivors(WorkerIdentity.from_dict(ex["identity"]))
        stop_session_leftovers(proj.session["id"])
        crash_point("recovery_midway")
        if not started:
            return
        self.session.mark_lost(
            [
                (
                    ex["cell_id"],
                    "worker_lost_before_result_commit"
                    if ex["identity"]
                    else "owner_lost_after_launch_authorisation",
                )
                for ex in started
            ]
        )
        crash_point("recovery_after_commit")

    # --- one slice of work ---------------------------------------------------------------

    def tick(self, wait: float = 0.05) -> bool:
        """Fire due Timers, apply Controls, then supervise or dispatch. True if anything
        happened or is still running."""
        self.check_file()
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
            self._record_egress()
            return True
        return self.dispatch() or acted

    def _record_egress(self) -> None:
        """Commit the connections the egress proxy accounted for that are due."""
        due = self.confinement.egress_due()
        if due:
            self.session.record_egress(due)

    def fire_timers(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        due = sorted(
            (t for t in self.session.proj.timers.values() if t["deadline"] <= now),
            key=lambda t: (t["deadline"], t["id"]),
        )
        for timer in due:
            self.session.fire_timer(timer["id"])
        return bool(due)

    def apply_controls(self) -> bool:
        controls = list(self.session.proj.controls)
        for control in controls:
            if control["role"] == "cancel":
                self._cancel(control)
            elif control["result"] == "success":
                self._conclude_success(control)
            else:
                self._conclude_failure(control["note_id"])
            if self.session.refresh().ended:
                break
        return bool(controls)

    def _cancel(self, control: Control) -> None:
        target = control["target_cell_id"]
        ex = self.session.proj.executions.get(str(target))
        if ex is not None and self.running is not None and self.running.cell_id == target:
            self.stop_running("cancelled_after_launch", cancel_note=control["note_id"])
            return
        self.session.cancel_queued(control["note_id"], target)

    def _conclude_success(self, control: Control) -> None:
        proj = self.session.proj
        note = control["note_id"]
        problems = proj.success_problems()
        if not problems:
            for index, argv in enumerate(proj.session["validators"]):
                if self.validating is not None:
                    self.validating(argv)
                result = self.launch.validator(note, index, argv, self.interrupted, self.deadline)
                if result["type"] != "success":
                    why = result.get("reason") or f"exit {result.get('exit_code')}"
                    problems.append(f"validator {index} ({' '.join(argv)}) failed: {why}")
                    break
        if self.interrupted.is_set() or (
            self.deadline is not None and time.monotonic() > self.deadline
        ):
            return  # an interrupted validator proves nothing: the Control stays pending
        # Validators take time: the Session judges again what others committed meanwhile.
        self.session.conclude_success(note, problems)

    def _conclude_failure(self, note_id: int | None, reason: str | None = None) -> None:
        cleanup_error = None
        if self.running is not None:
            try:
                self.stop_running("cancelled_after_launch")
            except RioError as exc:
                cleanup_error = str(exc)
        self.session.end_in_failure(
            reason or "conclusion: failure",
            note_id=note_id,
            cleanup_error=cleanup_error,
        )

    def end_in_failure(self, reason: str) -> None:
        """The harness's way to end a run that cannot go on within its limits."""
        if not self.session.refresh().ended:
            self._conclude_failure(None, reason)

    # --- dispatch and supervision --------------------------------------------------------

    def dispatch(self) -> bool:
        proj = self.session.proj
        if self.running is not None or proj.pause or proj.ended:
            return False
        queued = proj.queued()
        if not queued:
            return False
        cell_id = queued[0]["cell_id"]
        self.running = self.launch.start(queued[0])
        if self.running is None and (
            (ex := self.session.proj.executions.get(str(cell_id))) is None
            or ex["phase"] != "queued"
        ):
            self.ran.append(cell_id)  # the launch failed; its error result is committed
        return True

    def supervise(self, wait: float) -> None:
        running = self.running
        assert running is not None
        try:
            outcome = running.pump(wait)
        except RecoveryError:
            # A timeout's abort() committed the UnknownExecution, then its Worker would not
            # die: forget it, so close() cannot commit a second record for the same run.
            self.running = None
            raise
        if outcome is None:
            return
        self.running = None
        self.ran.append(running.cell_id)

    def stop_running(self, reason: str, cancel_note: int | None = None) -> None:
        """Stop the running Worker group and commit an UnknownExecution with ``reason``."""
        running = self.running
        assert running is not None
        self.running = None
        self.ran.append(running.cell_id)
        running.abort(reason, cancel_note)

    # --- whole runs ----------------------------------------------------------------------

    def idle(self) -> bool:
        """Nothing runnable: no Worker, no Control, no due Timer, no dispatchable work."""
        proj = self.session.refresh()
        if proj.ended:
            return self.running is None
        due = any(t["deadline"] <= time.time() for t in proj.timers.values())
        queued = bool(proj.queued())
        return (
            self.running is None
            and not proj.controls
            and not due
            and (proj.pause is not None or not queued)
        )

    def work(self, timeout: float | None = None) -> dict[str, Any]:
        """Recover, then run until nothing is runnable (``rio-ci work``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.deadline = deadline
        self.recover()
        while not self.interrupted.is_set():
            if deadline is not None and time.monotonic() > deadline:
                break
            self.tick()
            if self.idle():
                break
        if self.running is not None:
            self.stop_running(
                "owner_interrupted" if self.interrupted.is_set() else "owner_deadline"
            )
        return self.status()

    def status(self) -> dict[str, Any]:
        proj = self.session.refresh()
        ended = proj.ended and {"result": proj.ended["result"], "reason": proj.ended["reason"]}
        return {
            "ended": ended or None,
            "ran": list(self.ran),
            "pending": [e["cell_id"] for e in proj.pending()],
            "paused_by": proj.pause,
        }


def _to_stderr(message: str) -> None:
    print(f"rio-ci: {message}", file=sys.stderr, flush=True)


def in_doubt(path: Path, fd: int) -> bool:
    """Whether an Owner must verify the Session file (``quick_check``, which reads all of
    it) before trusting it, rather than rely on SQLite's own checks as it reads. ``fd`` is a
    descriptor of the file that stays open: closing one opened just to read the header would
    drop every POSIX lock this process holds on the file, SQLite's included (see
    ``rio_ci.run.ownership``).

    No: the last connection closed cleanly — SQLite then checkpoints and removes the WAL —
    and the header agrees with the file's size. That is what ``create``, every clean close
    and an unpacked artifact (which passed ``integrity_check``) leave. Yes: a WAL with
    content (a process died holding the file, or another one holds it now) or a header
    that disagrees with the file (a copy or a write went wrong). See docs/design.md."""
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return True
    header, size = os.pread(fd, 100, 0), os.fstat(fd).st_size
    page = int.from_bytes(header[16:18], "big") if len(header) == 100 else 0
    page = 65536 if page == 1 else page
    if not header.startswith(b"SQLite format 3\x00") or page < 512 or size % page:
        return True
    # SQLite keeps a page count in the header, valid while two counters match (24 and 92).
    return header[24:28] != header[92:96] or int.from_bytes(header[28:32], "big") * page != size


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
