"""``rio-ci bench``: one quick run as a real subprocess; every figure is present and a finite
measured number (its value is not checked: that is the bench's job, not the test's); the
storage chart is drawn; no Worker survives an idle Owner; a memory-backed file system is
refused. The caching provider's billing rules are tested on their own, and the scripted
Session's committed usage against what that provider billed; the Journal-size chart too (the
early SDK import: tests/start/test_start.py). No test here times anything: speed goals are
the bench's."""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import anthropic
import psutil
import pytest

from rio_ci.commands.bench import GOALS, MEMORY_FILE_SYSTEMS, file_system, journal_chart, tokens
from rio_ci.commands.bench.caching import BreakpointError, PromptCache, minimum_tokens
from rio_ci.commands.bench.provider import LoopbackProvider
from rio_ci.model.claude.client import AnthropicModel
from tests.fakes.anthropic_api import FakeAnthropic
from tests.kit import ROOT, run_cli

# Every figure the bench reports, by the part that measures it.
FIGURES = [
    # commits
    "step_commit_ms_p50",
    "step_commit_ms_p95",
    "bare_commit_ms_p50",
    "bare_commit_ms_p95",
    "ratio_step_commit",
    "ratio_step_commit_p95",
    "step_sql_ms_p50",
    "ratio_step_sql_commit",
    "step_samples",
    "round_bookkeeping_ms_p50",
    "round_bookkeeping_ms_p95",
    "round_bookkeeping_commits",
    "ratio_round_bookkeeping",
    "round_samples",
    "unsynced_commit_ms_after_fold",
    "unsynced_commit_ms",
    # storage
    "session_bytes_per_round",
    "content_bytes_per_round",
    "wal_bytes_per_round",
    "ratio_bytes_per_round",
    "storage_rounds",
    "open_build_seconds",
    "open_ms_1k",
    "open_ms_10k",
    "open_ms_100k",
    "owner_open_ms_1k",
    "owner_open_ms_10k",
    "owner_open_ms_100k",
    "owner_open_ms_100k_in_doubt",
    "ratio_open_100k_1k",
    "ratio_owner_open_100k_1k",
    "show_ms_1k",
    "show_ms_10k",
    "show_ms_100k",
    "show_json_ms_1k",
    "show_json_ms_10k",
    "show_json_ms_100k",
    "ratio_show_100k_1k",
    "ratio_show_json_100k_1k",
    "events_1k",
    "events_10k",
    "events_100k",
    "state_bytes_1k",
    "state_bytes_10k",
    "state_bytes_100k",
    "session_bytes_1k",
    "session_bytes_10k",
    "session_bytes_100k",
    "finish_seconds_300_rounds",
    "restore_seconds_300_rounds",
    "session_bytes_300_rounds",
    "artifact_bytes_300_rounds",
    # cells
    "code_cell_ms_owner_first",
    "code_cell_ms_uv_first",
    "code_cell_ms_owner",
    "code_cell_ms_uv",
    "cmd_cell_ms_owner",
    "cmd_cell_ms_bare",
    "ratio_code_cell_vs_uv",
    "overhead_ms_cmd_cell",
    "overhead_ms_cmd_cell_floor",
    "ratio_cmd_cell_vs_floor",
    "write_transactions_silent_cell",
    "inbox_to_turn_ms_p50",
    "inbox_to_turn_ms_p95",
    "recovery_ms",
    "recovery_samples",
    "idle_owner_rss_mib",
    "idle_owner_cpu_percent",
    "idle_worker_processes",
    # the GitHub layer
    "launch_record_ms",
    # tokens: the scripted Session against the caching provider
    "cache_read_share",
    "cost_ratio_vs_uncached",
    "session_input_tokens",
    "session_cache_read_tokens",
    "session_cache_write_tokens",
    "session_rounds",
    # start: rio-ci run to its first request
    "start_to_first_request_seconds",
    "import_anthropic_seconds",
    "ratio_start_vs_import_anthropic",
    "start_samples",
    # egress: an install and a new connection through the proxy
    "egress_install_ms_direct",
    "egress_install_ms_proxied",
    "ratio_egress_install",
    "ratio_egress_install_pairs",
    "egress_install_pairs",
    "egress_connect_ms_direct",
    "egress_connect_ms_proxied",
    "egress_connect_overhead_ms",
    "egress_connect_samples",
    "egress_proxied_connections",
    # github_jobs: one Session's jobs against the loopback GitHub
    "github_requests_label_job",
    "github_requests_wakeup_job",
    "github_requests_listen_10min",
    "artifact_bytes_3_jobs",
    "artifact_bytes_20_jobs",
    "ratio_artifact_bytes_20_vs_3_jobs",
]
# A figure that may be zero when nothing is wrong (an overhead can measure as negative).
MAY_BE_ZERO = {
    "idle_owner_cpu_percent",
    "idle_worker_processes",
    "overhead_ms_cmd_cell",
    "ratio_cmd_cell_vs_floor",
    "egress_connect_overhead_ms",
}


def finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    where = tmp_path_factory.mktemp("bench")
    if file_system(where)["type"] in MEMORY_FILE_SYSTEMS:
        where = ROOT  # the bench measures in a folder of its own and removes it
    if file_system(where)["type"] in MEMORY_FILE_SYSTEMS:
        pytest.skip("no disk-backed folder to measure durability in")
    chart = tmp_path_factory.mktemp("chart") / "size.svg"
    done = run_cli("bench", "--json", "--quick", "--dir", where, "--chart", chart, timeout=480)
    assert done.code == 0, (done.stdout[-2000:], done.err[-2000:])
    assert isinstance(done.out, dict), done.stdout[-2000:]
    return done.out, chart


@pytest.fixture(scope="module")
def figures(bench: tuple[dict[str, Any], Path]) -> dict[str, Any]:
    return bench[0]


@pytest.mark.slow
def test_every_figure_is_a_finite_number(figures: dict[str, Any]) -> None:
    assert [key for key in FIGURES if key not in figures] == []
    assert {key: figures[key] for key in FIGURES if not finite(figures[key])} == {}
    # A duration, size or ratio of zero or less could only be a figure not measured.
    assert {
        key: figures[key] for key in FIGURES if key not in MAY_BE_ZERO and not figures[key] > 0
    } == {}
    assert 0 <= figures["idle_owner_cpu_percent"] <= 100


@pytest.mark.slow
def test_goals_name_measured_figures(figures: dict[str, Any]) -> None:
    assert set(figures["goals"]) == {name for name, _, _ in GOALS}
    for name, goal in figures["goals"].items():
        assert name in FIGURES and isinstance(goal["met"], bool)


@pytest.mark.slow
def test_the_chart_draws_this_tree_from_measured_points(bench: tuple[dict[str, Any], Path]) -> None:
    figures, chart = bench
    svg = ET.parse(chart).getroot()
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    # this tree's Session size, and the rounds' new content for comparison
    assert len(lines) == len(figures["chart"]["bytes_per_round"]) == 2
    for line in lines:
        points = [tuple(map(float, p.split(","))) for p in line.attrib["points"].split()]
        assert len(points) > 2
        assert all(b[0] > a[0] and b[1] < a[1] for a, b in itertools.pairwise(points))  # grows
    assert all(size > 0 for size in figures["chart"]["bytes_per_round"].values())


@pytest.mark.slow
def test_no_worker_outlives_an_idle_owner(figures: dict[str, Any]) -> None:
    assert figures["idle_worker_processes"] == 0


@pytest.mark.slow
def test_long_sessions_are_full_size_with_a_bounded_context(figures: dict[str, Any]) -> None:
    assert figures["events_1k"] >= 1_000 and figures["events_100k"] >= 100_000
    # The State shown to the model does not grow with the Journal.
    assert figures["state_bytes_100k"] <= 2 * figures["state_bytes_1k"]
    assert figures["session_bytes_100k"] > figures["session_bytes_1k"]


@pytest.mark.slow
def test_the_file_system_is_named(figures: dict[str, Any]) -> None:
    assert figures["filesystem"]["type"] not in MEMORY_FILE_SYSTEMS
    assert figures["filesystem"]["type"] != "unknown"


@pytest.mark.slow
def test_the_egress_figures_are_measured_through_the_real_proxy(figures: dict[str, Any]) -> None:
    """The bench's egress measure: both installs and both connection probes measured, the
    proxied ones through the proxy (the measure counts its connections and refuses a run
    that went around it), in a namespace where rio-ci is root."""
    egress = [key for key in FIGURES if key.startswith(("egress_", "ratio_egress_"))]
    assert {key: figures[key] for key in egress if not finite(figures[key])} == {}
    pairs, samples = figures["egress_install_pairs"], figures["egress_connect_samples"]
    assert figures["egress_proxied_connections"] >= pairs + 1 + samples
    assert figures["egress_isolated"] is (sys.platform.startswith("linux") and os.geteuid() == 0)
    assert figures["egress_install_ms_direct"] > 0 and figures["egress_install_ms_proxied"] > 0


def test_a_chart_line_needs_a_source_tree(tmp_path: Path) -> None:
    done = run_cli(
        "bench",
        "--json",
        "--quick",
        "--dir",
        tmp_path,
        "--chart",
        tmp_path / "c.svg",
        "--before",
        f"old={tmp_path}",
    )
    assert done.code == 2 and "--before expects LABEL=DIR" in done.out["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # refused before measuring


def _writable_tmpfs() -> Path | None:
    mounts = [
        Path(p.mountpoint)
        for p in psutil.disk_partitions(all=True)
        if p.fstype == "tmpfs" and os.access(p.mountpoint, os.W_OK)
    ]
    return Path("/dev/shm") if Path("/dev/shm") in mounts else next(iter(mounts), None)


def test_durability_is_not_measured_on_tmpfs(tmp_path: Path) -> None:
    tmpfs = _writable_tmpfs()
    if tmpfs is None:
        pytest.skip("no writable tmpfs on this machine")
    before = set(tmpfs.iterdir())
    done = run_cli("bench", "--json", "--quick", "--dir", tmpfs, timeout=60)
    assert done.code != 0
    assert "tmpfs" in done.out["error"] and "refusing" in done.out["error"]
    assert set(tmpfs.iterdir()) == before  # refused before writing anything


# --- the caching provider's billing rules, on their own (docs/performance.md) ----------------


def _body(*user: str, marks: tuple[int, ...] = (), system: str = "S" * 8000) -> dict[str, Any]:
    """A Messages request: one tool, a system prompt with a breakpoint, user blocks with
    breakpoints on the blocks numbered in ``marks``."""
    blocks: list[dict[str, Any]] = []
    for number, text in enumerate(user):
        block: dict[str, Any] = {"type": "text", "text": text}
        if number in marks:
            block["cache_control"] = {"type": "ephemeral"}
        blocks.append(block)
    return {
        "model": "claude-sonnet-5-5",
        "tools": [{"name": "step", "input_schema": {"type": "object"}}],
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": blocks}],
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_identical_prefix_is_read_and_one_changed_byte_reads_only_before_it() -> None:
    cache = PromptCache(clock=Clock())
    cells = ["A" * 3000, "B" * 3000, "C" * 3000]
    first = cache.bill(_body(*cells, "volatile 1", marks=(2,)))
    assert first.cache_read_input_tokens == 0 and first.cache_creation_input_tokens > 0
    again = cache.bill(_body(*cells, "volatile 2", marks=(2,)))
    assert again.cache_read_input_tokens == first.total - first.input_tokens
    assert again.cache_creation_input_tokens == 0
    system_only = cache.bill(_body(cells[0]))  # tools + system: the first breakpoint
    changed = cache.bill(_body("A" * 2999 + "a", *cells[1:], "volatile 3", marks=(2,)))
    assert changed.cache_read_input_tokens == system_only.cache_read_input_tokens > 0
    assert changed.cache_creation_input_tokens == again.cache_read_input_tokens - (
        system_only.cache_read_input_tokens
    )
    other_model = cache.bill({**_body(*cells, "v", marks=(2,)), "model": "claude-opus-5-5"})
    assert other_model.cache_read_input_tokens == 0  # a prefix is cached for one model


def test_a_fifth_breakpoint_is_refused_as_the_api_refuses_it() -> None:
    cache = PromptCache(clock=Clock())
    four = _body("a", "b", "c", "d", marks=(0, 1, 2))  # + the system's: 4
    assert cache.bill(four).total > 0
    with pytest.raises(BreakpointError, match="A maximum of 4 blocks with cache_control"):
        cache.bill(_body("a", "b", "c", "d", marks=(0, 1, 2, 3)))
    with pytest.raises(BreakpointError, match="ttl"):
        body = _body("a")
        body["system"][0]["cache_control"] = {"type": "ephemeral", "ttl": "2h"}
        cache.bill(body)


def test_an_entry_lives_five_minutes_and_each_hit_refreshes_it() -> None:
    clock = Clock()
    cache = PromptCache(clock=clock)
    body = _body("x" * 100)
    cache.bill(body)
    clock.now += 299
    assert cache.bill(body).cache_read_input_tokens > 0  # and refreshed
    clock.now += 299
    assert cache.bill(body).cache_read_input_tokens > 0
    clock.now += 301
    expired = cache.bill(body)
    assert expired.cache_read_input_tokens == 0 and expired.cache_creation_input_tokens > 0


def test_a_prefix_below_the_models_minimum_is_not_written() -> None:
    cache = PromptCache(clock=Clock())
    short = _body("hello", system="You are brief.")  # far below 1,024 tokens
    billed = cache.bill(short)
    assert billed.cache_creation_input_tokens == 0 and billed.input_tokens == billed.total
    assert cache.bill(short).cache_read_input_tokens == 0
    assert minimum_tokens("claude-opus-4-6") > minimum_tokens("claude-sonnet-5-5")


def test_a_hit_is_found_at_most_20_blocks_before_a_breakpoint() -> None:
    cache = PromptCache(clock=Clock())
    cells = [f"cell {n} " * 40 for n in range(40)]
    cache.bill(_body(*cells[:5], marks=(4,)))  # an entry after cell 4 (block 6 of the prompt)
    near = cache.bill(_body(*cells[:25], marks=(24,)))  # 20 blocks further: found
    cache = PromptCache(clock=Clock())
    cache.bill(_body(*cells[:5], marks=(4,)))
    far = cache.bill(_body(*cells[:26], marks=(25,)))  # 21 blocks further: not found
    assert near.cache_read_input_tokens > far.cache_read_input_tokens
    assert far.cache_read_input_tokens == cache.bill(_body("z")).cache_read_input_tokens


def test_the_sdk_meets_the_bench_provider_and_its_400(tmp_path: Path) -> None:
    """The real SDK streams the provider's reply; too many breakpoints is the API's 400."""
    script = lambda body: [{"op": "test", "path": "/revision", "value": 0}]  # noqa: E731
    with LoopbackProvider(script) as provider:
        client = anthropic.Anthropic(api_key="k", base_url=provider.base_url, max_retries=0)
        body = _body("a" * 5000, marks=(0,))
        with client.messages.stream(max_tokens=100, **body) as stream:
            message = stream.get_final_message()
        assert message.content[0].type == "tool_use"
        assert message.usage.cache_creation_input_tokens == provider.billed[0].total - (
            provider.billed[0].input_tokens
        )
        with pytest.raises(anthropic.BadRequestError, match="maximum of 4"):
            client.messages.create(max_tokens=100, **_body("a", "b", "c", "d", marks=(0, 1, 2, 3)))
    assert len(provider.billed) == 1 and len(provider.arrivals) == 2


def test_the_scripted_session_is_billed_through_the_adapter(tmp_path: Path) -> None:
    """The 50-round Session runs through the RoundLoop and the real adapter; the usage the
    Session committed is exactly what the provider billed, request by request."""
    played = tokens.play(tmp_path)
    usage, billed = played["usage"], played["billed"]
    assert usage["rounds"] == tokens.ROUNDS == len(billed)
    assert usage["input_tokens"] == sum(b.total for b in billed)
    assert usage["cache_read_tokens"] == sum(b.cache_read_input_tokens for b in billed)
    assert usage["cache_write_tokens"] == sum(b.cache_creation_input_tokens for b in billed)
    # Appending rounds read the earlier prefix; the replaced head Cell's round does not.
    replaced = billed[tokens.REPLACED_ROUND]  # the request after the replacing patch
    steady = billed[tokens.REPLACED_ROUND - 1]
    assert replaced.cache_read_input_tokens < steady.cache_read_input_tokens
    assert steady.cache_creation_input_tokens < replaced.cache_creation_input_tokens


def test_the_tests_fake_bills_the_adapters_layout_with_the_same_rules() -> None:
    """Through the real adapter: a round that appends a Cell reads everything before it; a
    replaced first Cell leaves only the tools and system prompt to read."""
    from tests.model.test_model_anthropic import KEY, make_state, request

    with FakeAnthropic(cache=PromptCache(clock=Clock())) as fake:
        model = AnthropicModel("claude-sonnet-5-5", api_key=KEY, base_url=fake.base_url)
        states = [make_state(6, last_queued=False), make_state(7, last_queued=False)]
        replaced = make_state(7, last_queued=False)
        replaced["cells"][0] = {**replaced["cells"][0], "argv": ["echo", "changed"]}
        usages = []
        for state in [*states, replaced]:
            fake.reply_patch([])
            usages.append(model.ask(request(state=state)).usage)
    first, appended, changed = usages
    assert first.cache_read_tokens == 0 and first.cache_write_tokens > 0
    assert appended.cache_read_tokens == first.cache_write_tokens
    assert 0 < changed.cache_read_tokens < appended.cache_read_tokens


def test_the_journal_chart_draws_each_family_from_bench_figures(tmp_path: Path) -> None:
    figures = {
        f"{f}_{n}": v
        for f in journal_chart.FAMILIES
        for n, v in (("1k", 1.0), ("10k", 2.0), ("100k", 3.5))
    }
    figures.update({"events_1k": 1004, "events_10k": 10006, "events_100k": 100005})
    source = tmp_path / "bench.json"
    source.write_text(json.dumps({**figures, "show_ms_1k": 9.0}))
    out = tmp_path / "chart.svg"
    assert journal_chart.main([str(out), f"after={source}"]) == 0
    lines = ET.parse(out).getroot().findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == len(journal_chart.FAMILIES)
    assert journal_chart.series_of("x", figures)["x: show_ms"][0] == (1004, 1.0)
    assert journal_chart.main([str(out), str(source)]) == 2  # LABEL=FILE expected
