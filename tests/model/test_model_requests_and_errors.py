"""The Claude adapter's requests and error rules (docs/models.md), with the real anthropic SDK
against the local fake of the Messages API: final provider answers, the ``step`` schema and
strict tool use, max_tokens by effort, the model table (prefill, retired ids) and the
environment block."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import anthropic
import pytest

from rio_ci.core.errors import UsageError
from rio_ci.model.claude import table
from rio_ci.model.claude.client import AnthropicModel
from rio_ci.model.claude.tool import STEP_TOOL, tool_for
from rio_ci.model.environment_block import (
    ENVIRONMENT_HEADER,
    STATUS_BYTES,
    STATUS_LINES,
    environment_block,
    git_status,
)
from rio_ci.model.step_tool import strict_obstacle
from tests.fakes.anthropic_api import FakeAnthropic
from tests.model.test_model_anthropic import KEY, PATCH, ask_error, fake, model_for, request

__all__ = ["fake"]  # the fixture, shared with test_model_anthropic

# --- final provider answers ----------------------------------------------------------------


def test_a_spend_limit_429_is_final_and_names_the_limit(fake: FakeAnthropic) -> None:
    fake.spend_limited()
    error = ask_error(model_for(fake))
    assert error.transient is False and error.retry_after is None
    assert "enforced_spend_limit_reached" in str(error) and "regain access" in str(error)
    assert len(fake.requests) == 1


def test_a_plain_rate_limit_429_stays_transient(fake: FakeAnthropic) -> None:
    fake.rate_limited(retry_after=2)
    assert ask_error(model_for(fake)).transient is True


def test_a_billing_error_is_final_whatever_its_status(fake: FakeAnthropic) -> None:
    fake.error(429, "billing_error", "your credit balance is too low")
    error = ask_error(model_for(fake))
    assert error.transient is False and "credit balance" in str(error)


def test_a_404_for_an_unknown_model_names_the_default(fake: FakeAnthropic) -> None:
    error = ask_error(model_for(fake, "claude-sonnet-9"))
    assert error.transient is False
    assert f"the default is {table.default_model()}" in str(error)


# --- the step schema -----------------------------------------------------------------------


def test_the_step_schema_says_what_a_patch_is() -> None:
    item = STEP_TOOL["input_schema"]["properties"]["patch"]["items"]
    # the four operations of docs/patches.md, taken from admission itself (step_tool.PATCH_OPS)
    assert item["properties"]["op"]["enum"] == ["test", "add", "replace", "remove"]
    assert item["properties"]["path"] == {"type": "string"}
    assert item["required"] == ["op", "path"] and item["additionalProperties"] is False
    assert STEP_TOOL["input_schema"]["additionalProperties"] is False


@pytest.mark.parametrize(
    ("op", "said"),
    [
        ({"op": "move", "path": "/cells/0", "from": "/cells/1"}, "op 'move'"),
        ({"op": "add", "path": 3, "value": 1}, "path 3"),
        ({"path": "/cells/-", "value": {}}, "op None"),
    ],
)
def test_a_malformed_operation_is_one_clear_invalid_attempt(
    fake: FakeAnthropic, op: dict[str, Any], said: str
) -> None:
    fake.reply_patch([PATCH[0], op])
    reply = model_for(fake).ask(request())
    assert reply.patch is None and reply.invalid is not None
    assert "operation 1 must have an op of test, add, replace, remove" in reply.invalid
    assert said in reply.invalid


def test_step_is_sent_without_strict_because_its_value_is_open(fake: FakeAnthropic) -> None:
    assert strict_obstacle(STEP_TOOL["input_schema"]) == (
        "input_schema.patch[].value is an open value (any JSON)"
    )
    fake.reply_patch(PATCH)
    model_for(fake).ask(request())
    (tool,) = fake.requests[0].body["tools"]
    assert "strict" not in tool and tool["input_schema"] == STEP_TOOL["input_schema"]


def test_a_closed_schema_gets_strict_where_the_model_offers_it(fake: FakeAnthropic) -> None:
    closed = {
        "name": "note",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        },
    }
    info = table.lookup("claude-sonnet-5-5")
    assert info is not None and info.features.strict_tools
    sent = tool_for(info, closed)  # type: ignore[arg-type]
    assert sent.get("strict") is True
    # ... and the fake (like the API) accepts it, but refuses an open object under strict
    client = anthropic.Anthropic(api_key=KEY, base_url=fake.base_url, max_retries=0)
    fake.reply_patch(PATCH)
    ask = {"model": "claude-sonnet-5-5", "max_tokens": 100}
    ask["messages"] = [{"role": "user", "content": "hi"}]
    client.messages.create(**ask, tools=[sent])  # type: ignore[call-overload]
    open_object = {**closed, "input_schema": {"type": "object", "properties": {}}}
    with pytest.raises(anthropic.BadRequestError, match="additionalProperties"):
        client.messages.create(**ask, tools=[{**open_object, "strict": True}])  # type: ignore[call-overload]


# --- max_tokens by effort --------------------------------------------------------------------


def test_max_tokens_doubles_at_xhigh_and_max(fake: FakeAnthropic) -> None:
    sent = {}
    for effort in table.EFFORTS:
        fake.reply_patch(PATCH)
        model_for(fake, effort=effort).ask(request())
        sent[effort] = fake.requests[-1].body["max_tokens"]
    assert sent["low"] == sent["medium"] == sent["high"] == 32_000
    assert sent["xhigh"] == sent["max"] == 64_000


def test_max_tokens_by_effort_is_capped_at_the_models_maximum(fake: FakeAnthropic) -> None:
    fake.reply_patch(PATCH)
    model_for(fake, "claude-sonnet-4-6", effort="max").ask(request())
    info = table.lookup("claude-sonnet-4-6")
    assert info is not None
    assert fake.requests[0].body["max_tokens"] == min(64_000, info.max_output)
    small = AnthropicModel("rio-test-small", effort="max", connect=False)
    assert small.max_tokens == min(64_000, small.info.max_output)


# --- the model table -------------------------------------------------------------------------

NO_PREFILL = ["claude-sonnet-5", "claude-opus-4-8", "claude-opus-4-7", "claude-opus-4-6"]
NO_PREFILL.append("claude-sonnet-4-6")


@pytest.mark.parametrize("name", NO_PREFILL)
def test_prefill_is_refused_from_the_4_6_models_on(fake: FakeAnthropic, name: str) -> None:
    info = table.lookup(name)
    assert info is not None and info.features.assistant_prefill == "rejected"
    client = anthropic.Anthropic(api_key=KEY, base_url=fake.base_url, max_retries=0)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "{"}]
    with pytest.raises(anthropic.BadRequestError, match="prefill"):
        client.messages.create(model=name, max_tokens=100, messages=messages)  # type: ignore[arg-type]


def test_every_current_model_is_later_than_4_6_or_refuses_prefill_in_the_table() -> None:
    allowed = sorted(
        name
        for name, spec in table.table()["models"].items()
        if spec["features"]["assistant_prefill"] != "rejected"
    )
    assert allowed == ["claude-haiku-4-5", "claude-opus-4-5"]


@pytest.mark.parametrize(
    ("model", "replacement"),
    [
        ("claude-opus-4-1", "claude-opus-5-5"),
        ("claude-opus-4-1-20250805", "claude-opus-5-5"),
        ("claude-3-7-sonnet-20250219", "claude-sonnet-5-5"),
        ("claude-3-5-haiku-20241022", "claude-haiku-5-5"),
        ("claude-3-opus-20240229", "claude-opus-5-5"),
        ("claude-3-haiku-20240307", "claude-haiku-5-5"),
    ],
)
def test_a_retired_id_fails_before_any_request_naming_its_replacement(
    fake: FakeAnthropic, model: str, replacement: str
) -> None:
    with pytest.raises(UsageError, match=f"retired on 20[0-9-]+; use {replacement}"):
        model_for(fake, model)
    assert fake.requests == []


def test_every_retired_entry_has_a_date_a_listed_replacement_and_a_source() -> None:
    for name, spec in table.table()["retired"].items():
        assert spec["retired"] <= table.checked(), name
        assert table.lookup(spec["replacement"]) is not None, name
        assert spec["source"].startswith("https://platform.claude.com/docs/"), name


# --- the environment block -------------------------------------------------------------------


def test_the_environment_block_follows_the_last_breakpoint_and_keeps_the_prefix(
    fake: FakeAnthropic,
) -> None:
    model = model_for(fake)
    for now in (1_800_000_000, 1_800_000_600):
        fake.reply_patch(PATCH)
        block = environment_block(Path("/work/repo"), now=now)
        model.ask(replace(request(), environment_block=block))
    bodies = [r.body for r in fake.requests]
    prefixes = []
    for body, now in zip(bodies, (1_800_000_000, 1_800_000_600), strict=True):
        content = body["messages"][0]["content"]
        last_mark = max(i for i, b in enumerate(content) if b.get("cache_control"))
        (where,) = [i for i, b in enumerate(content) if b["text"].startswith(ENVIRONMENT_HEADER)]
        assert where > last_mark
        assert f"unix time: {now}" in content[where]["text"]
        assert "working directory: /work/repo" in content[where]["text"]
        cached = {
            "system": body["system"],
            "tools": body["tools"],
            "head": content[: last_mark + 1],
        }
        prefixes.append(json.dumps(cached, sort_keys=True))
    assert prefixes[0] == prefixes[1]
    assert bodies[0]["messages"] != bodies[1]["messages"]  # only the block changed


def test_the_block_says_date_time_os_python_and_status(tmp_path: Path) -> None:
    block = environment_block(tmp_path, now=1_800_000_000)
    assert "date: 2027-01-15 (UTC; 2027-01-15T08:00:00Z)" in block
    assert f"python: {platform.python_version()}" in block and f"os: {platform.platform()}" in block
    assert "git status unavailable: fatal: not a git repository" in block


def init_repo(path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(path)], check=True)


def test_git_status_is_clipped_with_a_marker(tmp_path: Path) -> None:
    init_repo(tmp_path)
    assert git_status(tmp_path) == "(clean)"
    for number in range(STATUS_LINES + 15):
        (tmp_path / f"file-{number:03}.txt").write_text("x")
    shown = git_status(tmp_path).splitlines()
    assert len(shown) == STATUS_LINES + 1 and shown[0] == "?? file-000.txt"
    assert shown[-1] == "[… 15 more lines not shown]"
    long_names = tmp_path / "long"
    long_names.mkdir()
    init_repo(long_names)
    for number in range(30):
        (long_names / (f"{number:02}" + "n" * 200)).write_text("x")
    assert len(git_status(long_names).encode()) <= STATUS_BYTES + 100


def test_git_status_honours_none_of_the_trees_configuration(tmp_path: Path) -> None:
    init_repo(tmp_path)
    ran = tmp_path.parent / f"{tmp_path.name}-ran"
    hook = tmp_path.parent / f"{tmp_path.name}-hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {ran}\n")
    hook.chmod(0o755)
    (tmp_path / "tracked.txt").write_text("x")
    subprocess.run(["git", "-C", str(tmp_path), "add", "tracked.txt"], check=True)
    with (tmp_path / ".git" / "config").open("a") as config:
        config.write(f"[core]\n\tfsmonitor = {hook}\n")
    (tmp_path / "tracked.txt").write_text("changed")
    assert "tracked.txt" in git_status(tmp_path)
    with (tmp_path / ".git" / "config").open("a") as config:
        config.write(f'[filter "evil"]\n\tclean = {hook}\n')
    (tmp_path / ".gitattributes").write_text("*.txt filter=evil\n")
    said = git_status(tmp_path)
    assert said.startswith("git status unavailable: the tree's git configuration declares filter")
    assert not ran.exists()  # neither the fsmonitor nor the filter program ever ran


def test_git_for_the_block_gets_no_secret_and_the_hardening_on_its_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The git the block runs is given neither a credential nor the Session's ``--secret``
    variables (a Cell sharing the harness's user could read its environment while it runs),
    and it gets the hardening on its command line too, which a git older than 2.31 (no
    ``GIT_CONFIG_COUNT``) still honours. A stand-in ``git`` first on PATH records both."""
    bin_dir, record = tmp_path / "bin", tmp_path / "git-saw.json"
    bin_dir.mkdir()
    stand_in = bin_dir / "git"
    stand_in.write_text(
        "#!/usr/bin/env python3\n"
        "import json, os, sys\n"
        f"with open({str(record)!r}, 'a') as out:\n"
        "    out.write(json.dumps({'argv': sys.argv[1:], 'env': dict(os.environ)}) + '\\n')\n"
    )
    stand_in.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DEPLOY_HOOK", "https://hooks.example.test/T0/B1/abcdef123456")
    monkeypatch.setenv("GITHUB_TOKEN", "canary-github-9c2d")
    block = environment_block(tmp_path, secrets=["DEPLOY_HOOK"])
    assert "git status --short:" in block
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    assert calls  # the filter look-up and the status
    for call in calls:
        assert not {"DEPLOY_HOOK", "GITHUB_TOKEN"} & set(call["env"])
        assert call["argv"][:2] == ["-c", "core.hooksPath=/dev/null"]
        assert "core.fsmonitor=false" in call["argv"]
