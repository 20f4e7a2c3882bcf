"""Watching a running Worker: its output, kept bounded and redacted, and its end.

Each stream keeps the first half of ``output_bytes`` (the head) and the last half (the tail
window), counting the bytes elided between them: a test run's summary and a traceback's last
line are exactly what a prefix would lose. Before anything is kept, every secret value is
replaced by ``***`` (a value cut by a read boundary is caught: an ending that could be the start
of a secret waits for the next read, and nothing else does, so a short line is committed on
time). ``Capture`` commits the head as it grows, at least every ``flush_seconds``, and the
tail window at growing intervals (``flush_seconds`` doubling up to ``TAIL_EVERY_MAX``), so a
chatty script cannot make the Journal grow by half a window every tenth of a second; a
transaction is opened only when there is something to commit.
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Callable, Sequence

from rio_ci.core import events as ev
from rio_ci.core.errors import RecoveryError
from rio_ci.core.output import joined
from rio_ci.faults.crashpoints import crash_point
from rio_ci.run.worker import Stream, Worker
from rio_ci.session.session import Session

STREAMS: tuple[Stream, Stream] = ("stdout", "stderr")
EXIT_GRACE = 1.0  # seconds to wait for pipes held by leftovers after the script exited
TAIL_EVERY_MAX = 5.0
REDACTED = "***"


class Retention:
    """The retained text of one stream: head, tail window and the elided byte count."""

    def __init__(self, limit: int, secrets: Sequence[str] = ()):
        self.head_room = limit // 2  # UTF-8 bytes the head may still take
        self.tail_limit = limit - limit // 2
        self.secrets = [s for s in secrets if s]
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.carry = ""  # decoded text held back until a secret cut by the read is whole
        self.new_head = ""  # head text not yet committed
        self.tail = ""
        self.elided = 0
        self.tail_changed = False

    def take(self, data: bytes, *, final: bool = False) -> None:
        text = self.carry + self.decoder.decode(data, final=final)
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        cut = len(text) if final else len(text) - self.held(text)
        self.carry, text = text[cut:], text[:cut]
        if not text:
            return
        if self.head_room > 0:
            encoded = text.encode()
            head = encoded[: self.head_room].decode("utf-8", "ignore")
            self.new_head += head
            self.head_room -= len(head.encode())
            text = text[len(head) :]
            if text:
                self.head_room = 0  # a character that did not fit closes the head
        if text:
            tail = (self.tail + text).encode()
            if len(tail) > self.tail_limit:
                kept = tail[len(tail) - self.tail_limit :].decode("utf-8", "ignore")
                self.elided += len(tail) - len(kept.encode())
                tail = kept.encode()
            self.tail = tail.decode()
            self.tail_changed = True

    def held(self, text: str) -> int:
        """How many characters at the end of ``text`` could be the start of a secret cut
        by the read boundary (the longest ending that is a proper prefix of one)."""
        longest = 0
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, len(text)), longest, -1):
                if text.endswith(secret[:size]):
                    longest = size
                    break
        return longest

    def close(self) -> None:
        """The stream ended: release what was held back for redaction."""
        self.take(b"", final=True)

    def pieces(self, stream: Stream, *, with_tail: bool) -> list[ev.OutputPiece]:
        """What to commit now; the head always, the tail window only ``with_tail``."""
        tail = with_tail and self.tail_changed
        pieces = [ev.OutputPiece(stream, text=self.new_head)] if self.new_head else []
        pieces += [ev.OutputPiece(stream, tail=self.tail, elided=self.elided)] if tail else []
        self.new_head = ""
        self.tail_changed = self.tail_changed and not tail
        return pieces

    def text(self) -> str:
        """Everything retained, for a caller that commits once (validators)."""
        return joined(self.new_head, self.tail, self.elided)


class Watch:
    """A released Worker's output and exit. ``poll`` reads for up to ``wait`` s and returns
    the exit status once the script is over (its pipes closed, or ``EXIT_GRACE`` after the
    leader exited while leftovers still held them); the group is then stopped and closed."""

    def __init__(self, worker: Worker, limit: int, secrets: Sequence[str]):
        self.worker = worker
        self.streams: dict[Stream, Retention] = {
            name: Retention(limit, secrets) for name in STREAMS
        }
        self.exited_at: float | None = None

    def read(self, wait: float) -> None:
        for stream, data in self.worker.read_output(wait):
            self.streams[stream].take(data)

    def poll(self, wait: float) -> int | None:
        self.read(wait)
        if self.worker.output_eof and self.exited_at is None:
            self.worker.wait(wait)  # pipes closed: sleep until the exit instead of spinning
        code = self.worker.poll()
        if code is None:
            return None
        now = time.monotonic()
        self.exited_at = self.exited_at or now
        if not self.worker.output_eof and now - self.exited_at <= EXIT_GRACE:
            return None
        self.read(0)
        self.worker.stop()  # leftovers of the group holding the pipes go too
        self.close()
        return code

    def stop(self) -> tuple[int | None, bool]:
        """Stop the group now: ``(exit status if the script had already exited, stopped)``."""
        code = self.worker.poll()  # before stop(), whose signals would set the status
        try:
            self.worker.stop()
            stopped = True
        except RecoveryError:
            stopped = False
        self.read(0)
        self.close()
        return code, stopped

    def close(self) -> None:
        self.worker.close()
        for retention in self.streams.values():
            retention.close()

    def pieces(self, *, with_tail: bool) -> list[ev.OutputPiece]:
        return [p for name, r in self.streams.items() for p in r.pieces(name, with_tail=with_tail)]


# Called once an Execution's processes are stopped: its ``egress`` events still to commit and
# the hosts it was refused (``Confinement.end``).
Ended = Callable[[], tuple[list[ev.Egress], list[ev.RefusedHost]]]


def _nothing() -> tuple[list[ev.Egress], list[ev.RefusedHost]]:
    return [], []


class Capture:
    """Output and result of one running Execution, committed as they come."""

    def __init__(self, session: Session, cell_id: int, watch: Watch, ended: Ended = _nothing):
        self.session = session
        self.cell_id = cell_id
        self.watch = watch
        self.ended = ended
        limits = session.limits
        self.flush_every = float(limits.flush_seconds)
        self.tail_every = self.flush_every
        now = time.monotonic()
        self.deadline = now + float(limits.execution_seconds)
        self.last_flush = self.last_tail = now

    def pump(self, wait: float) -> ev.Result | None:
        """Read, commit output when due, and commit the result once the Worker is done.
        Returns the result when finished, else None."""
        code = self.watch.poll(wait)
        if code is not None:
            crash_point("result_before_commit")
            egress, refused = self.ended()
            result = _refused(ev.exited(self.cell_id, code), refused)
            self.session.record_result(
                self.cell_id, result, output=self.watch.pieces(with_tail=True), egress=egress
            )
            crash_point("result_after_commit")
            return result
        now = time.monotonic()
        if now > self.deadline:
            return self.abort("timeout")
        if now - self.last_flush >= self.flush_every:
            tail_due = now - self.last_tail >= self.tail_every
            pieces = self.watch.pieces(with_tail=tail_due)
            if tail_due and any(p.tail is not None for p in pieces):
                self.last_tail = now
                self.tail_every = min(self.tail_every * 2, TAIL_EVERY_MAX)
            if pieces:
                crash_point("output_before_commit")
                self.session.record_output(self.cell_id, pieces)
                crash_point("output_after_commit")
            self.last_flush = now
        return None

    def abort(self, reason: str, cancel_note: int | None = None) -> ev.Result:
        """Stop the Worker group; commit what was read and an UnknownExecution, or the
        script's own result if it had already exited (only leftovers held its pipes)."""
        code, stopped = self.watch.stop()
        result = ev.unknown(self.cell_id, reason, worker_stopped=stopped)
        if code is not None:  # the outcome is known: never turn it into an UnknownExecution
            result = ev.exited(self.cell_id, code)
        egress, refused = self.ended() if stopped else ([], [])
        self.session.record_result(
            self.cell_id,
            _refused(result, refused),
            output=self.watch.pieces(with_tail=True),
            cancel_note=cancel_note,
            egress=egress,
        )
        if not stopped:
            raise RecoveryError(f"the Worker of cell {self.cell_id} could not be stopped")
        return result


def _refused(result: ev.Result, refused: list[ev.RefusedHost]) -> ev.Result:
    """``result`` with the hosts its processes were refused, the model's to see."""
    return {**result, "refused_hosts": refused} if refused else result


def run_to_end(
    watch: Watch, seconds: float, interrupted: threading.Event, stop_at: float | None = None
) -> int | str:
    """Watch until the Worker ends (its exit status), or stop it and say why not
    (``"timeout"`` after ``seconds``; ``"interrupted"`` when ``interrupted`` is set or the
    ``time.monotonic()`` value ``stop_at`` — the Owner's own deadline — passes). For
    validators, which commit once at the end."""
    deadline = time.monotonic() + seconds
    while True:
        code = watch.poll(0.05)
        if code is not None:
            return code
        now = time.monotonic()
        cut = interrupted.is_set() or (stop_at is not None and now > stop_at)
        if cut or now > deadline:
            watch.stop()
            return "interrupted" if cut else "timeout"
