"""AnthropicModel with the real anthropic SDK against the strict local fake of the Messages API:
the request every model gets, what a reply becomes, and which failures are transient."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from rio_ci.core.errors import ModelError, UsageError
from rio_ci.model.base import Model, ModelRequest, Price, Usage
from rio_ci.model.claude import table
from rio_ci.model.claude.client import AnthropicModel
from rio_ci.model.claude.tool import STEP_TOOL
from rio_ci.model.providers import parse_price
from rio_ci.model.turn import system_prompt
from tests.fakes.anthropic_api import FakeAnthropic

KEY = "sk-ant-test-canary-7f3e9"
PATCH: list[Any] = [
    {"op": "test", "path": "/revision", "value": 4},
    {
        "op": "add",
        "path": "/cells/-",
        "value": {"id": 3, "previous_id": None, "kind": "cmd", "argv": ["git", "status"]},
    },
]


def finished(stdout: str = "ok\n", kind: str = "success") -> dict[str, Any]:
    return {
        "phase": "finished",
        "result": {"type": kind, "exit_code": 0},
        "stdout": stdout,
        "stderr": "",
        "truncated": False,
        "resolved_by": None,
    }


def make_state(
    cells: int = 2, *, last_queued: bool = True, stdout: str = "2 passed\n"
) -> dict[str, Any]:
    """A State with ``cells`` cmd Cells (ids 1..n): all finished but the last, which is queued."""
    listed = [
        {"id": i, "previous_id": None, "kind": "cmd", "argv": ["echo", str(i)]}
        for i in range(1, cells + 1)
    ]
    facts = {str(i): finished(stdout) for i in range(1, cells + 1)}
    if last_queued and cells:
        facts[str(cells)] = {
            "phase": "queued",
            "result": None,
            "stdout": "",
            "stderr": "",
            "truncated": False,
            "resolved_by": None,
        }
    return {
        "schema": "rio.state/1",
        "id": "s1",
        "revision": 4,
        "goal": "Fix the route",
        "cells": listed,
        "runtime": {
            "next_cell_id": cells + 1,
            "cells": facts,
            "inbox": [{"id": "m1", "kind": "comment", "payload": {"body": "hi"}, "seq": 9}],
            "usage": {"rounds": 3},
            "limits": {"rounds": 100},
            "validators": [["pytest", "-q"]],
            "pause": None,
        },
    }


STATE = make_state()


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def request(
    feedback: str | None = None, state: dict[str, Any] | None = None, guidance: str | None = None
) -> ModelRequest:
    return ModelRequest(
        turn_id="t-9",
        state=state or STATE,
        round_index=5,
        feedback=feedback,
        delivered_refs=["session:event:9"],
        guidance=guidance,
    )


def model_for(fake: FakeAnthropic, name: str = "claude-sonnet-5-5", **kw: Any) -> AnthropicModel:
    return AnthropicModel(name, api_key=KEY, base_url=fake.base_url, **kw)


def ask_error(model: AnthropicModel) -> ModelError:
    with pytest.raises(ModelError) as info:
        model.ask(request())
    return info.value


def cache_marks(body: dict[str, Any]) -> list[str]:
    """Where the request's cache breakpoints are: ``system[i]`` or ``user[i]``."""
    marks = [f"system[{i}]" for i, b in enumerate(body["system"]) if b.get("cache_control")]
    content = body["messages"][0]["content"]
    return marks + [f"user[{i}]" for i, b in enumerate(content) if b.get("cache_control")]


# --- the request -----------------------------------------------------------------------------


def test_default_model_request_is_accepted_and_has_no_refused_parameter(
    fake: FakeAnthropic,
) -> None:
    fake.reply_patch(PATCH)
    model: Model = model_for(fake, table.default_model())
    assert model.ask(request()).patch == PATCH
    (sent,) = fake.requests
    body = sent.body
    assert sent.path == "/v1/messages" and sent.api_key == KEY
    assert body["model"] == "claude-sonnet-5-5" and body["stream"] is True
    assert body["max_tokens"] == 32_000
    assert body["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert body["output_config"] == {"effort": "high"}
    for refused in ("tool_choice", "temperature", "top_p", "top_k"):
        assert refused not in body
    assert [m["role"] for m in body["messages"]] == ["user"]  # no assistant prefill
    assert body["tools"] == [STEP_TOOL]
    assert sent.system_text.startswith(system_prompt())
    assert sent.state() == STATE


@pytest.mark.parametrize("name", sorted(table.table()["models"]))
def test_every_model_in_the_table_gets_a_request_it_accepts(fake: FakeAnthropic, name: str) -> None:
    fake.reply_patch(PATCH, thinking="Checking the repository layout first.")
    reply = model_for(fake, name).ask(request())
    assert reply.patch == PATCH, fake.requests[-1].body
    assert fake.pending == 0


@pytest.mark.parametrize(
    ("name", "effort"),
    [
        ("claude-opus-4-5", "max"),
        ("claude-opus-4-5", "xhigh"),
        ("claude-opus-4-6", "xhigh"),
        ("claude-sonnet-4-6", "xhigh"),
    ],
)
def test_an_effort_the_model_refuses_fails_before_any_request(
    fake: FakeAnthropic, name: str, effort: str
) -> None:
    with pytest.raises(UsageError, match=f"{name} accepts --effort"):
        model_for(fake, name, effort=effort)
    assert fake.requests == []


@pytest.mark.parametrize("effort", table.EFFORTS)
def test_every_effort_level_reaches_the_default_model(fake: FakeAnthropic, effort: str) -> None:
    fake.reply_patch(PATCH)
    assert model_for(fake, effort=effort).ask(request()).patch == PATCH
    assert fake.requests[0].body["output_config"] == {"effort": effort}


def test_a_model_without_effort_gets_a_thinking_budget_for_the_level(fake: FakeAnthropic) -> None:
    budgets = []
    for effort in ("low", "max"):
        fake.reply_patch(PATCH)
        model_for(fake, "claude-haiku-4-5", effort=effort).ask(request())
        body = fake.requests[-1].body
        assert "output_config" not in body and body["thinking"]["type"] == "enabled"
        budgets.append(body["thinking"]["budget_tokens"])
    assert budgets[0] < budgets[1] < 32_000


def test_unknown_effort_and_retired_model_are_usage_errors(fake: FakeAnthropic) -> None:
    with pytest.raises(UsageError, match="--effort must be one of"):
        model_for(fake, effort="extreme")
    with pytest.raises(UsageError, match=r"retired on 2026-11-30; use claude-sonnet-5-5"):
        model_for(fake, "claude-sonnet-4-5")
    assert fake.requests == []


def test_max_tokens_is_capped_at_the_models_maximum_output(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH)
    fake.reply_patch(PATCH)
    model_for(fake, "claude-sonnet-4-6", max_tokens=500_000).ask(request())
    model_for(fake, "claude-opus-5-5", max_tokens=500_000).ask(request())
    assert [r.body["max_tokens"] for r in fake.requests] == [
        table.lookup("claude-sonnet-4-6").max_output,  # type: ignore[union-attr]
        table.lookup("claude-opus-5-5").max_output,
    ]  # type: ignore[union-attr]
    assert fake.requests[0].body["max_tokens"] < fake.requests[1].body["max_tokens"]


def test_stable_state_is_cached_and_the_volatile_part_follows(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH)
    model_for(fake).ask(request())
    (sent,) = fake.requests
    content = sent.body["messages"][0]["content"]
    # system + head, Cell 1 (finished), Cell 2 (queued) → breakpoint on the last Cell block
    assert cache_marks(sent.body) == ["system[0]", "user[2]"]
    stable, volatile = "\n".join(b["text"] for b in content[:3]), content[3]["text"]
    assert '"goal":"Fix the route"' in stable and "2 passed" in stable
    assert '"revision":4' in volatile and '"next_cell_id":3' in volatile
    assert '"phase":"queued"' in volatile and '"phase":"queued"' not in stable
    assert '"inbox"' in volatile and '"limits"' in volatile and '"validators"' in volatile


def test_appending_cells_keeps_the_cached_prefix_identical(fake: FakeAnthropic) -> None:
    before, after = make_state(3), make_state(4)
    after["revision"] = 5
    for state in (before, after):
        fake.reply_patch(PATCH)
        model_for(fake).ask(request(state=state))
    first, second = (r.body for r in fake.requests)
    assert first["system"] == second["system"]
    # Cells 1-2 were finished both times: their blocks are byte-identical.
    assert first["messages"][0]["content"][:3] == [
        {k: v for k, v in b.items() if k != "cache_control"}
        for b in second["messages"][0]["content"][:3]
    ]


def test_a_long_cell_list_gets_a_second_breakpoint_and_at_most_four(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH)
    model_for(fake).ask(request(state=make_state(30), guidance="Use tabs."))
    marks = cache_marks(fake.requests[0].body)
    assert marks[0] == "system[1]" and len(marks) == 3 and marks[-1] == "user[30]"


def test_outputs_are_fenced_text_and_the_state_reads_back(fake: FakeAnthropic) -> None:
    tricky = "line\n```stdout of Cell 9\n/cells/0 {}\n````\nTraceback: KeyError 'user'\n"
    state = make_state(2, last_queued=False, stdout=tricky)
    fake.reply_patch(PATCH)
    model_for(fake).ask(request(state=state))
    sent = fake.requests[0]
    assert "`````stdout of Cell 1" in sent.user_text  # a fence longer than any inside
    assert "Traceback: KeyError 'user'" in sent.user_text  # raw, not JSON-escaped
    assert sent.state() == state


def test_guidance_feedback_and_delivered_refs_reach_the_model(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH)
    fake.reply_patch(PATCH)
    model_for(fake).ask(request())
    model_for(fake).ask(
        request(
            feedback="stale predecessor for /cells/0",
            guidance="Run `make test`; never edit vendor/.",
        )
    )
    plain, told = fake.requests
    assert "Repository guidance" not in plain.system_text
    assert "not admitted" not in plain.user_text
    assert "Run `make test`; never edit vendor/." in told.system_text
    assert "was not admitted" in told.user_text
    assert "stale predecessor for /cells/0" in told.user_text
    assert "session:event:9" in plain.user_text and "Turn t-9 (round 5)" in plain.user_text


# --- the reply -------------------------------------------------------------------------------


def test_text_and_thinking_before_the_step_call(fake: FakeAnthropic) -> None:
    fake.reply_patch(
        PATCH,
        1000,
        200,
        thinking="The route reads session['user'].",
        text="Tests fail on a KeyError; reading the route next.",
    )
    reply = model_for(fake).ask(request())
    assert reply.patch == PATCH and reply.invalid is None
    assert reply.rationale == "Tests fail on a KeyError; reading the route next."
    assert set(reply.raw) == {
        "id",
        "model",
        "stop_reason",
        "tool_input",
        "tool_calls",
        "usage",
        "rationale",
    }
    assert reply.raw["tool_input"] == {"patch": PATCH}
    assert KEY not in json.dumps(reply.raw)


def test_without_text_the_thinking_summary_is_the_rationale(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH, thinking="Summary: reproduce first, then fix.")
    assert model_for(fake).ask(request()).rationale == "Summary: reproduce first, then fix."


def test_cache_tokens_are_priced_as_such(fake: FakeAnthropic) -> None:
    fake.reply_patch(
        PATCH, 1000, 200, cache_creation_input_tokens=3000, cache_read_input_tokens=50_000
    )
    model = model_for(fake)
    reply = model.ask(request())
    price = model.price()
    assert price == Price(2.0, 10.0, 2.5, 0.10)  # Sonnet 5.5, checked 2026-12-02
    assert reply.usage.all_input_tokens == 54_000
    assert reply.usage.cost_usd == pytest.approx(
        (1000 * 2.0 + 200 * 10.0 + 3000 * 2.5 + 50_000 * 0.10) / 1e6
    )
    assert reply.raw["usage"]["cache_read_input_tokens"] == 50_000


def test_a_long_haiku_prompt_is_priced_at_the_long_prompt_rate(fake: FakeAnthropic) -> None:
    info = table.lookup("claude-haiku-5-5")
    assert info is not None and info.long_prompt is not None and info.price is not None
    threshold, long_price = info.long_prompt
    short, long = Usage(threshold, 100), Usage(threshold + 1, 100)
    assert info.cost(short, info.price) == pytest.approx(info.price.cost(short))
    assert info.cost(long, info.price) == pytest.approx(long_price.cost(long))
    assert long_price.input > info.price.input


def test_price_override_and_unpriced_models(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH, 1000, 100)
    fake.reply_patch(PATCH, 1000, 100)
    override = model_for(fake, "rio-test-unpriced-model", price=parse_price("1.0/2.0"))
    unpriced = model_for(fake, "rio-test-unpriced-model")
    assert override.price() == Price(1.0, 2.0, 1.25, 1.0) and unpriced.price() is None
    assert override.ask(request()).usage.cost_usd == pytest.approx((1000 + 200) / 1e6)
    reply = unpriced.ask(request())
    assert reply.usage.cost_usd is None and reply.usage.input_tokens == 1000


INVALID = {
    "no-step": ([{"type": "text", "text": "I will just talk."}], "end_turn", "no step call"),
    "two-calls": (
        [
            {"type": "tool_use", "id": "a", "name": "step", "input": {"patch": []}},
            {"type": "tool_use", "id": "b", "name": "step", "input": {"patch": []}},
        ],
        "tool_use",
        "2 tool calls",
    ),
    "wrong-tool": (
        [{"type": "tool_use", "id": "a", "name": "bash", "input": {"patch": []}}],
        "tool_use",
        "unknown tool 'bash'",
    ),
    "not-a-list": (
        [{"type": "tool_use", "id": "a", "name": "step", "input": {"patch": "x"}}],
        "tool_use",
        "malformed step input",
    ),
    "non-object-op": (
        [{"type": "tool_use", "id": "a", "name": "step", "input": {"patch": ["remove"]}}],
        "tool_use",
        "malformed step input",
    ),
    "cut-off": (
        [{"type": "tool_use", "id": "a", "name": "step", "input": {"patch": PATCH}}],
        "max_tokens",
        "cut off at max_tokens (32000)",
    ),
}


@pytest.mark.parametrize("kind", sorted(INVALID))
def test_an_unusable_reply_is_invalid_and_still_billed(fake: FakeAnthropic, kind: str) -> None:
    content, stop, reason = INVALID[kind]
    fake.reply_raw(content, stop, input_tokens=700, output_tokens=90)
    reply = model_for(fake).ask(request())
    assert reply.patch is None
    assert reply.invalid is not None and reason in reply.invalid
    assert reply.raw["invalid"] == reply.invalid
    assert reply.usage.output_tokens == 90
    assert reply.usage.cost_usd == pytest.approx((700 * 2.0 + 90 * 10.0) / 1e6)


def test_a_refusal_is_invalid_with_its_category(fake: FakeAnthropic) -> None:
    fake.refusal("cyber")
    reply = model_for(fake).ask(request())
    assert reply.patch is None and reply.invalid is not None
    assert "refusal (category: cyber)" in reply.invalid and reply.usage.cost_usd


# --- failures --------------------------------------------------------------------------------


def test_overloaded_is_transient_with_retry_after_and_no_hidden_retry(fake: FakeAnthropic) -> None:
    fake.overloaded(retry_after=7)
    fake.reply_patch(PATCH)  # would be consumed if the SDK retried by itself
    error = ask_error(model_for(fake))
    assert (error.transient, error.retry_after) == (True, 7.0)
    assert "529" in str(error) and "overloaded_error" in str(error)
    assert len(fake.requests) == 1
    assert model_for(fake).ask(request()).patch == PATCH


def test_rate_limit_prefers_retry_after_ms(fake: FakeAnthropic) -> None:
    fake.rate_limited(retry_after=3, retry_after_ms=1500)
    fake.rate_limited(retry_after=3)
    first, second = ask_error(model_for(fake)), ask_error(model_for(fake))
    assert (first.transient, first.retry_after) == (True, 1.5)
    assert (second.transient, second.retry_after) == (True, 3.0)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (408, "timeout_error"),
        (409, "conflict_error"),
        (500, "api_error"),
        (503, "overloaded_error"),
        (504, "timeout_error"),
    ],
)
def test_retryable_statuses_are_transient(fake: FakeAnthropic, status: int, kind: str) -> None:
    fake.error(status, kind, "try again")
    assert ask_error(model_for(fake)).transient is True


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (402, "billing_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
    ],
)
def test_other_client_errors_are_final_with_the_providers_message(
    fake: FakeAnthropic, status: int, kind: str
) -> None:
    fake.error(status, kind, f"provider says no ({status})", headers={"retry-after": "5"})
    error = ask_error(model_for(fake))
    assert error.transient is False and error.retry_after is None
    assert f"{kind}: provider says no ({status})" in str(error) and KEY not in str(error)


def test_a_model_the_api_does_not_know_is_a_final_404(fake: FakeAnthropic) -> None:
    error = ask_error(model_for(fake, "claude-sonnet-9"))
    assert error.transient is False and "not_found_error: model: claude-sonnet-9" in str(error)


def test_a_stream_that_breaks_or_reports_overload_is_transient(fake: FakeAnthropic) -> None:
    fake.break_stream(PATCH, after_events=5)
    fake.break_stream(PATCH, after_events=7, clean=True)
    fake.stream_error("overloaded_error")
    broken, short = ask_error(model_for(fake)), ask_error(model_for(fake))
    overloaded = ask_error(model_for(fake))
    assert broken.transient is True and "stream broke" in str(broken)
    assert short.transient is True and "before message_stop" in str(short)
    assert overloaded.transient is True and "overloaded_error" in str(overloaded)


def test_timeout_and_refused_connection_are_transient(fake: FakeAnthropic) -> None:
    fake.delay(5)
    fake.reply_patch(PATCH)
    error = ask_error(model_for(fake, timeout=0.3))
    assert error.transient is True and "timed out" in str(error)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refused = AnthropicModel("claude-sonnet-5-5", api_key=KEY, base_url=f"http://127.0.0.1:{port}")
    assert ask_error(refused).transient is True


def test_environment_supplies_endpoint_and_key(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    fake.reply_patch(PATCH)
    assert AnthropicModel("claude-sonnet-5-5").ask(request()).patch == PATCH
    assert fake.requests[0].api_key == KEY
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY") as info:
        AnthropicModel("claude-sonnet-5-5")
    assert info.value.transient is False
