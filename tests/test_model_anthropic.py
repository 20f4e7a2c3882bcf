"""AnthropicModel with the real anthropic SDK against a local fake of the Messages API."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from rio_ci.errors import ModelError
from rio_ci.model.anthropic import AnthropicModel, price_for, system_prompt
from rio_ci.model.base import Model, ModelRequest
from tests.fakes.anthropic_api import FakeAnthropic

KEY = "sk-ant-test-canary-7f3e9"
STATE: dict[str, Any] = {
    "schema": "rio.state/1",
    "id": "s1",
    "revision": 4,
    "goal": "Fix the route",
    "cells": [{"id": 1, "previous_id": None, "kind": "note", "text": "look"}],
    "runtime": {"next_cell_id": 2, "cells": {}, "inbox": [], "usage": {}, "pause": None},
}
PATCH: list[Any] = [
    {"op": "test", "path": "/revision", "value": 4},
    {"op": "add", "path": "/cells/-", "value": {"id": 2, "previous_id": None, "kind": "cmd",
                                                "argv": ["git", "status"]}},
]


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


def request(last_rejection: str | None = None) -> ModelRequest:
    return ModelRequest(turn_id="t-9", state=STATE, round_index=5, feedback=last_rejection)


def model_for(fake: FakeAnthropic, name: str = "claude-sonnet-4-5", **kw: Any) -> AnthropicModel:
    return AnthropicModel(name, api_key=KEY, base_url=fake.base_url, **kw)


def ask_error(model: AnthropicModel) -> ModelError:
    with pytest.raises(ModelError) as info:
        model.ask(request())
    return info.value


def test_good_reply_becomes_model_reply_with_usage_and_listed_cost(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH, input_tokens=1000, output_tokens=200)
    model: Model = model_for(fake)
    reply = model.ask(request())
    assert model.name == "anthropic:claude-sonnet-4-5"
    assert reply.patch == PATCH
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (1000, 200)
    # claude-sonnet-4 lists $3 in / $15 out per million tokens.
    assert reply.usage.cost_usd == pytest.approx(1000 * 3 / 1e6 + 200 * 15 / 1e6)
    assert reply.usage.cost_usd == pytest.approx(0.006)
    assert set(reply.raw) == {"id", "model", "stop_reason", "tool_input", "usage"}
    assert reply.raw["tool_input"] == {"patch": PATCH}
    assert reply.raw["stop_reason"] == "tool_use"
    assert reply.raw["model"] == "claude-sonnet-4-5"
    assert KEY not in json.dumps(reply.raw)


def test_unknown_model_has_unknown_cost_never_zero(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH)
    reply = model_for(fake, "some-future-model").ask(request())
    assert reply.usage.cost_usd is None
    assert reply.usage.input_tokens == 100


def test_cache_tokens_count_as_input_and_are_priced(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH, input_tokens=10, output_tokens=0,
                     cache_creation_input_tokens=1000, cache_read_input_tokens=2000)
    reply = model_for(fake, "claude-haiku-4-5").ask(request())
    assert reply.usage.all_input_tokens == 3010
    # Haiku 4.x: $1 per million input; writes cost 1.25x, reads 0.1x.
    assert reply.usage.cost_usd == pytest.approx((10 + 1250 + 200) / 1e6)


def test_price_table_longest_prefix_wins() -> None:
    assert price_for("claude-opus-4-5-20251101") == (5.0, 25.0)
    assert price_for("claude-opus-4-1-20250805") == (15.0, 75.0)
    assert price_for("claude-sonnet-4-20250514") == (3.0, 15.0)
    assert price_for("gpt-4o") is None


def test_request_forces_the_single_step_tool(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH)
    model_for(fake, max_tokens=1234).ask(request())
    (sent,) = fake.requests
    assert sent.path == "/v1/messages"
    assert sent.api_key == KEY
    body = sent.body
    assert body["model"] == "claude-sonnet-4-5"
    assert body["max_tokens"] == 1234
    assert [tool["name"] for tool in body["tools"]] == ["step"]
    assert body["tools"][0]["input_schema"] == {
        "type": "object",
        "properties": {"patch": {"type": "array", "items": {"type": "object"}}},
        "required": ["patch"],
    }
    assert body["tool_choice"] == {"type": "tool", "name": "step"}
    system_text = "".join(block["text"] for block in body["system"])
    assert system_text == system_prompt()
    assert "UnknownExecution" in system_text and "rio.state/1" in system_text
    (message,) = body["messages"]
    assert message["role"] == "user"
    state_json = message["content"].split("State:\n", 1)[1]
    assert json.loads(state_json) == STATE
    assert "rejected" not in message["content"]
    assert "stream" not in body or body["stream"] is False


def test_last_rejection_is_shown_to_the_model(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH)
    model_for(fake).ask(request(last_rejection="stale predecessor"))
    content = fake.requests[0].body["messages"][0]["content"]
    assert "previous patch for this Turn was rejected: stale predecessor" in content


def test_overloaded_is_retryable_with_retry_after_and_no_hidden_retry(
    fake: FakeAnthropic,
) -> None:
    fake.overloaded(retry_after=7)
    fake.reply_patch(PATCH)  # would be consumed if the SDK retried by itself
    error = ask_error(model_for(fake))
    assert error.transient is True
    assert error.retry_after == 7.0
    assert "529" in str(error)
    assert len(fake.requests) == 1
    # The harness's next attempt gets the queued reply.
    assert model_for(fake).ask(request()).patch == PATCH
    assert len(fake.requests) == 2


def test_rate_limit_and_server_error_are_retryable(fake: FakeAnthropic) -> None:
    fake.error(429, "rate_limit_error", headers={"retry-after": "3"})
    first = ask_error(model_for(fake))
    assert (first.transient, first.retry_after) == (True, 3.0)
    second = ask_error(model_for(fake))  # empty queue: the fake answers 500
    assert (second.transient, second.retry_after) == (True, None)
    assert len(fake.requests) == 2


@pytest.mark.parametrize(("status", "kind"), [
    (400, "invalid_request_error"),
    (401, "authentication_error"),
    (403, "permission_error"),
    (404, "not_found_error"),
])
def test_client_errors_are_not_retryable(fake: FakeAnthropic, status: int, kind: str) -> None:
    fake.error(status, kind, "nope", headers={"retry-after": "5"})
    error = ask_error(model_for(fake))
    assert error.transient is False
    assert error.retry_after is None
    assert kind in str(error)
    assert KEY not in str(error)
    assert len(fake.requests) == 1


@pytest.mark.parametrize("kind", ["missing", "string"])
def test_malformed_tool_input_is_a_retryable_error(fake: FakeAnthropic, kind: str) -> None:
    fake.malformed(kind)
    error = ask_error(model_for(fake))
    assert error.transient is True
    assert "malformed" in str(error)


def test_max_tokens_stop_with_partial_input_is_never_applied(fake: FakeAnthropic) -> None:
    partial = {"type": "tool_use", "id": "toolu_1", "name": "step", "input": {"patch": PATCH[:1]}}
    fake.reply_raw([partial], stop_reason="max_tokens")
    error = ask_error(model_for(fake))
    assert error.transient is True
    assert "max_tokens" in str(error)


@pytest.mark.parametrize("content", [
    [{"type": "text", "text": "I will just talk."}],
    [{"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"patch": []}}],
    [{"type": "tool_use", "id": "toolu_1", "name": "step", "input": {"patch": []}},
     {"type": "tool_use", "id": "toolu_2", "name": "step", "input": {"patch": []}}],
    [{"type": "tool_use", "id": "toolu_1", "name": "step", "input": {"patch": ["remove"]}}],
], ids=["no-tool", "wrong-tool", "two-calls", "non-object-op"])
def test_anything_but_one_step_call_is_malformed(
    fake: FakeAnthropic, content: list[dict[str, Any]]
) -> None:
    fake.reply_raw(content, stop_reason="tool_use")
    error = ask_error(model_for(fake))
    assert error.transient is True
    assert "malformed" in str(error)


def test_text_beside_the_step_call_is_fine(fake: FakeAnthropic) -> None:
    call = {"type": "tool_use", "id": "toolu_1", "name": "step", "input": {"patch": PATCH}}
    fake.reply_raw([{"type": "text", "text": "Checking status."}, call], stop_reason="tool_use")
    assert model_for(fake).ask(request()).patch == PATCH


def test_timeout_is_retryable_and_not_retried(fake: FakeAnthropic) -> None:
    fake.delay(5)
    fake.reply_patch(PATCH)
    error = ask_error(model_for(fake, timeout=0.3))
    assert error.transient is True
    assert "timed out" in str(error)
    assert len(fake.requests) == 1


def test_refused_connection_is_retryable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = AnthropicModel("claude-sonnet-4-5", api_key=KEY, base_url=f"http://127.0.0.1:{port}")
    error = ask_error(model)
    assert error.transient is True


def test_environment_supplies_endpoint_and_key(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    fake.reply_patch(PATCH)
    reply = AnthropicModel("claude-sonnet-4-5").ask(request())
    assert reply.patch == PATCH
    (sent,) = fake.requests
    assert sent.api_key == KEY


def test_missing_key_fails_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ModelError) as info:
        AnthropicModel("claude-sonnet-4-5", base_url="http://127.0.0.1:9")
    assert info.value.transient is False
    assert "ANTHROPIC_API_KEY" in str(info.value)
