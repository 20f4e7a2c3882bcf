"""The sweep's shell, as written in .github/workflows/rio-sweep.yml and rio.yml's sweep-wake
job, run by bash the way a runner runs a ``shell: bash`` step, against FakeGitHub.

It must dispatch rio.yml for every labelled issue whose progress comment (by a bot) says a
Timer is due, read nothing else, keep itself on while any Timer waits, and switch itself off
when none does; sweep-wake switches it back on."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes.github_api import FakeGitHub

from tests.kit import cli_env

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
MARKER = "<!-- rio-ci:progress -->"


def the_step(file: str, job: str) -> dict[str, Any]:
    (step,) = yaml.safe_load((WORKFLOWS / file).read_text())["jobs"][job]["steps"]
    assert step["shell"] == "bash"
    return dict(step)


def run_step(
    step: dict[str, Any], gh: FakeGitHub, tmp: Path, ref: str = "main"
) -> subprocess.CompletedProcess[str]:
    """The step's ``run:`` under ``bash --noprofile --norc -eo pipefail`` with its ``env:``,
    each expression replaced by what the runner would put there."""
    values = {
        "github.token": gh.token,
        "github.api_url": gh.api_url,
        "github.repository": gh.repo,
        "github.ref_name": ref,
    }
    env = cli_env()
    for name, value in step["env"].items():
        expression = re.fullmatch(r"\$\{\{ (.+) \}\}", str(value))
        env[name] = values[expression[1]] if expression else str(value)
    env["GITHUB_STEP_SUMMARY"] = str(tmp / "summary.md")
    script = tmp / "step.sh"
    script.write_text(step["run"])
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def progress(
    gh: FakeGitHub,
    issue: int,
    *,
    next_wake: float | None,
    ended: bool = False,
    user: str = "github-actions[bot]",
) -> int:
    meta = {
        "ended": ended,
        "generation": 3,
        "next_wake": next_wake,
        "operation": "op-1",
        "status": "waiting",
    }
    body = f"{MARKER}\n<!-- rio-ci:meta {json.dumps(meta, sort_keys=True)} -->\n### rio-ci\n"
    return gh.add_comment(issue, body, user=user, association="NONE")


@pytest.fixture
def sweeping(gh: FakeGitHub) -> FakeGitHub:
    gh.add_workflow("rio.yml")
    gh.add_workflow("rio-sweep.yml")
    return gh


def test_due_timers_are_dispatched_and_nothing_else_is_read(
    sweeping: FakeGitHub, tmp_path: Path
) -> None:
    gh, now = sweeping, time.time()
    due = gh.add_issue("due", labels=("rio",))
    gh.add_comment(due, "a person talks first", user="alice")
    progress(gh, due, next_wake=now - 60)
    later = gh.add_issue("later", labels=("rio",))
    progress(gh, later, next_wake=now + 3600)
    ended = gh.add_issue("ended", labels=("rio",))
    progress(gh, ended, next_wake=now - 60, ended=True)
    unlabelled = gh.add_issue("no label")
    progress(gh, unlabelled, next_wake=now - 60)
    planted = gh.add_issue("planted", labels=("rio",))
    progress(gh, planted, next_wake=now - 60, user="mallory")  # a person quoting the marker

    done = run_step(the_step("rio-sweep.yml", "sweep"), gh, tmp_path, ref="main")

    assert done.returncode == 0, done.stderr
    assert gh.dispatches == [{"workflow": "rio.yml", "ref": "main", "inputs": {"issue": str(due)}}]
    assert gh.workflows["rio-sweep.yml"] == "active"  # `later` still waits
    assert all(r.method == "GET" or r.path.endswith("/dispatches") for r in gh.requests)
    assert not [r for r in gh.requests if "/artifacts" in r.path]
    assert "1 dispatched, 2 waiting" in (tmp_path / "summary.md").read_text()


def test_the_sweep_switches_itself_off_when_no_timer_waits(
    sweeping: FakeGitHub, tmp_path: Path
) -> None:
    gh = sweeping
    progress(gh, gh.add_issue("done", labels=("rio",)), next_wake=time.time() - 5, ended=True)
    progress(gh, gh.add_issue("no timer", labels=("rio",)), next_wake=None)
    gh.add_issue("no session yet", labels=("rio",))

    done = run_step(the_step("rio-sweep.yml", "sweep"), gh, tmp_path)

    assert done.returncode == 0, done.stderr
    assert gh.dispatches == []
    assert gh.workflow_changes == [("rio-sweep.yml", "disable")]
    assert gh.workflows["rio-sweep.yml"] == "disabled_manually"


def test_sweep_wake_switches_the_sweep_back_on(sweeping: FakeGitHub, tmp_path: Path) -> None:
    sweeping.add_workflow("rio-sweep.yml", state="disabled_inactivity")  # 60 quiet days
    done = run_step(the_step("rio.yml", "sweep-wake"), sweeping, tmp_path)
    assert done.returncode == 0, done.stderr
    assert sweeping.workflows["rio-sweep.yml"] == "active"
    assert [f"{r.method} {r.path}" for r in sweeping.requests] == [
        f"PUT /repos/{sweeping.repo}/actions/workflows/rio-sweep.yml/enable"
    ]


@pytest.mark.slow
def test_many_issues_and_comments_are_read_page_by_page(
    sweeping: FakeGitHub, tmp_path: Path
) -> None:
    gh, now = sweeping, time.time()
    waiting = [gh.add_issue(f"issue {i}", labels=("rio",)) for i in range(105)]
    for number in waiting[:-1]:
        progress(gh, number, next_wake=now + 3600)
    last = waiting[-1]
    for i in range(101):
        gh.add_comment(last, f"chatter {i}", user="alice")
    progress(gh, last, next_wake=now - 1)  # the 102nd comment: on the second page

    done = run_step(the_step("rio-sweep.yml", "sweep"), gh, tmp_path)

    assert done.returncode == 0, done.stderr
    assert [d["inputs"]["issue"] for d in gh.dispatches] == [str(last)]
    assert any(r.query.get("page") == "2" and r.path.endswith("/issues") for r in gh.requests)


def test_a_refused_dispatch_is_a_warning_and_the_sweep_goes_on(
    sweeping: FakeGitHub, tmp_path: Path
) -> None:
    gh, now = sweeping, time.time()
    first, second = (gh.add_issue(n, labels=("rio",)) for n in ("a", "b"))
    for number in (first, second):
        progress(gh, number, next_wake=now - 1)
    gh.add_workflow("rio.yml", state="disabled_manually")  # GitHub answers 422

    done = run_step(the_step("rio-sweep.yml", "sweep"), gh, tmp_path)

    assert done.returncode == 0, done.stderr
    assert done.stdout.count("::warning::") == 2
    assert len([r for r in gh.requests if r.path.endswith("/rio.yml/dispatches")]) == 2
    assert gh.workflows["rio-sweep.yml"] == "active"  # both still wait


def test_a_failed_read_fails_the_sweep_without_switching_it_off(
    sweeping: FakeGitHub, tmp_path: Path
) -> None:
    progress(sweeping, sweeping.add_issue("x", labels=("rio",)), next_wake=None)
    sweeping.fail(r".*/comments", 404)  # curl retries a 5xx; a refusal fails at once
    done = run_step(the_step("rio-sweep.yml", "sweep"), sweeping, tmp_path)
    assert done.returncode != 0
    assert sweeping.workflow_changes == []
