"""The sweep's shell, as written in .github/workflows/rio-sweep.yml and rio.yml's sweep-wake
job, run by bash the way a runner runs a ``shell: bash`` step, against FakeGitHub.

It must dispatch rio.yml for every labelled issue whose progress comment (by a bot) says a
Timer is due, read nothing else, keep itself on while any Timer waits, and switch itself off
when none does; sweep-wake switches it back on."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes.github_api import FakeGitHub, Recorded

from tests.kit import cli_env

ROOT = Path(__file__).resolve().parents[2]
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


def test_the_sweep_groups_keep_one_pending_run_and_the_rio_job_queues() -> None:
    """A newer sweep (or wake-up) does all an older pending one would, so those groups keep
    GitHub's default of one pending run; the rio job's group queues (``queue: max``): a
    dispatch the sweep sends waits behind a running job instead of cancelling a pending
    label's job, or being cancelled by a comment's."""
    rio = yaml.safe_load((WORKFLOWS / "rio.yml").read_text())["jobs"]
    sweep = yaml.safe_load((WORKFLOWS / "rio-sweep.yml").read_text())["jobs"]["sweep"]
    assert "queue" not in sweep["concurrency"] and "queue" not in rio["sweep-wake"]["concurrency"]
    assert rio["rio"]["concurrency"]["queue"] == "max"
    assert "inputs.issue" in rio["rio"]["concurrency"]["group"]  # the dispatch's own group


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


# --- a job and a sweep, interleaved ----------------------------------------------------------


def race(
    tmp_path: Path, write_at: int, look_at: int, wake_now: bool
) -> tuple[FakeGitHub, dict[str, Any]]:
    """One job leaving a waiting Timer and one sweep, interleaved at chosen points: the job's
    two steps — write the progress comment with the next wake (as finish does), then
    ``timers.wake_sweep`` (is the sweep on? if not, ask sweep-wake) — run just before the
    sweep's request number ``write_at`` / ``look_at`` is answered (or after the sweep, past
    its last request). sweep-wake's enable comes right after the job asked (``wake_now``) or
    after everything else."""
    from rio_ci.forge.github import GitHubForge

    with FakeGitHub() as gh:
        gh.add_workflow("rio.yml")
        gh.add_workflow("rio-sweep.yml")
        issue = gh.add_issue("working", labels=("rio",))
        progress(gh, issue, next_wake=None)  # the job is still running rounds
        forge = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=0)
        job = _RacingJob(gh, forge, issue, wake_now)
        sweep_requests = itertools.count()

        def observe(req: Recorded) -> None:
            if not req.headers.get("user-agent", "").startswith("curl/"):
                return  # the job's own requests
            if next(sweep_requests) in (write_at, look_at):
                job.step()

        gh.observers.append(observe)
        done = run_step(the_step("rio-sweep.yml", "sweep"), gh, tmp_path)
        gh.observers.clear()
        while len(job.steps) < 2:
            job.step()
        if gh.repository_dispatches and "enable" not in job.steps:
            job.enable()
        forge.close()
        assert done.returncode == 0, done.stderr
        comment = next(c for c in gh.comments_on(issue) if MARKER in c["body"])
        return gh, {"steps": job.steps, "comment": comment["body"], "sweep": done.stdout}


@dataclass
class _RacingJob:
    """The job's two steps — write the progress comment with the next wake, then
    ``timers.wake_sweep`` — and sweep-wake's one request, run when ``race`` says."""

    gh: FakeGitHub
    forge: Any
    issue: int
    wake_now: bool
    steps: list[str] = field(default_factory=list)

    def enable(self) -> None:  # sweep-wake's one request
        gh = self.gh
        wake = f"{gh.api_url}/repos/{gh.repo}/actions/workflows/rio-sweep.yml/enable"
        request = urllib.request.Request(wake, method="PUT")
        request.add_header("Authorization", f"Bearer {gh.token}")
        urllib.request.urlopen(request, timeout=30).close()
        self.steps.append("enable")

    def step(self) -> None:
        from rio_ci.github import timers

        if not self.steps:
            meta = {"ended": False, "generation": 4, "next_wake": time.time() + 3600}
            body = f"{MARKER}\n<!-- rio-ci:meta {json.dumps(meta)} -->\n### waiting\n"
            self.forge.upsert_comment(self.issue, MARKER, body)
            self.steps.append("write")
        elif self.steps == ["write"]:
            self.steps.append(timers.wake_sweep(self.forge))
            if self.wake_now and self.gh.repository_dispatches:
                self.enable()


@pytest.mark.slow
@pytest.mark.parametrize("wake_now", [True, False], ids=["wake-at-once", "wake-late"])
def test_no_interleaving_of_a_job_and_a_sweep_leaves_a_waiting_timer_with_the_sweep_off(
    tmp_path: Path, wake_now: bool
) -> None:
    """docs/github.md "The sweep": the job writes its next wake and then looks whether the
    sweep is on; the sweep switches itself off and then looks for Timers again. Whatever the
    order of those four steps, a waiting Timer ends with the sweep on."""
    last = 6  # the sweep makes at most 6 requests here: position 6 is "after it"
    stranded = []
    for write_at in range(last + 1):
        for look_at in range(write_at, last + 1):
            gh, seen = race(tmp_path, write_at, look_at, wake_now)
            assert '"next_wake": ' in seen["comment"] and "null" not in seen["comment"]
            if gh.workflows["rio-sweep.yml"] != "active":
                stranded.append((write_at, look_at, seen["steps"], gh.workflow_changes))
    assert stranded == []
