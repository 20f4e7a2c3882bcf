"""The Session: the one module that writes events. Every outcome is a method here.

Any process may receive, prepare a Turn, step or set a Timer while one Owner runs: each write
is one transaction of the Journal that first catches up with what others committed and is
judged against it. The Owner and the harness ask the Session to record what happened (a launch
authorised, output, a result, a model reply); events are built only by the constructors of
``rio_ci.core.events``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from rio_ci.core import events as ev
from rio_ci.core.admission import Receipt, Rejection, decide, decide_again
from rio_ci.core.entities import State
from rio_ci.core.errors import Rejected, RunEnded
from rio_ci.core.inbox import message_problem, timer_problem
from rio_ci.core.json_value import NOT_TEXT, compact, encoded_size, is_text_safe, json_equal
from rio_ci.core.limits import Limits
from rio_ci.core.output import joined
from rio_ci.core.projection import Projection
from rio_ci.core.reducer import creation_problem
from rio_ci.core.view import next_turn, render
from rio_ci.faults.crashpoints import crash_point
from rio_ci.model.base import ModelReply
from rio_ci.session.facts import JournalFacts
from rio_ci.session.settings import Settings
from rio_ci.store.journal import Guard, Journal, Writer
from rio_ci.store.sessionfile import Identity

__all__ = ["Receipt", "Session"]


class Session:
    def __init__(self, journal: Journal):
        self.journal = journal
        self._facts = JournalFacts(journal)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        goal: str,
        settings: Settings | None = None,
        *,
        synchronous: str = "FULL",
        session_id: str | None = None,
    ) -> Session:
        """A new Session at ``path`` whose first event fixes ``goal`` and ``settings`` (the
        defaults when None); ValueError for one that could never work (nothing is created)."""
        session_id = session_id or uuid.uuid4().hex
        first = ev.session_created((settings or Settings()).created(session_id, goal))
        if (problem := creation_problem(first.data)) is not None:
            raise ValueError(problem)
        return cls(Journal.create(path, session_id, first, synchronous=synchronous))

    @property
    def settings(self) -> Settings:
        """What the Session's first event fixed."""
        return Settings.stored(self.proj.session)

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], *, verify: bool = False, synchronous: str = "FULL"
    ) -> Session:
        return cls(Journal.open(path, verify=verify, synchronous=synchronous))

    def close(self) -> None:
        self.journal.close()

    @property
    def proj(self) -> Projection:
        return self.journal.proj

    def refresh(self) -> Projection:
        self.journal.catch_up()
        return self.journal.proj

    @property
    def limits(self) -> Limits:
        return self.proj.limits

    # --- Inbox ---------------------------------------------------------------------------

    # --- reading what is committed: the Journal stays behind the Session ----------------

    @property
    def path(self) -> Path:
        """The Session file."""
        return self.journal.path

    @property
    def migrated_from(self) -> int | None:
        """The format the Session file had when this handle opened it, if opening migrated it
        to this rio-ci's (docs/journal.md, "Formats and migrations"); else None."""
        return self.journal.migrated_from

    @property
    def commits(self) -> int:
        """Write transactions committed through this handle (the bench counts them)."""
        return self.journal.commits

    def events(
        self, after: int = 0, limit: int | None = None, kinds: Sequence[str] = ()
    ) -> Iterator[dict[str, Any]]:
        """Committed events after seq ``after``, in order; only those of ``kinds`` if given."""
        return self.journal.events(after=after, limit=limit, kinds=kinds)

    def find(self, ref: str, kind: str, after: int = 0) -> dict[str, Any] | None:
        """The first event of ``kind`` after seq ``after`` whose ref is ``ref``."""
        return self.journal.find(ref, kind, after)

    def size_bytes(self) -> int:
        """The Session file's size as SQLite counts it (page count times page size)."""
        return self.journal.size_bytes()

    def wal_checkpoint(self) -> None:
        """Copy the WAL into the file and truncate it (a TRUNCATE WAL checkpoint)."""
        self.journal.wal_checkpoint()

    # --- the file under its Owner ---------------------------------------------------------

    @property
    def file_identity(self) -> Identity | None:
        """(device, inode) of the file this Session opened, whatever its path names now."""
        return self.journal.identity

    def guard_file(self, guard: Guard | None) -> None:
        """Ask ``guard`` (the Owner's checks for damage) before every commit and every
        ``check_file``: once it finds a problem, this Session commits nothing more (None:
        no such checks)."""
        self.journal.guard = guard

    def check_file(self) -> None:
        """Raise StorageError, for good, once the path no longer names the file this Session
        opened (renamed, removed, replaced: its WAL is first copied into the file, a WAL
        checkpoint) or the guard found a problem; every commit checks it first."""
        self.journal.check_file()

    def wal_checkpoint_full(self) -> None:
        """Copy every committed WAL frame into the database file and sync it (a FULL WAL
        checkpoint, which waits for readers): what is committed no longer lives only in
        the WAL. StorageError when SQLite cannot."""
        self.journal.wal_checkpoint_full()

    # --- writing: every outcome is a method --------------------------------------------

    def receive(self, message_id: str, kind: str, payload: Any) -> dict[str, Any]:
        """Commit an external Inbox message; returns ``{"id", "seq", "duplicate"}``."""
        problem = message_problem(message_id, kind, payload)
        if problem:
            raise Rejected(problem)
        size = encoded_size(payload)
        with self.journal.write(crash_before="inbox_before_commit") as w:
            _not_ended(w, "it accepts no new messages")
            limit = w.proj.limits.output_bytes
            if size > limit:
                raise Rejected(f"payload is {size} bytes, over output_bytes={limit}")
            existing = self.journal.find(message_id, "message_received")
            if existing is not None:
                if not json_equal(
                    existing["message"], {"id": message_id, "kind": kind, "payload": payload}
                ):
                    raise Rejected(
                        f"message {message_id} was already received with different content"
                    )
                return {"id": message_id, "seq": existing["seq"], "duplicate": True}
            if len(w.proj.inbox) >= w.proj.limits.inbox_messages:
                raise Rejected(
                    f"the Inbox is full ({len(w.proj.inbox)} unconsumed messages); retry later"
                )
            seq = w.append(ev.message_received(message_id, kind, payload))
        crash_point("inbox_after_commit")
        return {"id": message_id, "seq": seq, "duplicate": False}

    def record_idle(self, reason: str) -> None:
        """An accepted patch left nothing to wake the run: tell the model (docs/sessions.md)."""
        with self.journal.write() as w:
            message_id = f"idle:{w.proj.last_seq + 1}"
            w.append(
                ev.message_received(
                    message_id, "invalid_idle", {"reason": reason, "count": w.proj.idle_streak + 1}
                )
            )

    def import_tail(self, after: int, events: Sequence[dict[str, Any]]) -> None:
        """Append ``{"kind", "data"}`` events another copy of this Session committed after
        seq ``after`` (GitHub: a verified launch record), folded by the normal reducer, in
        one transaction — only onto a copy that ends at ``after``, so each keeps its seq."""
        with self.journal.write() as w:
            if w.proj.last_seq != after:
                raise Rejected(f"a tail after seq {after} does not fit seq {w.proj.last_seq}")
            for event in events:
                w.append(ev.imported(event["kind"], event["data"]))

    def store_image(self, digest: str, media_type: str, data: bytes) -> None:
        """Keep a picture by its digest (once), within ``storage_bytes``; ``Rejected`` when it
        would not fit."""
        encoded = base64.b64encode(data).decode()
        with self.journal.write() as w:
            if self.journal.find(digest, "image_stored") is not None:
                return
            size = self.journal.size_bytes() + len(encoded)
            if size > w.proj.limits.storage_bytes:
                raise Rejected(f"it would take the Session past storage_bytes ({size} bytes)")
            w.append(ev.image_stored(digest, media_type, len(data), encoded))

    def image(self, digest: str) -> tuple[str, str] | None:
        """``(media_type, base64 data)`` of a stored picture, or None."""
        found = self.journal.find(digest, "image_stored")
        return None if found is None else (str(found["media_type"]), str(found["data"]))

    def set_watermark(self, name: str, value: Any) -> None:
        with self.journal.write() as w:
            if w.proj.watermarks.get(name) != value:
                w.append(ev.watermark(name, value))

    def record_cell_user(self, mode: ev.CellUserMode) -> None:
        """Commit how Cells run, when it changed (``rio-ci show`` reports it)."""
        with self.journal.write() as w:
            now = w.proj.cell_user
            if now is None or {k: v for k, v in now.items() if k != "seq"} != mode:
                w.append(ev.cell_user(mode))

    # --- Turns ---------------------------------------------------------------------------

    def prepare_turn(self) -> dict[str, Any]:
        """Open a Turn with its State fixed, or return the one already open."""
        with self.journal.write() as w:
            proj = _not_ended(w, "no new Turns")
            if proj.turn is None:
                delivered, state = next_turn(proj)
                turn_id = f"turn-{proj.accepted_turns + 1}-{uuid.uuid4().hex[:12]}"
                event = ev.turn_prepared(turn_id, proj.revision, [m["id"] for m in delivered])
                text = compact(event.data)
                event.data["state"] = state  # handed to the fold, not stored: it renders the
                w.append(event, text=text)  # very same State from the Journal on replay
            turn = proj.turn
        assert turn is not None
        crash_point("turn_after_commit")
        return {
            "turn_id": turn["turn_id"],
            "state": turn["state"],
            "delivered": list(turn["delivered"]),
        }

    def step(self, turn_id: str, patch: Any) -> Receipt | Rejection:
        """Admit one patch for a Turn: its Receipt, or its Rejection, recorded (digest, size,
        reason). Identical re-submission returns the original Receipt. ``Rejected``, recording
        nothing, for a Turn never prepared or closed without a patch."""
        if not is_text_safe(turn_id):
            raise Rejected(f"unknown Turn: {NOT_TEXT}")
        with self.journal.write(crash_before="accept_before_commit") as w:
            turn = w.proj.turn
            if turn is None or turn["turn_id"] != turn_id:  # the open Turn accepted nothing
                return self._closed_turn(w, turn_id, patch)
            # One call: admission unwraps, encodes once, checks and decides, asking history
            # only what a rule needs; its text is stored as it is and its data folded uncopied.
            outcome = decide(w.proj, turn, patch, self._facts)
            if isinstance(outcome, Rejection):
                return _record_rejection(w, turn_id, outcome)
            receipt = outcome.receipt(w.append(ev.patch_accepted(outcome.data), text=outcome.text))
        crash_point("accept_after_commit")
        return receipt

    def _closed_turn(self, w: Writer, turn_id: str, patch: Any) -> Receipt | Rejection:
        """A step for a Turn not open: the same patch's Receipt (equal by value too), else
        why not; a conflict is recorded like any rejection (digest, size, reason:
        docs/patches.md)."""
        prepared = self.journal.find(turn_id, "turn_prepared")
        accepted = prepared and self.journal.find(turn_id, "patch_accepted", prepared["seq"])
        if accepted:
            outcome = decide_again(accepted, patch)
            return (
                outcome if isinstance(outcome, Receipt) else _record_rejection(w, turn_id, outcome)
            )
        _not_ended(w, "no new patches")
        raise Rejected(
            f"unknown Turn {turn_id}" if prepared is None else f"Turn {turn_id} is closed"
        )

    # --- reading -------------------------------------------------------------------------

    def state(self) -> State:
        """The State as a new Turn would see it now, with every unconsumed message."""
        proj = self.refresh()
        return render(proj, proj.inbox)

    def output(self, cell_id: int, stream: Literal["stdout", "stderr"] = "stdout") -> str | None:
        """The full retained output of one Execution's stream, read from the Journal (None
        when the Cell never had an Execution)."""
        if self.journal.find(str(cell_id), "execution_started") is None:
            return None
        head, tail, elided = "", "", 0
        for event in self.journal.find_all(str(cell_id), "output"):
            if event["stream"] == stream:
                head += event.get("text", "")
                tail, elided = event.get("tail", tail), event.get("elided", elided)
        return joined(head, tail, elided)

    # --- the model -----------------------------------------------------------------------

    def set_price(self, model: str, price: dict[str, float]) -> None:
        """Store a model's price (``run --price``) so later jobs count cost the same way."""
        with self.journal.write() as w:
            if w.proj.prices.get(model) != price:
                w.append(ev.price_set(model, price))

    def begin_attempt(
        self, turn_id: str, model: str, request: Any, fallback_from: str | None = None
    ) -> int:
        """Commit a model attempt before its request is sent; returns its number.
        ``fallback_from``: the model this attempt replaces (a fallback after a refusal)."""
        fingerprint = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()
        with self.journal.write() as w:
            turn = w.proj.turn
            attempt = (turn["attempts"] + turn["transient"] + 1) if turn else 1
            w.append(ev.model_attempt(turn_id, attempt, fingerprint, model, fallback_from))
        crash_point("attempt_after_commit")
        return attempt

    def record_reply(self, turn_id: str, attempt: int, reply: ModelReply) -> None:
        """Commit a complete reply (admissible or not) before anything acts on it."""
        crash_point("model_reply_before_commit")
        with self.journal.write() as w:
            w.append(
                ev.model_response(
                    {
                        "turn_id": turn_id,
                        "attempt": attempt,
                        "ok": reply.invalid is None,
                        "patch": reply.patch if reply.invalid is None else None,
                        "invalid": reply.invalid,
                        "usage": reply.usage.to_dict(),
                        "rationale": reply.rationale,
                        "raw": reply.raw,
                    }
                )
            )
        crash_point("reply_before_admit")

    def record_failure(
        self,
        turn_id: str,
        attempt: int,
        error: str,
        *,
        transient: bool,
        not_before: float,
        retry_since: float | None,
        usage: dict[str, Any] | None,
        gave_up: str | None = None,
    ) -> None:
        """Commit a failed attempt; ``gave_up`` says why a transient one is not retried."""
        data: ev.ModelResponse = {
            "turn_id": turn_id,
            "attempt": attempt,
            "ok": False,
            "error": error,
            "transient": transient,
            "not_before": not_before,
            "retry_since": retry_since,
            "usage": usage,
        }
        if gave_up is not None:
            data["gave_up"] = gave_up
        with self.journal.write() as w:
            w.append(ev.model_response(data))

    # --- Timers (any process; usually a Cell through rio_ci.api) --------------------------

    def set_timer(
        self, timer_id: str, deadline: float, payload: Any, cell_id: int | None = None
    ) -> dict[str, Any]:
        """Commit a Timer. Identical re-registration is harmless; a conflicting one (or one
        whose id already fired with other content) is rejected."""
        problem = timer_problem(timer_id, deadline, payload)
        if problem:
            raise Rejected(problem)
        size = encoded_size(payload)
        with self.journal.write() as w:
            _not_ended(w, "it accepts no Timers")
            if size > w.proj.limits.output_bytes:
                raise Rejected(f"Timer payload is {size} bytes, over output_bytes")
            existing = self.journal.find(timer_id, "timer_set")
            if existing is not None:
                if existing["deadline"] != deadline or not json_equal(existing["payload"], payload):
                    raise Rejected(
                        f"Timer {timer_id} already exists with a different deadline or payload"
                    )
                return {"id": timer_id, "seq": existing["seq"], "duplicate": True}
            if len(w.proj.timers) >= w.proj.limits.pending_cells:
                raise Rejected(
                    f"too many waiting Timers (pending_cells={w.proj.limits.pending_cells})"
                )
            seq = w.append(ev.timer_set(timer_id, float(deadline), payload, cell_id))
        return {"id": timer_id, "seq": seq, "duplicate": False}

    def cancel_timer(self, timer_id: str) -> dict[str, Any]:
        """Withdraw a waiting Timer. Its id stays used: it can never be set again."""
        with self.journal.write() as w:
            if timer_id not in w.proj.timers:
                return {"id": timer_id, "cancelled": False}
            w.append(ev.timer_cancelled(timer_id))
        return {"id": timer_id, "cancelled": True}

    def fire_timer(self, timer_id: str) -> None:
        """A due Timer's one Inbox message (a second call commits nothing)."""
        crash_point("timer_due_before_commit")
        with self.journal.write() as w:
            if timer_id in w.proj.timers:
                w.append(ev.timer_fired(timer_id))
        crash_point("timer_after_commit")

    # --- Executions (the Owner) ----------------------------------------------------------

    def authorize_launch(self, cell_id: int, token: str) -> bool:
        """Commit ``started`` before any process exists. False, committing nothing, when a
        Control arrived meanwhile: it goes first (docs/sessions.md) and the Execution stays
        queued."""
        with self.journal.write() as w:
            if w.proj.controls:
                return False
            w.append(ev.execution_started(cell_id, token))
        crash_point("launch_before_spawn")
        return True

    def register_worker(self, cell_id: int, identity: ev.WorkerRecord) -> None:
        """Commit the Worker's identity before its gate opens; not synced: it must outlive
        the Owner (a WAL does), not the boot (a power cut leaves no process to find)."""
        with self.journal.write(synced=False) as w:
            w.append(ev.worker_registered(cell_id, identity))

    def record_output(self, cell_id: int, pieces: Sequence[ev.OutputPiece]) -> None:
        """Commit retained output; nothing is shown to anyone before this returns."""
        if pieces:
            with self.journal.write() as w:
                _append_output(w, cell_id, pieces)

    def record_result(
        self,
        cell_id: int,
        result: ev.Result,
        *,
        output: Sequence[ev.OutputPiece] = (),
        cancel_note: int | None = None,
        egress: Sequence[ev.Egress] = (),
    ) -> int:
        """Commit the last output, the connections still to record (``egress``), the result
        and its Inbox notice in one transaction (with the cancel Control that stopped it, if
        any); returns the result's seq."""
        with self.journal.write() as w:
            _append_output(w, cell_id, output)
            for connections in egress:
                w.append(ev.egress(connections))
            seq = _record_result(w, cell_id, result)
            if cancel_note is not None:
                w.append(ev.control_applied(cancel_note, "cancel", target_cell_id=cell_id))
        return seq

    def record_egress(self, egress: Sequence[ev.Egress]) -> None:
        """Commit connections the egress proxy accounted for (docs/network.md)."""
        with self.journal.write() as w:
            for connections in egress:
                w.append(ev.egress(connections))

    def mark_lost(self, lost: Sequence[tuple[int, str]]) -> None:
        """Recovery: every ``started`` Execution among ``lost`` (cell id, reason) becomes an
        UnknownExecution, once: one already finished (by an earlier recovery, or by another
        process meanwhile) is left as it is, so recovering twice commits nothing."""
        with self.journal.write() as w:
            for cell_id, reason in lost:
                if w.proj.executions[str(cell_id)]["phase"] == "started":
                    _record_result(w, cell_id, ev.unknown(cell_id, reason, worker_stopped=True))

    def cancel_queued(self, note_id: int, target: int) -> None:
        """Apply a cancel Control whose target is not running: a queued target is cancelled
        before launch; anything else only marks the Control applied."""
        with self.journal.write() as w:
            ex = w.proj.executions.get(str(target))
            if ex is not None and ex["phase"] == "queued":
                _record_result(w, target, ev.cancelled(target, "cancelled_before_launch"))
            w.append(ev.control_applied(note_id, "cancel", target_cell_id=target))
        crash_point("control_after_commit")

    def record_validator(self, data: ev.ValidatorResult) -> None:
        with self.journal.write() as w:
            w.append(ev.validator_result(data))

    def conclude_success(self, note_id: int, problems: list[str]) -> bool:
        """End the run in success unless ``problems`` (or what others committed meanwhile)
        stand against it; then the Control is rejected with an observation saying why."""
        crash_point("conclusion_before_commit")
        with self.journal.write() as w:
            problems = problems or w.proj.success_problems()
            if problems:
                w.append(ev.control_rejected(note_id, "success rejected: " + "; ".join(problems)))
                return False
            w.append(ev.control_applied(note_id, "conclusion", result="success"))
            w.append(ev.run_ended("success", "conclusion accepted", note_id=note_id, unresolved=[]))
        return True

    def end_in_failure(
        self, reason: str, *, note_id: int | None = None, cleanup_error: str | None = None
    ) -> None:
        """End the run in failure: queued work is cancelled and the unresolved uncertainty is
        kept in the ending. A run that has already ended is left as it is."""
        with self.journal.write() as w:
            if w.proj.ended:
                return
            for ex in w.proj.queued():
                _record_result(
                    w, ex["cell_id"], ev.cancelled(ex["cell_id"], "cancelled_by_failure")
                )
            if note_id is not None:
                w.append(ev.control_applied(note_id, "conclusion", result="failure"))
            unresolved: list[ev.Unresolved] = [
                {
                    "cell_id": e["cell_id"],
                    "reason": result.get("reason"),
                    "evidence_refs": result.get("evidence_refs", []),
                }
                for e in w.proj.unresolved()
                if (result := e["result"]) is not None  # an unresolved one has a result
            ]
            w.append(
                ev.run_ended(
                    "failure",
                    reason,
                    note_id=note_id,
                    unresolved=unresolved,
                    cleanup_error=cleanup_error,
                )
            )


def _record_rejection(w: Writer, turn_id: str, rejection: Rejection) -> Rejection:
    """Commit a rejected patch as the Journal keeps one: its digest, size and reason."""
    w.append(ev.patch_rejected(turn_id, rejection.reason, rejection.digest, rejection.size))
    return rejection


def _not_ended(w: Writer, what: str) -> Projection:
    if w.proj.ended:
        raise RunEnded(f"the run has ended ({w.proj.ended['result']}); {what}")
    return w.proj


def _append_output(w: Writer, cell_id: int, pieces: Sequence[ev.OutputPiece]) -> None:
    for piece in pieces:
        w.append(
            ev.output(cell_id, piece.stream, text=piece.text, tail=piece.tail, elided=piece.elided)
        )


def _record_result(w: Writer, cell_id: int, result: ev.Result) -> int:
    """A result and its Inbox notice as one event (an UnknownExecution's evidence: it)."""
    seq = w.proj.last_seq + 1
    if result["type"] == "UnknownExecution":
        result = {**result, "evidence_refs": [f"session:event:{seq}"]}
    return w.append(ev.execution_finished(cell_id, result))
