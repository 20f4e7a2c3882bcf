"""The round loop: model rounds against the durable core.

    supervise the work → prepare a Turn → ask the model → admit its patch → repeat

Every attempt is committed before the request is sent and every complete reply before it is
admitted, so a restarted run admits a saved reply without asking again. A reply that cannot be
admitted, or a rejected patch, uses up one of the Turn's ``model_attempts`` and its reason is
told to the model next time; a transient provider failure is retried with persisted backoff
for up to ``provider_retry_seconds`` without using one up. The Owner keeps supervising while a
request is in flight.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rio_ci.core.entities import Response, Turn
from rio_ci.core.errors import ModelError, Rejected, RunEnded
from rio_ci.core.text import escape_control
from rio_ci.core.timeline import JOB_MARK
from rio_ci.model.base import Model, ModelReply, ModelRequest, Picture, Usage, strict_reply
from rio_ci.model.environment_block import environment_block
from rio_ci.reports.live import LiveLog
from rio_ci.rounds.guidance import read_guidance
from rio_ci.run.owner import Owner

# An upper bound of one attempt's size, for counting an attempt of unknown cost (a token is
# at least two bytes of JSON; the system prompt and tool are far below PROMPT_TOKENS).
PROMPT_TOKENS = 20_000
MAX_REPLY_TOKENS = 64_000  # the most max_tokens asks for (at xhigh and max)
BACKOFF_FIRST = 1.0
BACKOFF_CAP = 30.0
IDLE_REASON = (
    "the last patch left no work, no Timer and no external wake-up source: "
    "add work, set a Timer, or conclude"
)


@dataclass
class Outcome:
    status: str  # succeeded | failed | waiting | deadline | interrupted
    next_wake: float | None = None
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "next_wake": self.next_wake, "reason": self.reason}


class RoundLoop:
    def __init__(
        self,
        owner: Owner,
        model: Model,
        *,
        live: LiveLog | None = None,
        external_wakeups: bool = False,
        fallback: Model | None = None,
        between_rounds: Callable[[], object] | None = None,
        job_label: str | None = None,
    ):
        """``between_rounds`` is called between rounds and while the loop waits for work
        or a Timer (often: it must decide cheaply when to do something); it may commit Inbox
        messages or end the run, which the loop then sees. The GitHub layer listens for
        new comments there (docs/github.md "Steering a running job")."""
        self.owner = owner
        self.session = owner.session
        self.model = model
        # asked instead of ``model`` for the rest of a Turn once a reply of it was a refusal
        self.fallback = fallback
        self._images: dict[str, tuple[str, str]] = {}  # digest → (media type, base64)
        self.live = live
        if live is not None:
            owner.validating = live.validator_starting
        self.external_wakeups = external_wakeups
        # Called after each round (the GitHub job rewrites its progress comment, paced).
        self.between_rounds = between_rounds
        # The name of this job in the Session's history (a ``job`` watermark), or None.
        self.job_label = job_label
        self.deadline: float | None = None
        self.warned: set[str] = set()

    def run(self, deadline: float | None = None) -> Outcome:
        """Rounds until the run ends, waits, is interrupted or passes ``deadline``
        (a ``time.monotonic()`` value)."""
        self.deadline = self.owner.deadline = deadline
        if self.job_label is not None and not self.session.refresh().ended:
            self.session.set_watermark(JOB_MARK, self.job_label)
        self.owner.recover()
        while True:
            self.listen()
            stop = self.supervise_until_idle()
            if stop is not None:
                return stop
            proj = self.session.refresh()
            if proj.ended:
                return self.ended()
            if proj.turn is None and not proj.inbox and proj.accepted_turns > 0:
                stop = self.idle()
            elif (problem := self.over_budget()) is not None:
                self.owner.end_in_failure(problem)
            else:
                stop = self.round()  # the loop's next listen() calls between_rounds
            if stop is not None:
                return stop

    # --- the steps of the loop -----------------------------------------------------------

    def supervise_until_idle(self) -> Outcome | None:
        """Run the Owner until nothing is runnable — or until input arrives that the model
        should see while work goes on (a comment, a check, a Timer: anything but execution
        results, which are batched until the queue drains)."""
        while not self.owner.idle():
            if (stop := self.interrupted()) is not None:
                return stop
            self.owner.tick()
            self.tell()
            self.listen()
            if self.outside_input():
                break
        return self.interrupted()

    def round(self) -> Outcome | None:
        """One Turn: ask (or re-use a committed reply) and admit."""
        turn = self.session.prepare_turn()
        self.tell()
        open_turn = self.session.proj.turn
        assert open_turn is not None
        saved = open_turn["response"]
        if saved is not None and saved["ok"]:
            patch = saved["patch"]  # committed before a crash: admit, don't re-ask
        else:
            if (problem := self.turn_spent(open_turn)) is not None:
                self.owner.end_in_failure(problem)
                return None
            if (stop := self.wait_until(open_turn["not_before"])) is not None:
                return stop
            answer = self.ask(turn, open_turn)
            if not isinstance(answer, ModelReply) or answer.patch is None:
                return answer if isinstance(answer, Outcome) else None
            patch = answer.patch
        self.admit(turn["turn_id"], patch)
        self.tell()
        return None

    def ask(self, turn: dict[str, Any], open_turn: Turn) -> ModelReply | Outcome | None:
        """One attempt of the open Turn (``open_turn``: its record in the projection):
        committed first, then the request, then its outcome."""
        settings = self.session.proj.session
        request = ModelRequest(
            turn_id=turn["turn_id"],
            state=turn["state"],
            round_index=self.session.proj.accepted_turns + 1,
            feedback=open_turn["feedback"],
            delivered_refs=[f"session:event:{m['seq']}" for m in turn["state"]["runtime"]["inbox"]],
            guidance=read_guidance(Path(settings["cwd"]), self.warn_once),
            environment_block=environment_block(
                Path(settings["cwd"]), secrets=settings.get("secrets", [])
            ),
            images=self.pictures(turn["state"]),
        )
        model = self.fallback if self.fallback is not None and open_turn["refused"] else self.model
        attempt = self.session.begin_attempt(
            turn["turn_id"],
            model.name,
            [request.state, request.feedback],
            fallback_from=self.model.name if model is not self.model else None,
        )
        self.tell()  # "asking …" is told before the answer can come
        box: dict[str, Any] = {}
        thread = threading.Thread(target=self._call, args=(model, request, box), daemon=True)
        thread.start()
        while thread.is_alive():  # the Owner keeps supervising while the model thinks
            if (stop := self.interrupted()) is not None:
                return stop
            if not self.owner.tick(wait=0.02):
                thread.join(0.05)
            self.tell()
        if "reply" in box:
            reply = strict_reply(box["reply"])
            self.session.record_reply(turn["turn_id"], attempt, reply)
            return reply
        self.failed(turn["turn_id"], attempt, open_turn, box["error"])
        return None

    def pictures(self, state: dict[str, Any]) -> tuple[Picture, ...]:
        """The goal's pictures and those of the Inbox messages ``state`` shows (stored by
        digest; docs/github.md): sent while their text is in the State."""
        wanted: list[tuple[str, str, dict[str, Any]]] = [
            ("goal", "the goal", ref)
            for ref in self.session.proj.watermarks.get("goal_images") or []
            if isinstance(ref, dict)
        ]
        for message in state["runtime"].get("inbox") or []:
            payload = message.get("payload")
            refs = payload.get("images") if isinstance(payload, dict) else None
            for ref in refs if isinstance(refs, list) else []:
                if isinstance(ref, dict):
                    wanted.append((str(message["id"]), f"message {message['id']}", ref))
        pictures = []
        for number, (owner, whose, ref) in enumerate(wanted, start=1):
            stored = self._stored_image(str(ref.get("digest")))
            if stored is not None:
                alt = f" ({ref['alt']})" if ref.get("alt") else ""
                label = f"Picture {number}, from {whose}{alt}:"
                pictures.append(Picture(owner, label, stored[0], stored[1]))
        return tuple(pictures)

    def _stored_image(self, digest: str) -> tuple[str, str] | None:
        if digest not in self._images:
            found = self.session.image(digest)
            if found is None:
                return None
            self._images[digest] = found
        return self._images[digest]

    def _call(self, model: Model, request: ModelRequest, box: dict[str, Any]) -> None:
        try:
            box["reply"] = model.ask(request)
        except ModelError as exc:
            box["error"] = exc
        except Exception as exc:  # a provider bug must not kill the Owner
            box["error"] = ModelError(f"{type(exc).__name__}: {exc}", transient=True)

    def failed(self, turn_id: str, attempt: int, open_turn: Turn, error: ModelError) -> None:
        """Commit a failed attempt; a transient one is retried after a persisted backoff
        (exponential from about a second, capped, with jitter; longer if the provider asks),
        unless that wait would pass ``provider_retry_seconds``: then the run ends at once,
        saying so, rather than waiting for nothing."""
        now = time.time()
        since = open_turn["retry_since"] or now
        delay = min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** open_turn["transient"])
        delay *= random.uniform(0.5, 1.0)
        delay = max(delay, error.retry_after or 0.0)
        gave_up = self.give_up(error, delay, now - since) if error.transient else None
        # An HTTP answer (a status) is not billed; a lost connection may have been.
        usage = (
            None
            if error.status is None
            else {"input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}
        )
        self.session.record_failure(
            turn_id,
            attempt,
            str(error),
            transient=error.transient,
            not_before=now + delay if error.transient else 0.0,
            retry_since=since,
            usage=usage,
            gave_up=gave_up,
        )
        if not error.transient:
            self.owner.end_in_failure(f"model error: {error}")
        elif gave_up is not None:
            self.owner.end_in_failure(f"model error: {error} — {gave_up}")

    def give_up(self, error: ModelError, delay: float, used: float) -> str | None:
        """Why a transient failure is not retried (its wait passes the retry budget), or None."""
        limit = float(self.session.limits.provider_retry_seconds)
        left = limit - used
        if delay <= left:
            return None
        if error.retry_after is not None and error.retry_after >= delay:
            return (
                f"the provider asks to wait {error.retry_after:.0f} s, more than the "
                f"{max(left, 0.0):.0f} s left of provider_retry_seconds ({limit:.0f} s)"
            )
        return (
            f"the model provider kept failing for {used:.0f} s; the next retry (in "
            f"{delay:.1f} s) would pass provider_retry_seconds ({limit:.0f} s)"
        )

    def admit(self, turn_id: str, patch: list[Any] | None) -> None:
        try:
            self.session.step(turn_id, patch)  # a refusal is committed: the next attempt sees it
        except (Rejected, RunEnded):
            # Another process may step while we run (docs/cli.md): if it closed this Turn or
            # ended the run while the model thought, the reply is moot; go on from what is
            # committed. Anything else is a real error.
            proj = self.session.refresh()
            if proj.ended is None and proj.turn is not None and proj.turn["turn_id"] == turn_id:
                raise

    def turn_spent(self, open_turn: Turn) -> str | None:
        """Why this Turn may not be attempted again, or None."""
        limits = self.session.limits
        if open_turn["attempts"] >= limits.model_attempts:
            return (
                f"model_attempts exhausted for {open_turn['turn_id']}: "
                f"{open_turn['feedback'] or _error(open_turn['response'])}"
            )
        since = open_turn["retry_since"]
        if (
            open_turn["transient"]
            and since is not None
            and (open_turn["not_before"] - since > limits.provider_retry_seconds)
        ):
            return (
                f"the model provider kept failing for over "
                f"{limits.provider_retry_seconds:.0f} s: "
                f"{_error(open_turn['response'])}"
            )
        return None

    def idle(self) -> Outcome | None:
        proj = self.session.proj
        if proj.timers:
            wake = proj.next_wake()
            assert wake is not None
            if self.deadline is not None and wake - time.time() < self.deadline - time.monotonic():
                return self.wait_until(wake, wake_on_input=True)
            return Outcome("waiting", next_wake=wake)
        if self.external_wakeups:
            return Outcome("waiting")
        self.session.record_idle(IDLE_REASON)
        streak = self.session.refresh().idle_streak
        if streak >= self.session.limits.model_attempts:  # this one is the last allowed
            self.owner.end_in_failure(
                f"invalid idle {streak} times in a row: "
                "no work, no Timer, no external wake-up source"
            )
        return None

    def over_budget(self) -> str | None:
        proj = self.session.proj
        if (
            proj.turn is not None
            and proj.turn["response"] is not None
            and proj.turn["response"]["ok"]
        ):
            return None  # a reply committed before a crash is paid for: admit it
        usage, limits = proj.usage, self.session.limits
        if usage["rounds"] >= limits.rounds:
            return f"rounds budget exhausted ({usage['rounds']} of {limits.rounds})"
        tokens = usage["input_tokens"] + usage["output_tokens"]
        if tokens >= limits.tokens:
            return f"token budget exhausted ({tokens} of {limits.tokens})"
        unknown = usage["unknown_cost_attempts"]
        cost = usage["cost_usd"] + (unknown * self.attempt_bound() if unknown else 0.0)
        if cost >= limits.cost_usd:
            return f"cost budget exhausted (${cost:.4f} of ${limits.cost_usd})"
        size = self.session.size_bytes()
        if size >= limits.storage_bytes:
            return f"storage budget exhausted ({size} bytes of {limits.storage_bytes})"
        return None

    def attempt_bound(self) -> float:
        """The most one attempt can cost: a full context in, all of it written to the cache
        (the dearest kind of input), and a full reply out. An attempt whose outcome is
        unknown is counted at this price, never as free."""
        context_tokens = self.session.limits.context_bytes // 2 + PROMPT_TOKENS
        # priced by the model, whose long-prompt tier (if any) applies to a long context
        models = [self.model] if self.fallback is None else [self.model, self.fallback]
        costs = [
            model.cost(Usage(output_tokens=MAX_REPLY_TOKENS, **{kind: context_tokens}))
            for kind in ("cache_write_tokens", "input_tokens")
            for model in models
        ]
        # run refuses to start an unpriced model with a cost budget
        return max((c for c in costs if c is not None), default=0.0)

    def wait_until(self, when: float, *, wake_on_input: bool = False) -> Outcome | None:
        while time.time() < when:
            if (stop := self.interrupted()) is not None:
                return stop
            if not self.owner.tick(wait=0.05):
                time.sleep(min(0.05, max(0.0, when - time.time())))
            self.tell()
            self.listen()
            if wake_on_input and (self.session.proj.ended or self.outside_input()):
                break  # a comment heard while waiting for a Timer is answered now
        return None

    def interrupted(self) -> Outcome | None:
        if self.session.proj.ended:  # a deadline passing as the run ends does not hide it
            return self.ended()
        if self.owner.interrupted.is_set():
            return Outcome("interrupted", reason="signal")
        if self.deadline is not None and time.monotonic() > self.deadline:
            return Outcome("deadline", next_wake=self.session.proj.next_wake())
        return None

    def outside_input(self) -> bool:
        proj = self.session.proj
        return proj.turn is not None or any(m["kind"] != "execution" for m in proj.inbox)

    def ended(self) -> Outcome:
        ended = self.session.proj.ended
        assert ended is not None
        status = "succeeded" if ended["result"] == "success" else "failed"
        return Outcome(status, reason=ended["reason"])

    def listen(self) -> None:
        if self.between_rounds is not None:
            self.between_rounds()
            self.session.refresh()

    def tell(self) -> None:
        if self.live is not None:
            self.live.update()

    def warn_once(self, message: str) -> None:
        """A warning on stderr, once per run for each message (guidance is read every
        round)."""
        if message not in self.warned:
            self.warned.add(message)
            print(f"rio-ci: warning: {escape_control(message)}", file=sys.stderr, flush=True)


def _error(response: Response | None) -> str | None:
    """The error of a Turn's last failed attempt, if any."""
    return None if response is None else response["error"]
