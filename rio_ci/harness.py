"""The harness: model rounds against the durable core.

    prepare a Turn → ask the model → admit its patch → supervise the work → repeat

Every attempt is committed before the request is sent; a complete reply is committed
before it is admitted, so a restarted run admits a saved reply without asking again. The
Owner keeps supervising while a request is in flight.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rio_ci.core.admission import Rejection
from rio_ci.crashpoints import crash_point
from rio_ci.errors import ModelError, Rejected, RioError, RunEnded, UsageError
from rio_ci.model.base import Model, ModelReply, ModelRequest
from rio_ci.owner import Owner, handle_signals

BACKOFF_CAP = 30.0
IDLE_REASON = ("the last patch left no work, no Timer and no external wake-up source: "
               "add work, set a Timer, or conclude")


@dataclass
class Outcome:
    status: str  # succeeded | failed | waiting | deadline | interrupted
    next_wake: float | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "next_wake": self.next_wake, "reason": self.reason}


def build_model(spec: str) -> Model:
    kind, _, rest = spec.partition(":")
    if kind == "scripted" and rest:
        from rio_ci.model.scripted import ScriptedModel

        return ScriptedModel(rest)
    if kind == "anthropic" and rest:
        from rio_ci.model.anthropic import AnthropicModel

        return AnthropicModel(rest)
    raise UsageError(f"--model must be anthropic:MODEL or scripted:FILE, got {spec!r}")


class Harness:
    def __init__(self, owner: Owner, model: Model, *, external_wakeups: bool = False):
        self.owner = owner
        self.session = owner.session
        self.model = model
        self.external_wakeups = external_wakeups

    def run(self, deadline: float | None = None) -> Outcome:
        """Rounds until the run ends, waits, is interrupted or passes ``deadline``
        (a ``time.monotonic()`` value)."""
        self.deadline = deadline
        self.owner.recover()
        while True:
            stop = self.supervise_until_idle()
            if stop is not None:
                return stop
            proj = self.session.refresh()
            if proj.ended:
                return self.ended()
            if proj.turn is None and not proj.inbox and proj.accepted_turns > 0:
                wait = self.idle()
                if wait is not None:
                    return wait
                continue
            # A reply committed before a crash is already paid for: admit it as the cut-off
            # run would have; budgets apply to the next request.
            saved = proj.turn is not None and (proj.turn["response"] or {}).get("ok")
            problem = None if saved else self.over_budget()
            if problem:
                self.owner.end_in_failure(problem)
                continue
            stop = self.round()
            if stop is not None:
                return stop

    # --- the steps of the loop -----------------------------------------------------------

    def supervise_until_idle(self) -> Outcome | None:
        """Run the Owner until nothing is runnable — or until input arrives that the model
        should see while work goes on (a comment, a check, a Timer: anything but execution
        results, which are batched until the queue drains)."""
        while not self.owner.idle():
            stop = self.interrupted()
            if stop is not None:
                return stop
            self.owner.tick()
            if self.outside_input():
                break
        return self.interrupted()

    def outside_input(self) -> bool:
        proj = self.session.proj
        return proj.turn is not None or any(m["kind"] != "execution" for m in proj.inbox)

    def round(self) -> Outcome | None:
        """One Turn: ask (or re-use a committed reply) and admit. Retries are bounded."""
        turn = self.session.prepare_turn()
        state = self.session.proj.turn
        assert state is not None
        saved = state["response"]
        if saved is not None and saved["ok"]:
            reply_patch = saved["patch"]  # committed before a crash: admit, don't re-ask
        else:
            if state["attempts"] >= self.session.limits["model_attempts"]:
                last = state["last_rejection"] or (saved or {}).get("error")
                self.owner.end_in_failure(f"model_attempts exhausted for {turn['turn_id']}: "
                                          f"{last}")
                return None
            stop = self.wait_until(state["not_before"])
            if stop is not None:
                return stop
            result = self.ask(turn, state)
            if isinstance(result, Outcome):
                return result
            if result is None:
                return None
            reply_patch = result.patch
        try:
            decision = self.session.step(turn["turn_id"], reply_patch)
        except (Rejected, RunEnded):
            # Another process may step while we run (SPEC §11): if it closed this Turn or
            # ended the run while the model thought, the reply is moot; go on from what is
            # committed. Anything else is a real error.
            proj = self.session.refresh()
            still_open = proj.turn is not None and proj.turn["turn_id"] == turn["turn_id"]
            if proj.ended is None and still_open:
                raise
            return None
        if isinstance(decision, Rejection):
            return None  # the reason is committed; the next attempt shows it
        return None

    def ask(self, turn: dict[str, Any], state: dict[str, Any]) -> ModelReply | Outcome | None:
        proj = self.session.proj
        request = ModelRequest(
            turn_id=turn["turn_id"], state=turn["state"], round_index=proj.accepted_turns + 1,
            feedback=state["last_rejection"],
            delivered_refs=[f"session:event:{m['seq']}" for m in turn["state"]["runtime"]["inbox"]])
        attempt = state["attempts"] + 1
        fingerprint = hashlib.sha256(json.dumps(
            [request.state, request.feedback], sort_keys=True).encode()).hexdigest()
        with self.session.journal.write() as w:
            w.append("model_attempt", {"turn_id": turn["turn_id"], "attempt": attempt,
                                       "fingerprint": fingerprint, "not_before": 0.0,
                                       "model": self.model.name}, ref=turn["turn_id"])
        crash_point("attempt_after_commit")
        box: dict[str, Any] = {}
        thread = threading.Thread(target=self._call, args=(request, box), daemon=True)
        thread.start()
        while thread.is_alive():  # the Owner keeps supervising while the model thinks
            stop = self.interrupted()
            if stop is not None:
                return stop
            if not self.owner.tick(wait=0.02):
                thread.join(0.05)
        if "reply" in box:
            reply: ModelReply = box["reply"]
            crash_point("model_reply_before_commit")
            usage = {"input_tokens": reply.usage.all_input_tokens,
                     "output_tokens": reply.usage.output_tokens, "cost_usd": reply.usage.cost_usd}
            with self.session.journal.write() as w:
                w.append("model_response", {"turn_id": turn["turn_id"], "attempt": attempt,
                                            "ok": True, "patch": reply.patch, "usage": usage,
                                            "raw": reply.raw}, ref=turn["turn_id"])
            crash_point("reply_before_admit")
            return reply
        error: ModelError = box["error"]
        backoff = error.retry_after if error.retry_after is not None else min(
            BACKOFF_CAP, 2.0 ** (attempt - 1))
        with self.session.journal.write() as w:
            w.append("model_response", {"turn_id": turn["turn_id"], "attempt": attempt,
                                        "ok": False, "error": str(error),
                                        "retryable": error.transient, "usage": None,
                                        "not_before": time.time() + backoff},
                     ref=turn["turn_id"])
        if not error.transient:
            self.owner.end_in_failure(f"model error: {error}")
        return None

    def _call(self, request: ModelRequest, box: dict[str, Any]) -> None:
        try:
            box["reply"] = self.model.ask(request)
        except ModelError as exc:
            box["error"] = exc
        except Exception as exc:  # a provider bug must not kill the Owner
            box["error"] = ModelError(f"{type(exc).__name__}: {exc}", transient=True)

    def idle(self) -> Outcome | None:
        proj = self.session.proj
        if proj.timers:
            wake = min(t["deadline"] for t in proj.timers.values())
            if self.deadline is not None and wake - time.time() < self.deadline - time.monotonic():
                return self.wait_until(wake)
            return Outcome("waiting", next_wake=wake)
        if self.external_wakeups:
            return Outcome("waiting")
        if proj.idle_streak >= self.session.limits["model_attempts"]:
            self.owner.end_in_failure(f"invalid idle {proj.idle_streak} times in a row: "
                                      "no work, no Timer, no external wake-up source")
            return None
        n = proj.idle_streak + 1
        with self.session.journal.write() as w:
            message_id = f"idle:{w.next_seq()}"
            message = {"id": message_id, "kind": "invalid_idle",
                       "payload": {"reason": IDLE_REASON, "count": n}}
            w.append("message_received", {"message": message}, ref=message_id)
        return None

    def over_budget(self) -> str | None:
        usage, limits = self.session.proj.usage, self.session.limits
        if usage["rounds"] >= limits["rounds"]:
            return f"rounds budget exhausted ({usage['rounds']} of {limits['rounds']})"
        tokens = usage["input_tokens"] + usage["output_tokens"]
        if tokens >= limits["tokens"]:
            return f"token budget exhausted ({tokens} of {limits['tokens']})"
        if usage["cost_usd"] >= limits["cost_usd"]:
            return f"cost budget exhausted (${usage['cost_usd']:.4f} of ${limits['cost_usd']})"
        size = self.session.journal.size_bytes()
        if size >= limits["storage_bytes"]:
            return f"storage budget exhausted ({size} bytes of {limits['storage_bytes']})"
        return None

    def wait_until(self, when: float) -> Outcome | None:
        while time.time() < when:
            stop = self.interrupted()
            if stop is not None:
                return stop
            if not self.owner.tick(wait=0.05):
                time.sleep(min(0.05, max(0.0, when - time.time())))
        return None

    def interrupted(self) -> Outcome | None:
        if self.owner.interrupted.is_set():
            return Outcome("interrupted", reason="signal")
        if self.deadline is not None and time.monotonic() > self.deadline:
            return Outcome("deadline", next_wake=self.next_wake())
        return None

    def ended(self) -> Outcome:
        ended = self.session.proj.ended
        assert ended is not None
        status = "succeeded" if ended["result"] == "success" else "failed"
        return Outcome(status, reason=ended["reason"])

    def next_wake(self) -> float | None:
        timers = self.session.proj.timers
        return min((t["deadline"] for t in timers.values()), default=None)


def run_command(db: str, spec: str, *, deadline: float | None,
                emit: Callable[[Any], None]) -> int:
    model = build_model(spec)
    owner = Owner(db)
    restore = handle_signals(owner.interrupted)
    limit = None if deadline is None else time.monotonic() + deadline
    try:
        outcome = Harness(owner, model).run(limit)
        if owner.running is not None:
            owner.stop_running("owner_interrupted" if outcome.status == "interrupted"
                               else "owner_deadline")
    finally:
        restore()
        with contextlib.suppress(RioError):
            owner.close()
    result = outcome.to_dict()
    if os.environ.get("RIO_RUN_VERBOSE"):
        result["ran"] = owner.ran
    emit(result)
    return 1 if outcome.status in ("failed", "interrupted") else 0
