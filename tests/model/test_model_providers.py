"""``--model`` specs, Bedrock and Vertex clients against the local fake, the model table as
data, and the system prompt's worked patch."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from rio_ci.core.errors import ModelError, UsageError
from rio_ci.model.base import ModelRequest
from rio_ci.model.claude import table
from rio_ci.model.claude.client import AnthropicModel
from rio_ci.model.providers import (
    build_model,
    fallback_spec,
    full_spec,
    nearest_models,
    parse_price,
    priced_model,
)
from rio_ci.model.scripted import ScriptedModel
from rio_ci.model.turn import system_prompt
from tests.fakes.anthropic_api import FakeAnthropic

TOKEN = "bedrock-or-vertex-token-41c2"
PATCH: list[Any] = [{"op": "test", "path": "/revision", "value": 0}]
STATE: dict[str, Any] = {
    "schema": "rio.state/1",
    "id": "s",
    "revision": 0,
    "goal": "g",
    "cells": [],
    "runtime": {"next_cell_id": 1, "cells": {}, "inbox": [], "usage": {}, "pause": None},
}
REQUEST = ModelRequest(turn_id="t", state=STATE, round_index=1)
CLOUD_ENV = (
    "AWS_BEARER_TOKEN_BEDROCK",
    "ANTHROPIC_AWS_API_KEY",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "CLOUD_ML_REGION",
    "ANTHROPIC_VERTEX_PROJECT_ID",
)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeAnthropic]:
    for name in CLOUD_ENV:
        monkeypatch.delenv(name, raising=False)
    with FakeAnthropic() as server:
        yield server


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


# --- --model specs -----------------------------------------------------------------------------


def test_specs_name_the_default_model_a_claude_model_or_a_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    script = tmp_path / "rounds.yml"
    script.write_text("- - {op: add, path: /cells/-, value: {kind: note, text: hi}}\n")
    assert build_model("anthropic").name == "anthropic:claude-sonnet-5-5"
    assert build_model("anthropic:").name == "anthropic:claude-sonnet-5-5"
    assert build_model(None).name == "anthropic:claude-sonnet-5-5"
    opus = build_model("anthropic:claude-opus-5-5", effort="max", price=parse_price("1/2"))
    assert isinstance(opus, AnthropicModel) and opus.effort == "max"
    assert opus.price() == parse_price("1/2")
    assert isinstance(build_model(f"scripted:{script}"), ScriptedModel)


@pytest.mark.parametrize("spec", ["openai:gpt-5", "sonnet-5-5", "scripted:", ""])
def test_a_spec_that_names_no_model_is_a_usage_error(spec: str) -> None:
    with pytest.raises(UsageError):
        build_model(spec or "nope:")


# --- Bedrock and Vertex ------------------------------------------------------------------------


def test_bedrock_sends_the_bedrock_id_with_the_api_key_to_the_messages_endpoint(
    fake: FakeAnthropic,
) -> None:
    fake.reply_patch(PATCH)
    model = AnthropicModel(
        "claude-sonnet-5-5",
        provider="bedrock",
        api_key=TOKEN,
        base_url=fake.base_url,
        region="us-east-1",
    )
    assert model.name == "bedrock:claude-sonnet-5-5"
    assert model.price() is None  # partner platforms set their own prices
    assert model.ask(REQUEST).patch == PATCH
    (sent,) = fake.requests
    assert sent.path == "/v1/messages" and sent.api_key == TOKEN
    assert sent.body["model"] == "anthropic.claude-sonnet-5-5"
    assert sent.body["thinking"] == {"type": "adaptive", "display": "summarized"}


def test_a_bedrock_inference_profile_is_sent_as_given(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", TOKEN)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    fake.reply_patch(PATCH)
    model = AnthropicModel(
        "global.anthropic.claude-opus-5-5",
        provider="bedrock",
        base_url=fake.base_url,
        price=parse_price("4/20"),
    )
    assert model.info.id == "claude-opus-5-5" and model.ask(REQUEST).patch == PATCH
    assert fake.requests[0].body["model"] == "global.anthropic.claude-opus-5-5"
    assert fake.requests[0].api_key == TOKEN


def test_vertex_posts_to_the_publisher_model_path_with_the_access_token(
    fake: FakeAnthropic,
) -> None:
    fake.reply_patch(PATCH, thinking="plan")
    model = AnthropicModel(
        "claude-opus-5-5",
        provider="vertex",
        api_key=TOKEN,
        base_url=fake.base_url,
        region="us-east5",
        project="proj-7",
    )
    reply = model.ask(REQUEST)
    assert reply.patch == PATCH and reply.rationale == "plan"
    (sent,) = fake.requests
    assert sent.path == (
        "/projects/proj-7/locations/us-east5/publishers/anthropic/models/"
        "claude-opus-5-5:streamRawPredict"
    )
    assert sent.api_key == TOKEN and "model" not in sent.body
    assert sent.body["anthropic_version"] and sent.body["output_config"] == {"effort": "high"}


@pytest.mark.skipif(installed("boto3"), reason="the bedrock extra is installed")
def test_bedrock_without_a_key_or_the_extra_names_the_extra(fake: FakeAnthropic) -> None:
    with pytest.raises(ModelError, match=r"rio-ci\[bedrock\]") as info:
        AnthropicModel("claude-sonnet-5-5", provider="bedrock", region="us-east-1")
    assert info.value.transient is False
    with pytest.raises(ModelError, match=r"legacy Bedrock endpoint.*rio-ci\[bedrock\]"):
        AnthropicModel("claude-opus-4-6", provider="bedrock", api_key=TOKEN, region="us-east-1")


@pytest.mark.skipif(installed("google.auth"), reason="the vertex extra is installed")
def test_vertex_without_a_token_or_the_extra_names_the_extra(fake: FakeAnthropic) -> None:
    with pytest.raises(ModelError, match=r"rio-ci\[vertex\]"):
        AnthropicModel("claude-sonnet-5-5", provider="vertex", region="global")


def test_missing_region_or_project_is_a_clear_error(fake: FakeAnthropic) -> None:
    with pytest.raises(ModelError, match="CLOUD_ML_REGION"):
        AnthropicModel("claude-sonnet-5-5", provider="vertex", api_key=TOKEN)
    with pytest.raises(ModelError, match="ANTHROPIC_VERTEX_PROJECT_ID"):
        AnthropicModel("claude-sonnet-5-5", provider="vertex", api_key=TOKEN, region="global")
    with pytest.raises(ModelError, match="AWS_REGION"):
        AnthropicModel("claude-sonnet-5-5", provider="bedrock", api_key=TOKEN)


# --- the table ---------------------------------------------------------------------------------


def test_the_table_is_complete_dated_and_sourced() -> None:
    data = table.table()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", data["checked"])
    assert table.lookup(table.default_model()) is not None
    for model_id, spec in data["models"].items():
        info = table.lookup(model_id)
        assert info is not None and info.max_output > 0, model_id
        assert spec["sources"] and all(u.startswith("https://") for u in spec["sources"])
        assert set(info.features.effort) <= set(table.EFFORTS)
        assert info.features.thinking in ("adaptive", "adaptive_always_on", "extended", "none")
        if info.price is not None:
            assert info.price.cache_read < info.price.input < info.price.cache_write
    for model_id, spec in data["retired"].items():
        assert table.lookup(model_id) is None and spec["replacement"] in data["models"]


def test_aliases_and_platform_ids_find_their_model() -> None:
    haiku = table.lookup("claude-haiku-4-5-20251001")
    assert haiku is not None and haiku.id == "claude-haiku-4-5"
    for wrapped in (
        "anthropic.claude-haiku-4-5-20251001-v1:0",
        "us.anthropic.claude-sonnet-5-5",
        "claude-opus-4-5@20251101",
    ):
        assert table.lookup(wrapped) is not None, wrapped
    assert table.retired("claude-sonnet-4-5-20250929") is not None
    assert table.lookup("claude-sonnet-9") is None


# --- the system prompt -------------------------------------------------------------------------


def test_the_prompt_teaches_the_work_sequence_tools_and_budgets() -> None:
    text = system_prompt()
    for needle in (
        "Explore",
        "Reproduce",
        "Fix",
        "Test",
        "git diff",
        "Conclude",
        "Plan:",
        '["bash", "-c"',
        "runtime.limits",
        "runtime.usage",
        "runtime.validators",
        "rio_ci.api.output(cell_id",
        "from rio_ci.api import output",
        "model_attempts",
        "python -m rio_ci.tools view",
        "apply_diff",
        "UnknownExecution",
        "STATE, stable part",
        "STATE, part that changes every round",
    ):
        assert needle in text, needle


def test_the_worked_patch_in_the_prompt_does_what_it_says() -> None:
    block = system_prompt().split("## A worked patch", 1)[1].split("```json\n", 1)[1]
    patch = json.loads(block.split("\n```", 1)[0])["patch"]
    cells = [
        {"id": 2, "previous_id": None, "kind": "note", "text": "Plan: explore"},
        {"id": 3, "previous_id": None, "kind": "cmd", "argv": ["ls", "-R"]},
        {"id": 4, "previous_id": None, "kind": "cmd", "argv": ["python", "-m", "pytest"]},
    ]
    state = {"revision": 7, "cells": cells}
    assert patch[0] == {"op": "test", "path": "/revision", "value": 7}
    new = [op["value"] for op in patch if op["op"] in ("add", "replace")]
    assert [c["id"] for c in new] == [5, 6, 7]  # next_cell_id 5, then +1 in operation order
    assert [c["previous_id"] for c in new] == [2, None, None]
    after = jsonpatch.apply_patch(state, patch)
    assert [c["id"] for c in after["cells"]] == [5, 4, 6, 7]
    source = new[1]["source"]
    assert source.count("# /// script") == 1 and "from rio_ci.tools import replace" in source
    assert new[2]["argv"][:2] == ["bash", "-c"]


def test_a_bare_claude_id_is_anthropics_and_a_typo_gets_the_nearest_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert full_spec("claude-sonnet-5-5") == "anthropic:claude-sonnet-5-5"
    assert full_spec("bedrock:claude-x") == "bedrock:claude-x"
    assert fallback_spec("bedrock:a", "claude-opus-5-5") == "anthropic:claude-opus-5-5"
    model = priced_model("claude-sonnet-5-5", effort="high", price=None, stored={})
    assert model.name == "anthropic:claude-sonnet-5-5"
    with pytest.raises(UsageError) as typo:
        priced_model("claude-sonet-5-5", effort="high", price=None, stored={})
    assert str(typo.value).startswith(
        "unknown model 'claude-sonet-5-5'; the nearest known: claude-sonnet-5-5"
    )
    assert nearest_models("anthropic:claude-sonnet-5-5") == []  # a known id has none
