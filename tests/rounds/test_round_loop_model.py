"""The round loop with a real Claude model's behaviour (docs/models.md, docs/sessions.md,
docs/cli.md): whole runs with the default model, invalid replies, transient failures,
provider errors, prices, effort, repository guidance, what the State shows, and
cache-friendly requests.

Everything goes through the real ``anthropic`` SDK to the strict ``FakeAnthropic``, which
answers 400 to any request today's API would refuse. Runs are real ``rio-ci run``
subprocesses, except the long retry test, which drives the same ``RoundLoop`` in-process so
that it can give the SDK a short timeout and meet a real client-side timeout.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rio_ci.core.limits import Limits
from rio_ci.model.base import Price, Usage
from rio_ci.model.claude import table
from rio_ci.model.claude.client import AnthropicModel
from rio_ci.model.providers import parse_price
from rio_ci.reports.live import LiveLog
from rio_ci.rounds.guidance import GUIDANCE_BYTES
from rio_ci.rounds.loop import MAX_REPLY_TOKENS, PROMPT_TOKENS, RoundLoop
from rio_ci.run.owner import Owner
from tests.fakes.anthropic_api import ReceivedRequest
from tests.kit import cli_env, cmd_cell, events, note_cell, run_cli
from tests.round_loop_kit import (
    DONE,
    ECHO,
    KEY,
    MODEL,
    UNPRICED,
    WatchedFake,
    cost,
    kinds,
    patch,
    price_of,
    timer_cell,
    turn_text,
    usage,
)
from tests.run_cli import new_session, status

# Every test runs real rio-ci runs (Owners, Workers, the SDK): slow as a module, as
# tests/conftest.py marks test_round_loop.py.
pytestmark = pytest.mark.slow

PY = sys.executable


def rounds_of_work(fake: WatchedFake, rounds: int, **tokens: int) -> None:
    """``rounds - 1`` rounds that each add a cmd Cell, then a success conclusion."""
    for k in range(rounds - 1):
        fake.reply_patch(
            patch(k, k + 1, cmd_cell(PY, "-c", f"print('round {k + 1} ran')")),
            text=f"Round {k + 1}: running a check.",
            **tokens,
        )
    fake.reply_patch(patch(rounds - 1, rounds, DONE), text="All checks ran; done.", **tokens)


# --- whole runs: three rounds with the default model ----------------------------------


@pytest.mark.parametrize(
    "model_args",
    [[], ["--model", "anthropic"], ["--model", "anthropic:claude-sonnet-5-5"]],
    ids=["omitted", "anthropic", "anthropic:claude-sonnet-5-5"],
)
def test_three_rounds_with_the_default_model_succeed(tmp_path: Path, model_args: list[str]) -> None:
    assert table.default_model() == MODEL == "claude-sonnet-5-5"  # docs/models.md
    db = new_session(tmp_path)
    with WatchedFake(db) as fake:
        rounds_of_work(fake, 3, input_tokens=1200, output_tokens=150)
        done = fake.run(*model_args, model=None)
        requests = fake.requests
    assert done.returncode == 0, done.stdout + done.stderr
    assert status(done.stdout)["status"] == "succeeded"
    assert len(requests) == 3
    for sent in requests:  # every request is one today's API accepts, for the default model
        body = sent.body
        assert body["model"] == MODEL and body["stream"] is True
        assert body["thinking"]["type"] == "adaptive"
        assert body["output_config"] == {"effort": "high"}
        assert not {"tool_choice", "temperature", "top_p", "top_k"} & set(body)
        assert sent.api_key == KEY
    assert "round 1 ran" in requests[1].state()["runtime"]["cells"]["1"]["stdout"]
    evs = events(db)
    assert kinds(evs, "run_ended")[0]["result"] == "success"
    assert [e["result"]["type"] for e in kinds(evs, "execution_finished")] == ["success"] * 2
    used = usage(db)
    assert used["rounds"] == 3 and used["unknown_cost_attempts"] == 0
    assert used["cost_usd"] == pytest.approx(3 * cost(1200, 150))


# --- invalid replies --------------------------------------------------------------------------


def _two_calls(fake: WatchedFake) -> None:
    call = {"type": "tool_use", "name": "step", "input": {"patch": patch(0, 1, ECHO)}}
    fake.reply_raw([{**call, "id": "toolu_a"}, {**call, "id": "toolu_b"}], "tool_use", 700, 300)


INVALID = {
    "no step call": (
        lambda f: f.reply_raw([{"type": "text", "text": "The fix is easy."}], "end_turn", 700, 300),
        "no step call",
    ),
    "two step calls": (_two_calls, "2 tool calls"),
    "malformed input": (
        lambda f: f.reply_raw(
            [{"type": "tool_use", "id": "toolu_x", "name": "step", "input": {"ops": []}}],
            "tool_use",
            700,
            300,
        ),
        "malformed step input",
    ),
    "max_tokens": (
        lambda f: f.reply_raw(
            [{"type": "text", "text": "Let me think at length"}], "max_tokens", 700, 300
        ),
        "cut off at max_tokens",
    ),
    # The provider's JSON may carry 1e999 (or Infinity): the SDK reads it as infinity.
    "a number JSON cannot carry": (
        lambda f: f.reply_raw(
            [
                {
                    "type": "tool_use",
                    "id": "toolu_i",
                    "name": "step",
                    "input": {
                        "patch": [
                            *patch(0, 1, note_cell("x"))[:-1],
                            {
                                "op": "add",
                                "path": "/cells/-",
                                "value": {"kind": "note", "text": "x", "n": float("inf")},
                            },
                        ]
                    },
                }
            ],
            "tool_use",
            700,
            300,
        ),
        "a number that JSON cannot carry",
    ),
    "refusal": (
        lambda f: f.reply_raw(
            [{"type": "text", "text": "I can't help with that."}],
            "refusal",
            700,
            300,
            stop_details={"type": "refusal", "category": "cyber", "explanation": None},
        ),
        "refusal (category: cyber)",
    ),
}


@pytest.mark.parametrize("kind", sorted(INVALID))
def test_an_invalid_reply_is_committed_told_to_the_model_and_billed(
    tmp_path: Path, kind: str
) -> None:
    script, reason = INVALID[kind]
    db = new_session(tmp_path)
    with WatchedFake(db) as fake:
        script(fake)
        fake.reply_patch(patch(0, 1, DONE), input_tokens=1000, output_tokens=100)
        outcome = fake.run_here()
        first, second = fake.requests
    assert outcome.status == "succeeded", outcome
    bad, good = kinds(events(db), "model_response")
    assert not bad["ok"] and bad["patch"] is None and reason in bad["invalid"]
    assert bad["turn_id"] == good["turn_id"] and (bad["attempt"], good["attempt"]) == (1, 2)
    assert "not admitted" not in turn_text(first)
    assert "not admitted" in turn_text(second) and reason in turn_text(second)
    assert first.state() == second.state()  # the same Turn, the same snapshot
    used = usage(db)  # the invalid reply was billed, so it is counted
    assert (used["input_tokens"], used["output_tokens"]) == (1700, 400)
    assert used["cost_usd"] == pytest.approx(cost(700, 300) + cost(1000, 100))
    assert used["rounds"] == 1 and used["attempts"] == 2
    assert not kinds(events(db), "patch_rejected")


def test_invalid_replies_of_every_kind_are_bounded_by_model_attempts(tmp_path: Path) -> None:
    db = new_session(tmp_path, "model_attempts=4")
    with WatchedFake(db) as fake:
        for kind in ("no step call", "malformed input", "max_tokens", "refusal"):
            INVALID[kind][0](fake)
        fake.reply_patch(patch(0, 1, DONE))  # never asked for
        done = fake.run()
        assert len(fake.requests) == 4 and fake.pending == 1
        told = [turn_text(r) for r in fake.requests]
    assert done.returncode == 1 and status(done.stdout)["status"] == "failed"
    assert "no step call" in told[1] and "malformed" in told[2] and "max_tokens" in told[3]
    (ended,) = kinds(events(db), "run_ended")
    assert "model_attempts exhausted" in ended["reason"] and "refusal" in ended["reason"]
    assert usage(db)["cost_usd"] == pytest.approx(4 * cost(700, 300))


# --- transient failures -------------------------------------------------------------------------


def test_six_transient_errors_in_a_row_do_not_use_up_model_attempts(tmp_path: Path) -> None:
    db = new_session(tmp_path, "model_attempts=1")  # one counted attempt: no room for errors
    client_timeout = 2.0
    with WatchedFake(db) as fake:
        fake.overloaded(retry_after=1)
        fake.rate_limited()
        fake.error(500, "api_error", "Internal server error")
        fake.break_stream(patch(0, 1, DONE), after_events=5)
        fake.delay(client_timeout + 3)  # answers after the SDK's timeout
        fake.reply_patch(patch(0, 1, DONE))
        fake.stream_error("overloaded_error")  # HTTP 200, then an error event
        fake.reply_patch(patch(0, 1, DONE), input_tokens=900, output_tokens=90)
        owner = Owner(str(db))
        log = io.StringIO()
        try:
            model = AnthropicModel(
                MODEL, api_key=KEY, base_url=fake.base_url, timeout=client_timeout
            )
            outcome = RoundLoop(owner, model, live=LiveLog(owner.session, log)).run(
                time.monotonic() + 200
            )
        finally:
            owner.close()
        arrivals = [t for t, _ in fake.arrivals]
    assert outcome.status == "succeeded", outcome
    assert len(arrivals) == 7
    responses = kinds(events(db), "model_response")
    failures, good = responses[:6], responses[6]
    assert all(r["transient"] and not r["ok"] for r in failures)
    assert [r["attempt"] for r in responses] == list(range(1, 8))
    for word, failure in zip(
        [
            "HTTP 529",
            "HTTP 429",
            "HTTP 500",
            "stream broke",
            "timed out",
            "stream error: overloaded_error",
        ],
        failures,
        strict=True,
    ):
        assert word in failure["error"], failure["error"]
    # Backoff: from about a second, doubling, with jitter (at least half), and persisted:
    # each request waited for the committed not_before of the failure before it.
    for k, (failure, next_arrival) in enumerate(zip(failures, arrivals[1:], strict=True)):
        delay = failure["not_before"] - failure["at"]
        assert 0.5 * min(30.0, 2.0**k) - 0.05 <= delay <= max(min(30.0, 2.0**k), 1.0)
        assert next_arrival >= failure["not_before"] - 0.01
    assert good["ok"] and kinds(events(db), "patch_accepted")
    used = usage(db)
    # Status answers are known not to be billed; the broken streams and the timeout may
    # have been, so they stay unknown (never free).
    assert used["unknown_cost_attempts"] == 3
    assert used["cost_usd"] == pytest.approx(cost(900, 90))
    assert log.getvalue().count("— retrying in ") == 6
    assert re.search(
        r"HTTP 529: overloaded_error: .* — retrying in \d+\.\d s \(attempt 1, 0 s of \d+ s used\)",
        log.getvalue(),
    )


def test_transient_failures_give_up_after_provider_retry_seconds(tmp_path: Path) -> None:
    db = new_session(tmp_path, "provider_retry_seconds=2")
    with WatchedFake(db) as fake:
        for _ in range(10):
            fake.overloaded()
        done = fake.run()
        asked = len(fake.requests)
    assert done.returncode == 1 and status(done.stdout)["status"] == "failed"
    assert 2 <= asked < 10  # the committed retry times below show it never waited past 2 s
    (ended,) = kinds(events(db), "run_ended")
    assert "would pass provider_retry_seconds (2 s)" in ended["reason"] and "529" in ended["reason"]
    failures = kinds(events(db), "model_response")
    assert len(failures) == asked and all(f["transient"] for f in failures)
    # It gave up as soon as the next retry would fall past the limit, without waiting.
    assert failures[-1]["not_before"] - failures[0]["retry_since"] > 2
    assert failures[-2]["not_before"] - failures[0]["retry_since"] <= 2


def test_a_retry_after_past_the_limit_gives_up_at_once(tmp_path: Path) -> None:
    db = new_session(tmp_path, "provider_retry_seconds=30")
    with WatchedFake(db) as fake:
        fake.rate_limited(retry_after=3600)  # a spend cap: waiting an hour would not help
        done = fake.run()
        # One request and no retry: an hour's wait was never begun (the reason says why).
        assert len(fake.requests) == 1
    assert status(done.stdout)["status"] == "failed"
    reason = kinds(events(db), "run_ended")[0]["reason"]
    # said honestly: one failure, and a wait the retry budget cannot cover
    assert "asks to wait 3600 s, more than the 30 s left of provider_retry_seconds" in reason
    assert "kept failing" not in reason
    assert "not retried: the provider asks to wait 3600 s" in done.stderr


# --- provider errors, prices, effort ------------------------------------------------------------


@pytest.mark.parametrize(
    ("status_code", "kind", "message"),
    [
        (401, "authentication_error", "invalid x-api-key"),
        (403, "permission_error", "Your API key does not have permission to use this model"),
    ],
)
def test_a_client_error_ends_the_run_with_the_providers_message(
    tmp_path: Path, status_code: int, kind: str, message: str
) -> None:
    db = new_session(tmp_path)
    with WatchedFake(db) as fake:
        fake.error(status_code, kind, message)
        done = fake.run()
        assert len(fake.requests) == 1
    assert done.returncode == 1 and status(done.stdout)["status"] == "failed"
    reason = kinds(events(db), "run_ended")[0]["reason"]
    assert f"HTTP {status_code}" in reason and kind in reason and message in reason
    assert status(done.stdout)["reason"] == reason


def test_a_model_the_api_does_not_know_ends_the_run_with_its_404(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    with WatchedFake(db) as fake:
        done = fake.run("--price", "1/5", model="claude-nonexistent-9")
        assert len(fake.requests) == 1 and fake.requests[0].model == "claude-nonexistent-9"
    assert status(done.stdout)["status"] == "failed"
    reason = kinds(events(db), "run_ended")[0]["reason"]
    assert "404" in reason and "model: claude-nonexistent-9" in reason


def test_an_unpriced_model_refuses_to_start_without_a_price(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    before = events(db)
    with WatchedFake(db) as fake:
        done = fake.run(model=UNPRICED)
        assert fake.requests == []
    assert done.returncode == 2
    error = status(done.stdout)["error"]
    assert f"anthropic:{UNPRICED}" in error and "--price IN/OUT" in error
    assert events(db) == before  # nothing committed, no Turn prepared


def test_an_unpriced_model_is_refused_before_its_credentials_are_looked_at(tmp_path: Path) -> None:
    """The arguments alone decide that a cost cannot be counted: no key needed to learn it."""
    db = new_session(tmp_path)
    before = events(db)
    env = cli_env()
    assert not any(name.startswith("ANTHROPIC") for name in env)
    done = run_cli("run", str(db), "--model", f"anthropic:{UNPRICED}", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--price IN/OUT" in status(done.stdout)["error"]
    keyless = run_cli("run", str(db), "--model", f"anthropic:{UNPRICED}", "--price", "1/5", env=env)
    assert keyless.returncode == 1 and "ANTHROPIC_API_KEY" in status(keyless.stdout)["error"]
    assert events(db) == before


@pytest.mark.parametrize("model", [UNPRICED, MODEL])
def test_a_price_is_stored_and_used_by_a_later_run_without_it(tmp_path: Path, model: str) -> None:
    db = new_session(tmp_path)
    given = parse_price("4.0/20.0")
    assert model == UNPRICED or price_of(model) != given
    assert given.cache_write > given.input  # a cache write is never counted below its price
    with WatchedFake(db) as fake:
        fake.reply_patch(
            patch(0, 1, timer_cell("time.time() + 1")),
            input_tokens=1000,
            output_tokens=100,
            cache_creation_input_tokens=400,
            cache_read_input_tokens=500,
        )
        fake.reply_patch(
            patch(1, 2, note_cell("waiting for the Timer")), input_tokens=1000, output_tokens=100
        )
        first = fake.run("--price", "4/20", model=model)
        assert status(first.stdout)["status"] == "waiting", first.stdout + first.stderr
        time.sleep(max(0.0, status(first.stdout)["next_wake"] - time.time()) + 0.05)
        fake.reply_patch(patch(2, 3, DONE), input_tokens=2000, output_tokens=300)
        second = fake.run(model=model)  # no --price this time
        assert status(second.stdout)["status"] == "succeeded", second.stdout + second.stderr
    (stored,) = kinds(events(db), "price_set")
    assert stored["model"] == f"anthropic:{model}" and Price(**stored["price"]) == given
    costs = [r["usage"]["cost_usd"] for r in kinds(events(db), "model_response")]
    assert costs == pytest.approx(
        [
            given.cost(Usage(1000, 100, cache_write_tokens=400, cache_read_tokens=500)),
            given.cost(Usage(1000, 100)),
            given.cost(Usage(2000, 300)),
        ]
    )
    assert usage(db)["unknown_cost_attempts"] == 0
    # The same price again is fine; another is refused before anything runs (a price of 0
    # would lift the cost budget of a Session that has been counting at 4/20).
    same = run_cli(
        "run",
        str(db),
        "--model",
        f"anthropic:{model}",
        "--price",
        "4/20",
        env=cli_env(ANTHROPIC_API_KEY=KEY),
    )
    assert same.returncode == 0, same.stdout + same.stderr
    before = len(events(db))
    other = run_cli(
        "run",
        str(db),
        "--model",
        f"anthropic:{model}",
        "--price",
        "0/0",
        env=cli_env(ANTHROPIC_API_KEY=KEY),
    )
    assert other.returncode == 2 and "already counts" in other.stdout, other.stdout
    assert len(events(db)) == before and len(kinds(events(db), "price_set")) == 1


def test_effort_reaches_the_request(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    with WatchedFake(db) as fake:
        fake.reply_patch(patch(0, 1, DONE))
        done = fake.run("--effort", "low")
        (sent,) = fake.requests
    assert status(done.stdout)["status"] == "succeeded", done.stdout + done.stderr
    assert sent.body["output_config"] == {"effort": "low"}


@pytest.mark.parametrize(
    ("model", "effort", "message"),
    [
        ("claude-opus-4-5", "max", "claude-opus-4-5 accepts --effort low, medium, high; got 'max'"),
        (MODEL, "extreme", "--effort must be one of low, medium, high, xhigh, max"),
    ],
)
def test_an_effort_the_model_does_not_take_is_a_usage_error(
    tmp_path: Path, model: str, effort: str, message: str
) -> None:
    db = new_session(tmp_path)
    with WatchedFake(db) as fake:
        done = fake.run("--effort", effort, model=model)
        assert fake.requests == []
    assert done.returncode == 2
    assert message in status(done.stdout)["error"]


@pytest.mark.parametrize("margin", [0.95, 1.05])
def test_an_attempt_of_unknown_cost_counts_against_the_budget_at_its_bound(
    tmp_path: Path, margin: float
) -> None:
    """A reply lost in a crash may have been billed: it is counted at the most one attempt
    can cost (a full context in, written to the cache, and a full reply out), never as free."""
    context = Limits().context_bytes
    bound = price_of().cost(
        Usage(cache_write_tokens=context // 2 + PROMPT_TOKENS, output_tokens=MAX_REPLY_TOKENS)
    )
    assert price_of().cache_write > price_of().input  # so the bound is not fresh input's
    db = new_session(tmp_path, f"cost_usd={bound * margin}", f"context_bytes={context}")
    with WatchedFake(db) as fake:
        fake.reply_patch(patch(0, 1, DONE), input_tokens=100, output_tokens=10)  # lost
        fake.reply_patch(patch(0, 1, DONE), input_tokens=100, output_tokens=10)
        first = fake.run(crash_at="model_reply_before_commit")
        assert first.returncode == -signal.SIGKILL
        second = fake.run()
        asked = len(fake.requests)
    if margin < 1:
        assert asked == 1 and status(second.stdout)["status"] == "failed"
        assert "cost budget exhausted" in kinds(events(db), "run_ended")[0]["reason"]
    else:
        assert asked == 2 and status(second.stdout)["status"] == "succeeded"
    assert usage(db)["unknown_cost_attempts"] == 1


def test_the_bound_of_an_attempt_uses_the_long_prompt_tier_when_the_context_reaches_it(
    tmp_path: Path,
) -> None:
    """docs/models.md: unknown-cost attempts count against the budget conservatively. A model
    whose long prompts cost more is bounded at that dearer price once the context can hold
    a prompt past its threshold."""
    info = table.lookup("claude-haiku-5-5")
    assert info is not None and info.long_prompt is not None and info.price is not None
    threshold, long_price = info.long_prompt
    context_bytes = 2 * (threshold + 20_000)  # so the context holds a prompt past it
    db = new_session(tmp_path, f"context_bytes={context_bytes}")
    owner = Owner(str(db))
    try:
        loop = RoundLoop(owner, AnthropicModel("claude-haiku-5-5", connect=False))
        tokens = context_bytes // 2 + PROMPT_TOKENS
        assert tokens > threshold
        worst = Usage(cache_write_tokens=tokens, output_tokens=MAX_REPLY_TOKENS)
        assert loop.attempt_bound() == pytest.approx(long_price.cost(worst))
        assert long_price.cost(worst) > info.price.cost(worst)
    finally:
        owner.close()


# --- what every request carries ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["AGENTS.md", "CLAUDE.md", ".github/copilot-instructions.md"])
def test_repository_guidance_reaches_every_request_clipped(tmp_path: Path, name: str) -> None:
    db = new_session(tmp_path)
    guide = tmp_path / name
    guide.parent.mkdir(exist_ok=True)
    filler = "".join(f"- rule {i}: keep functions short\n" for i in range(1000))
    guide.write_text("GUIDE-START run `make check` before concluding\n" + filler + "GUIDE-END\n")
    assert guide.stat().st_size > GUIDANCE_BYTES
    with WatchedFake(db) as fake:
        rounds_of_work(fake, 2)
        outcome = fake.run_here()
        requests = fake.requests
    assert outcome.status == "succeeded", outcome
    assert len(requests) == 2
    for sent in requests:
        system = sent.system_text
        assert f"{name}:\nGUIDE-START run `make check`" in system
        assert "GUIDE-END" not in system and "more bytes not shown" in system
        shown = system[system.index("GUIDE-START") : system.index("\n[… ")]
        assert GUIDANCE_BYTES - 100 < len(shown.encode()) <= GUIDANCE_BYTES
        assert "GUIDE-START" not in sent.user_text  # the cached system part, not the State


def test_the_state_shows_limits_usage_and_validators(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    made = run_cli(
        "new",
        str(db),
        "--goal",
        "g",
        "--cwd",
        str(tmp_path),
        "--limit",
        "rounds=7",
        "--limit",
        "cost_usd=3.5",
        "--validator",
        f"{PY} -c 'print(1)'",
    )
    assert made.returncode == 0, made.stdout + made.stderr
    with WatchedFake(db) as fake:
        rounds_of_work(fake, 2, input_tokens=500, output_tokens=50)
        outcome = fake.run_here()
        first, second = (r.state()["runtime"] for r in fake.requests)
    assert outcome.status == "succeeded", outcome
    limits = json.loads(run_cli("state", str(db)).stdout)["runtime"]["limits"]
    assert first["limits"] == limits and limits["rounds"] == 7 and limits["cost_usd"] == 3.5
    assert {"model_attempts", "context_bytes", "provider_retry_seconds"} <= set(limits)
    assert first["validators"] == second["validators"] == [[PY, "-c", "print(1)"]]
    assert first["usage"]["rounds"] == 0 and first["usage"]["cost_usd"] == 0
    assert second["usage"]["rounds"] == 1
    assert second["usage"]["cost_usd"] == pytest.approx(cost(500, 50))
    assert second["usage"]["input_tokens"] == 500


def _blocks(sent: ReceivedRequest) -> list[dict[str, Any]]:
    """System blocks then user blocks, as the provider hashes them for its cache."""
    return [*sent.body["system"], *sent.body["messages"][0]["content"]]


def _last_breakpoint(blocks: list[dict[str, Any]]) -> int:
    return max(i for i, b in enumerate(blocks) if b.get("cache_control"))


def test_rounds_that_only_append_cells_keep_the_cached_prefix(tmp_path: Path) -> None:
    db = new_session(tmp_path)
    with WatchedFake(db) as fake:
        rounds_of_work(fake, 5)
        outcome = fake.run_here()
        requests = fake.requests
    assert outcome.status == "succeeded", outcome
    assert len(requests) == 5

    def bare(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]

    for earlier, later in itertools.pairwise(requests):
        old, new = _blocks(earlier), _blocks(later)
        cut = _last_breakpoint(old)
        assert bare(new[: cut + 1]) == bare(old[: cut + 1])  # byte-identical cached prefix
        assert _last_breakpoint(new) > cut  # and the next round caches one Cell more
        assert earlier.body["system"][-1].get("cache_control")  # system: its own breakpoint
        assert old[-1] != new[-1]  # the volatile part does change
