"""The Session façade: create/open, receive, prepare a Turn, step, read State.

Any process may call these while one Owner runs: each write is one transaction of the
Journal that first catches up with what others committed and validates against it.
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rio_ci.core.admission import Accepted, Facts, Rejection, decide, digest
from rio_ci.core.limits import Limits
from rio_ci.core.reducer import OBSERVATION_KINDS, Projection
from rio_ci.core.state import EVIDENCE_REF, encoded_size, is_text_safe, json_equal
from rio_ci.core.view import render
from rio_ci.crashpoints import crash_point
from rio_ci.errors import Rejected, RunEnded
from rio_ci.journal import Journal

RESERVED_PREFIXES = ("execution:", "control:", "timer:", "idle:")
# Kinds only the harness writes: an outside message must not pass for one of its own.
HARNESS_KINDS = frozenset({"execution", "timer", "control_rejected", "invalid_idle"})
MAX_DELIVERED = 64  # messages folded into one Turn, at most
_KIND = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")
_NOT_TEXT = "a string holds a lone surrogate (\\ud800-\\udfff), which is not text"


@dataclass(frozen=True)
class Receipt:
    turn_id: str
    revision: int
    cell_ids: list[int]
    event: int

    def to_dict(self) -> dict[str, Any]:
        return {"turn_id": self.turn_id, "revision": self.revision, "cell_ids": self.cell_ids,
                "event": self.event}


class Session:
    def __init__(self, journal: Journal):
        self.journal = journal

    @classmethod
    def create(cls, path: str | os.PathLike[str], goal: str, *, cwd: str | None = None,
               validators: list[list[str]] | None = None, limits: Limits | None = None,
               pass_env: list[str] | None = None, synchronous: str = "FULL") -> Session:
        if not goal.strip():
            raise ValueError("the goal must not be blank")
        session_id = uuid.uuid4().hex
        workdir = str(Path(cwd or os.getcwd()).resolve())
        first = {"session_id": session_id, "goal": goal, "cwd": workdir,
                 "validators": validators or [], "limits": (limits or Limits()).to_dict(),
                 "pass_env": sorted(set(pass_env or []))}
        return cls(Journal.create(path, session_id, first, synchronous=synchronous))

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, verify: bool = False,
             synchronous: str = "FULL") -> Session:
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
    def limits(self) -> dict[str, Any]:
        return self.proj.limits

    # --- Inbox ---------------------------------------------------------------------------

    def receive(self, message_id: str, kind: str, payload: Any) -> dict[str, Any]:
        """Commit an external Inbox message; returns ``{"id", "seq", "duplicate"}``."""
        if not isinstance(message_id, str) or not message_id.strip() or len(message_id) > 200:
            raise Rejected("a message id must be a non-empty string of at most 200 characters")
        if message_id.startswith(RESERVED_PREFIXES):
            raise Rejected(f"message ids starting {message_id.split(':')[0]}: are reserved "
                           "for the harness")
        if not isinstance(kind, str) or not _KIND.match(kind):
            raise Rejected("a message kind must be a lowercase word (a-z, 0-9, _ . -)")
        if kind in HARNESS_KINDS:
            raise Rejected(f"message kind {kind} is reserved for the harness")
        if not is_text_safe([message_id, payload]):
            raise Rejected(_NOT_TEXT)
        size = encoded_size(payload)
        with self.journal.write(crash_before="inbox_before_commit") as w:
            if w.proj.ended:
                raise RunEnded("the run has ended; it accepts no new messages")
            limit = w.proj.limits["output_bytes"]
            if size > limit:
                raise Rejected(f"payload is {size} bytes, over output_bytes={limit}")
            message = {"id": message_id, "kind": kind, "payload": payload}
            existing = self.journal.find(message_id, "message_received")
            if existing is not None:
                if not json_equal(existing["message"], message):
                    raise Rejected(f"message {message_id} was already received with "
                                   "different content")
                return {"id": message_id, "seq": existing["seq"], "duplicate": True}
            if len(w.proj.inbox) >= w.proj.limits["inbox_messages"]:
                raise Rejected(f"the Inbox is full ({len(w.proj.inbox)} unconsumed messages); "
                               "retry later")
            seq = w.append("message_received", {"message": message}, ref=message_id)
        crash_point("inbox_after_commit")
        return {"id": message_id, "seq": seq, "duplicate": False}

    # --- Turns ---------------------------------------------------------------------------

    def prepare_turn(self) -> dict[str, Any]:
        """Open a Turn with a fixed snapshot, or return the one already open."""
        with self.journal.write() as w:
            proj = w.proj
            if proj.ended:
                raise RunEnded(f"the run has ended ({proj.ended['result']}); no new Turns")
            if proj.turn is None:
                delivered = self._select_inbox(proj)
                state = render(proj, delivered)
                turn_id = f"turn-{proj.accepted_turns + 1}-{uuid.uuid4().hex[:12]}"
                w.append("turn_prepared", {"turn_id": turn_id, "revision": proj.revision,
                                           "delivered": [m["id"] for m in delivered],
                                           "state": state}, ref=turn_id)
            turn = proj.turn
            assert turn is not None
        crash_point("turn_after_commit")
        return {"turn_id": turn["turn_id"], "state": turn["state"],
                "delivered": list(turn["delivered"])}

    @staticmethod
    def _select_inbox(proj: Projection) -> list[dict[str, Any]]:
        """A bounded set of unconsumed messages, in receipt order, that fits the context."""
        chosen: list[dict[str, Any]] = []
        budget = proj.limits["context_bytes"] - encoded_size(render(proj, []))
        for message in proj.inbox[:MAX_DELIVERED]:
            budget -= encoded_size(message) + 1
            if budget < 0 and chosen:
                break
            chosen.append(message)
        return chosen

    def step(self, turn_id: str, patch: Any) -> Receipt | Rejection:
        """Admit one patch for a Turn. Identical re-submission returns the original Receipt."""
        ops = patch["patch"] if isinstance(patch, dict) and set(patch) == {"patch"} else patch
        if not is_text_safe(turn_id):
            raise Rejected(f"unknown Turn: {_NOT_TEXT}")
        with self.journal.write(crash_before="accept_before_commit") as w:
            proj = w.proj
            accepted = self.journal.find(turn_id, "patch_accepted")
            if accepted is not None:
                if accepted["digest"] == digest(ops):  # only a re-submission needs it
                    return Receipt(**accepted["receipt"])
                raise Rejected(f"conflict: Turn {turn_id} already accepted a different patch")
            if proj.ended:
                raise RunEnded(f"the run has ended ({proj.ended['result']}); no new patches")
            if proj.turn is None or proj.turn["turn_id"] != turn_id:
                if self.journal.find(turn_id, "turn_prepared") is None:
                    raise Rejected(f"unknown Turn {turn_id}")
                raise Rejected(f"Turn {turn_id} is closed")
            decision = decide(proj, proj.turn, ops, self._facts(proj, ops))
            if isinstance(decision, Rejection):
                # A lone surrogate cannot be stored as text: keep such a patch JSON-escaped.
                stored = ops if is_text_safe(ops) else json.dumps(ops)
                w.append("patch_rejected", {"turn_id": turn_id, "reason": decision.reason,
                                            "patch": stored}, ref=turn_id)
                return decision
            receipt = self._accept(w, turn_id, ops, decision)
        crash_point("accept_after_commit")
        return receipt

    def _accept(self, w: Any, turn_id: str, ops: list[Any], d: Accepted) -> Receipt:
        seq = w.next_seq()
        receipt = Receipt(turn_id=turn_id, revision=d.revision,
                          cell_ids=[c["id"] for c in d.cells], event=seq)
        w.append("patch_accepted", {
            "turn_id": turn_id, "patch": ops, "digest": d.digest, "revision": d.revision,
            "next_cell_id": d.next_cell_id, "cells": d.cells, "heads": d.heads,
            "removed": d.removed, "executions": d.executions, "controls": d.controls,
            "consumed": d.consumed, "pause_cleared": d.pause_cleared,
            "receipt": receipt.to_dict()}, ref=turn_id)
        return receipt

    def _facts(self, proj: Projection, ops: Any) -> Facts:
        """Journal look-ups admission needs: cited observations, historical cancel targets."""
        cited: set[int] = set()
        targets: set[int] = set()
        for op in ops if isinstance(ops, list) else []:
            value = op.get("value") if isinstance(op, dict) else None
            if not isinstance(value, dict) or value.get("kind") != "note":
                continue
            refs = value.get("evidence_refs")
            for ref in refs if isinstance(refs, list) else []:
                match = EVIDENCE_REF.match(ref) if isinstance(ref, str) else None
                # Only seqs up to the last event can name one (and fit an SQLite integer).
                if match and int(match.group(1)) <= proj.last_seq:
                    cited.add(int(match.group(1)))
            target = value.get("target_cell_id")
            if value.get("role") == "cancel" and isinstance(target, int):
                targets.add(target)
        observations = {seq: kind for seq, kind in self.journal.kinds_of(cited).items()
                        if kind in OBSERVATION_KINDS}
        recorded = {t for t in targets
                    if self.journal.find(str(t), "execution_finished") is not None}
        return Facts(observations=observations, recorded_executions=frozenset(recorded))

    # --- reading -------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The State as a new Turn would see it now, with every unconsumed message."""
        proj = self.refresh()
        return render(proj, proj.inbox)

    # --- Timers (any process; usually a Cell through rio_ci.api) --------------------------

    def set_timer(self, timer_id: str, deadline: float, payload: Any,
                  cell_id: int | None = None) -> dict[str, Any]:
        """Commit a Timer. Identical re-registration is harmless; a conflicting one (or one
        whose id already fired with other content) is rejected."""
        if not isinstance(timer_id, str) or not timer_id.strip() or len(timer_id) > 200:
            raise Rejected("a Timer id must be a non-empty string of at most 200 characters")
        if (isinstance(deadline, bool) or not isinstance(deadline, int | float)
                or not math.isfinite(deadline)):
            raise Rejected("a Timer deadline must be a finite Unix time in seconds")
        if not is_text_safe([timer_id, payload]):
            raise Rejected(_NOT_TEXT)
        size = encoded_size(payload)
        with self.journal.write() as w:
            if w.proj.ended:
                raise RunEnded("the run has ended; it accepts no Timers")
            if size > w.proj.limits["output_bytes"]:
                raise Rejected(f"Timer payload is {size} bytes, over output_bytes")
            existing = self.journal.find(timer_id, "timer_set")
            if existing is not None:
                if existing["deadline"] != deadline or not json_equal(existing["payload"],
                                                                      payload):
                    raise Rejected(f"Timer {timer_id} already exists with a different "
                                   "deadline or payload")
                return {"id": timer_id, "seq": existing["seq"], "duplicate": True}
            if len(w.proj.timers) >= w.proj.limits["pending_cells"]:
                raise Rejected(f"too many waiting Timers (pending_cells="
                               f"{w.proj.limits['pending_cells']})")
            seq = w.append("timer_set", {"id": timer_id, "deadline": float(deadline),
                                         "payload": payload, "cell_id": cell_id}, ref=timer_id)
        return {"id": timer_id, "seq": seq, "duplicate": False}

    def cancel_timer(self, timer_id: str) -> dict[str, Any]:
        """Withdraw a waiting Timer. Its id stays used: it can never be set again."""
        with self.journal.write() as w:
            if timer_id not in w.proj.timers:
                return {"id": timer_id, "cancelled": False}
            w.append("timer_cancelled", {"id": timer_id}, ref=timer_id)
        return {"id": timer_id, "cancelled": True}
