"""``rio-ci eval`` (docs/eval.md): the shipped cases with their oracles, with and without a real
SIGKILL of the Owner; case validation; ``{case_dir}``; the report's figures; the scripted
model's ``when:`` extension that lets one oracle serve both modes."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from rio_ci.commands.eval_cases import find_cases, load_case
from rio_ci.commands.eval_report import measure, summarise, write_reports
from rio_ci.core.errors import UsageError
from rio_ci.model.base import ModelRequest
from rio_ci.model.scripted import complete, load_script
from tests.fakes.anthropic_api import FakeAnthropic
from tests.kit import cli_env, events, run_cli
from tests.round_loop_kit import DONE, KEY, UNPRICED
from tests.round_loop_kit import patch as first_patch

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "evals" / "cases"
SUITE_TIMEOUT = 900


def eval_json(*args: str, timeout: float = SUITE_TIMEOUT) -> tuple[int, dict[str, Any], str]:
    done = run_cli("eval", *args, "--json", timeout=timeout)
    lines = done.stdout.strip().splitlines()
    return done.returncode, json.loads(lines[-1]) if lines else {}, done.stderr


# --- the shipped suite, end to end (real `rio-ci run` subprocesses, a real SIGKILL) --------


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Both modes into one --out: without --crash, then with it."""
    out = tmp_path_factory.mktemp("eval") / "out"
    plain = eval_json(str(CASES), "--model", "scripted:oracle", "--out", str(out))
    crash = eval_json(
        str(CASES), "--model", "scripted:oracle", "--crash", "--keep", "--out", str(out)
    )
    return {"out": out, "plain": plain, "crash": crash}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "crash"])
def test_every_shipped_case_passes_with_its_oracle(suite: dict[str, Any], mode: str) -> None:
    code, report, stderr = suite[mode]
    assert code == 0, stderr
    names = {c.name for c in find_cases([str(CASES)])}
    assert {t["case"] for t in report["trials"]} == names
    assert all(t["passed"] and t["status"] == "succeeded" for t in report["trials"])
    assert report["summary"]["pass_rate"] == 1
    for trial in report["trials"]:  # one progress line per trial on stderr
        assert f"eval {trial['case']} #1/1" in stderr


@pytest.mark.slow
def test_every_crashed_trial_recovers_from_an_unknown_execution(suite: dict[str, Any]) -> None:
    _, report, _ = suite["crash"]
    trials = report["trials"]
    assert all(t["crashed"] for t in trials)
    assert all(t["unknown_executions"] >= 1 for t in trials)
    assert all(isinstance(t["rounds_to_resolve"], int) for t in trials)
    assert report["summary"]["recovered"] == len(trials)
    for trial in trials:  # the kill hit the first executable Cell accepted in round 2
        evs = events(Path(trial["session"]))
        second = [e for e in evs if e["kind"] == "patch_accepted"][1]
        first_unknown = next(
            e
            for e in evs
            if e["kind"] == "execution_finished" and e["result"]["type"] == "UnknownExecution"
        )
        executable = [c["id"] for c in second["cells"] if c["kind"] in ("code", "cmd")]
        assert first_unknown["cell_id"] == executable[0]


@pytest.mark.slow
def test_without_crash_nothing_is_uncertain(suite: dict[str, Any]) -> None:
    _, report, _ = suite["plain"]
    assert not any(t["crashed"] or t["unknown_executions"] for t in report["trials"])
    assert all(t["rounds_to_resolve"] is None for t in report["trials"])


@pytest.mark.slow
def test_the_interrupted_edit_leaves_the_tree_half_changed(suite: dict[str, Any]) -> None:
    """The crash lands between the two edits, and the inspection the resolution cites shows
    it: only units.py had changed."""
    _, report, _ = suite["crash"]
    trial = next(t for t in report["trials"] if t["case"] == "interrupted-rename")
    evs = events(Path(trial["session"]))
    resolution = next(
        c
        for e in evs
        if e["kind"] == "patch_accepted"
        for c in e["controls"]
        if c["role"] == "resolution"
    )
    cited = {int(ref.rsplit(":", 1)[1]) for ref in resolution["evidence_refs"]}
    status = next(
        e
        for e in evs
        if e["seq"] in cited
        and e["kind"] == "execution_finished"
        and "status" in cell_argv(evs, e["cell_id"])
    )
    output = "".join(
        e["text"] for e in evs if e["kind"] == "output" and e["cell_id"] == status["cell_id"]
    )
    assert output.split() == ["M", "units.py"]


@pytest.mark.slow
def test_report_files_exist_and_parse(suite: dict[str, Any]) -> None:
    out: Path = suite["out"]
    report = json.loads((out / "report.json").read_text())
    assert report["crash"] is True  # the last run
    assert json.loads((out / "report-plain.json").read_text())["crash"] is False
    table = (out / "report.md").read_text()
    for trial in report["trials"]:
        assert f"| {trial['case']} | 1 | yes | succeeded |" in table
        assert f"| {trial['case']} | plain |" in table and f"| {trial['case']} | crash |" in table
    svg = ET.fromstring((out / "report.svg").read_text())
    texts = [t.text or "" for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert set(report["cases"]) <= set(texts)
    # both modes, every case, each bar with its trial count
    assert texts.count("100% (n=1)") == 2 * len(report["cases"])
    # the recovery panel: the time the crash cost and the rounds it took, for crashed trials
    recovery = [t for t in texts if t.endswith(" to resolve")]
    assert len(recovery) == len(report["cases"])
    for name, row in report["cases"].items():
        seconds, rounds = row["median_recovery_seconds"], row["median_rounds_to_resolve"]
        plural = "" if rounds == 1 else "s"
        assert f"{seconds:.1f} s (n=1), {rounds:g} round{plural} to resolve" in recovery, name
    # a scale under each of the three panels: 0, half and full
    assert texts.count("0%") == 1 and texts.count("50%") == 1 and texts.count("100%") == 1
    # the recovery panel's ticks follow its longest recovery (its half and full ticks also
    # read 0.0 s when a recovery took less than 0.05 s, as on a fast machine)
    top = max(row["median_recovery_seconds"] for row in report["cases"].values()) or 1.0
    ticks = [f"{top * fraction:.1f} s" for fraction in (0, 0.5, 1)]
    assert all(texts.count(tick) == ticks.count(tick) for tick in ticks), (ticks, texts)
    # the working copies were kept for the crash run only (--keep)
    for trial in report["trials"]:
        kept = Path(trial["repo"])
        assert kept == out / "repos" / "crash" / f"{trial['case']}-{trial['trial']}"
        done = subprocess.run(
            ["git", "-C", str(kept), "status", "--porcelain"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0  # a repository to `git diff` in
    assert not (out / "repos" / "plain").exists() or not any((out / "repos" / "plain").iterdir())


# --- case.yml ---------------------------------------------------------------------------


def make_case(root: Path, name: str, fields: dict[str, Any], check: str = "") -> Path:
    case = root / name
    (case / "repo").mkdir(parents=True)
    (case / "repo" / "hello.txt").write_text("hello\n")
    (case / "case.yml").write_text(yaml.safe_dump(fields))
    if check:
        (case / "check.py").write_text(check)
    return case


GOOD = {"goal": "say hello", "validators": [["true"]], "check": ["true"], "limits": {"rounds": 3}}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"goal": " "}, "goal must be a non-blank string"),
        ({"validators": ["python3 -m unittest"]}, "validators must be a list of argv lists"),
        ({"validators": [[]]}, "validators must be a list of argv lists"),
        ({"check": None}, "check must be an argv list"),
        ({"check": ["python3", 3]}, "check must be an argv list"),
        ({"limits": {"speed": 1}}, "unknown limit"),
        ({"limits": {"rounds": -1}}, "must be a positive"),
        ({"oracle": "missing.yml"}, "is not a file beside case.yml"),
        ({"hidden": True}, "unknown field(s) hidden"),
    ],
)
def test_case_yml_problems_are_usage_errors_naming_the_field(
    tmp_path: Path, change: dict[str, Any], problem: str
) -> None:
    case = make_case(tmp_path, "c", {**GOOD, **change})
    with pytest.raises(UsageError) as info:
        load_case(case)
    assert problem in str(info.value) and "case c" in str(info.value)


def test_a_case_needs_a_repo_and_a_mapping(tmp_path: Path) -> None:
    case = make_case(tmp_path, "c", GOOD)
    (case / "repo" / "hello.txt").unlink()
    (case / "repo").rmdir()
    with pytest.raises(UsageError, match="repo/ directory"):
        load_case(case)
    (case / "case.yml").write_text("- a list\n")
    with pytest.raises(UsageError, match="must be a mapping"):
        load_case(case)


def test_eval_exits_2_with_a_clear_error_before_any_trial(tmp_path: Path) -> None:
    make_case(tmp_path / "cases", "fine", GOOD)
    make_case(tmp_path / "cases", "broken", {**GOOD, "check": "python3 check.py"})
    out = tmp_path / "out"
    done = run_cli("eval", str(tmp_path / "cases"), "--model", "scripted:oracle", "--out", str(out))
    assert done.returncode == 2
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert "case broken" in error and "check must be an argv list" in error
    assert not out.exists()  # nothing ran
    # A case without an oracle cannot run with scripted:oracle.
    done = run_cli("eval", str(tmp_path / "cases" / "fine"), "--model", "scripted:oracle")
    assert done.returncode == 2 and "needs an oracle" in done.stdout
    done = run_cli("eval", str(tmp_path), "--model", "scripted:oracle")
    assert done.returncode == 2 and "no case.yml" in done.stdout


@pytest.mark.slow
def test_eval_passes_price_and_effort_on_to_every_run(tmp_path: Path) -> None:
    """An unpriced model (bedrock:…, vertex:…, a new id) needs ``--price`` to run at all
    (docs/models.md); eval takes it, and ``--effort``, and gives them to each ``rio-ci run``."""
    case = make_case(tmp_path / "cases", "hello", GOOD)
    done_patch = first_patch(0, 1, DONE)
    model = f"anthropic:{UNPRICED}"
    refused = run_cli("eval", str(case), "--model", model, "--out", str(tmp_path / "no"))
    assert refused.returncode == 2 and "--price" in refused.stdout
    with FakeAnthropic() as fake:
        fake.reply_patch(done_patch, input_tokens=1_000_000, output_tokens=0)
        env = {**cli_env(), "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": fake.base_url}
        done = run_cli(
            "eval",
            str(case),
            "--model",
            model,
            "--price",
            "3/15",
            "--effort",
            "low",
            "--out",
            str(tmp_path / "out"),
            "--json",
            env=env,
            timeout=120,
        )
        (request,) = fake.requests
    assert done.returncode == 0, done.stdout + done.stderr
    (trial,) = json.loads(done.stdout.strip().splitlines()[-1])["trials"]
    assert trial["passed"] and trial["cost_usd"] == pytest.approx(3.0)  # 1M input at $3
    assert request.body["output_config"]["effort"] == "low"


def test_every_shipped_case_and_oracle_loads() -> None:
    cases = find_cases([str(CASES)])
    assert len(cases) >= 8
    for case in cases:
        assert case.oracle is not None and not (case.directory / "repo" / "case.yml").exists()
        rounds = load_script(case.oracle)
        ops = [op for patch in rounds for op in patch]
        for op in ops:  # YAML turns a bare 10 into an int, which admission rejects
            argv = op.get("value", {}).get("argv")
            assert argv is None or all(isinstance(part, str) for part in argv), op
        assert any(
            op.get("when") == "unresolved" and op["value"].get("target_cell_id") == "$unresolved"
            for op in ops
        )


# --- {case_dir}, the working copy, exit status, end to end --------------------------------


CHECK = """import os, subprocess, sys
here = os.path.dirname(os.path.abspath(__file__))
assert sys.argv[1:] == [here, "--at=" + here + "/x"], sys.argv
assert os.path.isfile("hello.txt") and not os.path.exists("case.yml")  # cwd: the copy
commits = subprocess.run(["git", "log", "--format=%s"], capture_output=True, text=True)
assert commits.stdout.splitlines() == ["the case as given"], commits.stdout
"""
CONCLUDE = (
    "- - {op: add, path: /cells/-, value: {kind: note, role: conclusion, "
    "result: success, text: done}}\n"
)


def test_case_dir_is_substituted_and_the_check_decides(tmp_path: Path) -> None:
    fields = {
        **GOOD,
        "check": [sys.executable, "{case_dir}/check.py", "{case_dir}", "--at={case_dir}/x"],
        "oracle": "oracle.yml",
    }
    good = make_case(tmp_path / "cases", "good", fields, CHECK)
    bad = make_case(tmp_path / "cases", "bad", {**fields, "check": ["false"]})
    for case in (good, bad):
        (case / "oracle.yml").write_text(CONCLUDE)
    assert load_case(good).check_argv()[1:] == [f"{good}/check.py", str(good), f"--at={good}/x"]
    out = tmp_path / "out"
    code, report, stderr = eval_json(
        str(tmp_path / "cases"), "--model", "scripted:oracle", "--out", str(out), timeout=120
    )
    assert code == 1, stderr  # not every trial passed
    by_case = {t["case"]: t for t in report["trials"]}
    assert by_case["good"]["passed"] is True, (out / "logs/plain/good-1.check.log").read_text()
    assert by_case["bad"]["passed"] is False
    assert by_case["good"]["status"] == by_case["bad"]["status"] == "succeeded"
    assert report["summary"]["pass_rate"] == 0.5
    assert {p.name for p in out.iterdir()} >= {"report.json", "report.md", "report.svg"}


# --- the figures ------------------------------------------------------------------------


def synthetic_events() -> list[dict[str, Any]]:
    """Two rounds, then a crash, an inspection round, a resolving round: as committed."""
    events: list[dict[str, Any]] = []

    def add(kind: str, at: float, **data: Any) -> None:
        events.append({"seq": len(events) + 1, "kind": kind, "at": at, **data})

    add("session_created", 100.0)
    for n, (tokens_in, tokens_out, cost) in enumerate(
        [(1000, 50, 0.01), (1200, 80, 0.02), (1500, 60, None), (1600, 90, 0.03)], 1
    ):
        turn = f"turn-{n}"
        delivered = {2: [], 3: ["execution:2"], 4: ["execution:3"]}.get(n, [])
        add("turn_prepared", 100.0 + n, turn_id=turn, delivered=delivered)
        add("model_attempt", 100.0 + n, turn_id=turn)
        add(
            "model_response",
            100.0 + n,
            turn_id=turn,
            ok=True,
            usage={
                "input_tokens": tokens_in,
                "output_tokens": tokens_out,
                "cost_usd": cost,
                "cache_read_tokens": 10 * n,
                "cache_write_tokens": 3 * n,
            },
        )
        controls = [{"role": "resolution", "note_id": 9, "target_cell_id": 2}] if n == 4 else []
        add("patch_accepted", 100.0 + n, turn_id=turn, cells=[], controls=controls)
        if n in (2, 3):
            add("execution_started", 100.0 + n, cell_id=n)
    add("model_attempt", 106.0, turn_id="turn-5")  # lost: no response, cost unknown
    add(
        "execution_finished",
        102.5,
        cell_id=2,
        message={"id": "execution:2"},
        result={"type": "UnknownExecution"},
    )
    add(
        "execution_finished",
        103.5,
        cell_id=3,
        message={"id": "execution:3"},
        result={"type": "success"},
    )
    add("run_ended", 107.25, result="failure")
    return events


def test_measure_reads_every_figure_from_the_events() -> None:
    events = synthetic_events()
    responses = [e for e in events if e["kind"] == "model_response"]
    figures = measure(events)
    assert figures["rounds"] == len(responses)
    # input as the Session's usage counts it: fresh, cache reads and cache writes
    assert figures["input_tokens"] == sum(
        e["usage"]["input_tokens"]
        + e["usage"]["cache_read_tokens"]
        + e["usage"]["cache_write_tokens"]
        for e in responses
    )
    assert figures["output_tokens"] == sum(e["usage"]["output_tokens"] for e in responses)
    known = [e["usage"]["cost_usd"] for e in responses if e["usage"]["cost_usd"] is not None]
    assert figures["cost_usd"] == pytest.approx(sum(known))
    # one response without a price, one attempt that never got a response
    assert figures["unknown_cost_attempts"] == 2
    assert figures["cells_run"] == 2 and figures["unknown_executions"] == 1
    # the notice of cell 2 was delivered to round 3; the resolution was accepted in round 4
    assert figures["rounds_to_resolve"] == 4 - 3
    assert figures["wall_seconds"] == pytest.approx(events[-1]["at"] - events[0]["at"])
    assert figures["ended"] == "failed"


def test_the_time_a_crash_cost_runs_from_the_last_sign_of_life_to_the_resolution() -> None:
    def event(seq: int, kind: str, at: float, **data: Any) -> dict[str, Any]:
        return {"seq": seq, "kind": kind, "at": at, **data}

    lost = {"type": "UnknownExecution"}
    resolution = [{"role": "resolution", "note_id": 5, "target_cell_id": 2}]
    evs = [
        event(1, "session_created", 10.0),
        event(2, "execution_started", 11.0, cell_id=2),
        event(3, "output", 12.5, cell_id=2),  # the dead Owner's last commit
        event(4, "execution_finished", 40.0, cell_id=2, result=lost),  # the next job's recovery
        event(5, "patch_accepted", 47.0, turn_id="t", cells=[], controls=resolution),
    ]
    assert measure(evs)["recovery_seconds"] == evs[4]["at"] - evs[2]["at"]
    assert measure(evs[:4])["recovery_seconds"] is None  # never resolved


def test_an_unresolved_or_absent_uncertainty_has_no_rounds_to_resolve() -> None:
    events = synthetic_events()
    unresolved = [e for e in events if not (e["kind"] == "patch_accepted" and e["controls"])]
    assert measure(unresolved)["rounds_to_resolve"] is None
    settled = [
        e
        for e in events
        if not (e["kind"] == "execution_finished" and e["result"]["type"] == "UnknownExecution")
    ]
    assert measure(settled)["unknown_executions"] == 0
    assert measure(settled)["rounds_to_resolve"] is None


def trial(
    case: str, passed: bool, rounds: int, cost: float | None, crashed: bool
) -> dict[str, Any]:
    return {
        "case": case,
        "trial": 1,
        "passed": passed,
        "status": "succeeded",
        "rounds": rounds,
        "input_tokens": 0,
        "output_tokens": 0,
        "cost_usd": cost,
        "wall_seconds": 1.0,
        "cells_run": 1,
        "unknown_executions": int(crashed),
        "rounds_to_resolve": 1 if crashed else None,
        "crashed": crashed,
    }


def test_summary_maths() -> None:
    trials = [
        trial("a", True, 4, 0.5, True),
        trial("a", False, 9, 0.25, True),
        trial("b", True, 6, None, False),
        trial("b", True, 5, 1.0, False),
    ]
    summary = summarise(trials)
    costs = [t["cost_usd"] for t in trials if t["cost_usd"] is not None]
    assert summary["pass_rate"] == sum(t["passed"] for t in trials) / len(trials)
    assert summary["median_rounds"] == statistics.median(t["rounds"] for t in trials)
    assert summary["median_cost_usd"] == statistics.median(costs)
    assert summary["total_cost_usd"] == sum(costs)
    assert summary["recovered"] == 1  # crashed and passed
    resolved = [t["rounds_to_resolve"] for t in trials if t["rounds_to_resolve"] is not None]
    assert summary["median_rounds_to_resolve"] == statistics.median(resolved)
    assert summarise([])["pass_rate"] is None


def test_reports_merge_the_other_mode_only_for_the_same_model(tmp_path: Path) -> None:
    write_reports(tmp_path, [trial("a<&>", True, 4, 0.5, False)], model="m1", crash=False)
    write_reports(tmp_path, [trial("a<&>", False, 6, 0.25, True)], model="m1", crash=True)
    svg = (tmp_path / "report.svg").read_text()
    texts = [t.text for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}text")]
    assert "a<&>" in texts and "100% (n=1)" in texts and "0% (n=1)" in texts  # both modes
    assert "| a<&> | plain |" in (tmp_path / "report.md").read_text()
    write_reports(tmp_path, [trial("a<&>", False, 6, 0.25, True)], model="m2", crash=True)
    texts = [
        t.text
        for t in ET.fromstring((tmp_path / "report.svg").read_text()).iter(
            "{http://www.w3.org/2000/svg}text"
        )
    ]
    assert "100% (n=1)" not in texts and "n/a" in texts  # m1's plain run is not m2's


# --- the scripted model's `when:` ---------------------------------------------------------


def turn_state(unresolved: bool) -> dict[str, Any]:
    result = {"type": "UnknownExecution", "reason": "worker_lost_before_result_commit"}
    cells = (
        {"5": {"phase": "finished", "result": result, "resolved_by": None}} if unresolved else {}
    )
    inbox = [
        {"id": "execution:5", "kind": "execution", "payload": result, "seq": 40},
        {"id": "execution:6", "kind": "execution", "payload": {}, "seq": 44},
    ]
    return {
        "schema": "rio.state/1",
        "id": "s",
        "revision": 4,
        "goal": "g",
        "cells": [],
        "runtime": {"next_cell_id": 7, "cells": cells, "inbox": inbox, "usage": {}, "pause": None},
    }


ROUND = [
    {
        "op": "add",
        "path": "/cells/-",
        "when": "unresolved",
        "value": {
            "kind": "note",
            "role": "resolution",
            "text": "r",
            "target_cell_id": "$unresolved",
            "evidence_refs": ["$delivered"],
        },
    },
    {"op": "add", "path": "/cells/-", "when": "settled", "value": {"kind": "note", "text": "s"}},
    {"op": "add", "path": "/cells/-", "value": {"kind": "cmd", "argv": ["true"]}},
]


def test_when_keeps_operations_that_match_the_turn_and_drops_the_key() -> None:
    uncertain = complete(ROUND, ModelRequest(turn_id="t", state=turn_state(True), round_index=4))
    assert [op["value"]["kind"] for op in uncertain[1:]] == ["note", "cmd"]
    note = uncertain[1]["value"]
    assert note["role"] == "resolution" and note["target_cell_id"] == 5
    assert note["evidence_refs"] == ["session:event:44"]  # not the target's own notice
    settled = complete(ROUND, ModelRequest(turn_id="t", state=turn_state(False), round_index=4))
    assert [op["value"].get("text") for op in settled[1:]] == ["s", None]
    for patch in (uncertain, settled):
        assert all("when" not in op for op in patch)
        assert [op["value"]["id"] for op in patch[1:]] == [7, 8]  # dropped ops take no id


def test_an_unknown_when_is_a_usage_error(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text(
        "- - {op: add, path: /cells/-, when: sometimes, value: {kind: note, text: x}}\n"
    )
    with pytest.raises(UsageError, match="when must be unresolved or settled"):
        load_script(script)


# --- helpers ----------------------------------------------------------------------------


def cell_argv(events: list[dict[str, Any]], cell_id: int) -> list[str]:
    for event in events:
        if event["kind"] == "patch_accepted":
            for cell in event["cells"]:
                if cell["id"] == cell_id:
                    return list(cell.get("argv", []))
    return []
