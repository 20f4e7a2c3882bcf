"""A running job hears new comments (docs/github.md "Steering a running job"): between
rounds, at most every 30 s, it asks GitHub with conditional requests whether the issue or its
pull request changed, and re-scans only when one did — so a writer's comment, ``/rio stop``
included, reaches the running Session's next Turn instead of waiting behind the job.

The run step runs here in-process with a clock the test drives (every reading is "31 s
later"), so no test waits 30 s; the finish step and the upload run as in every action test."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from action_job import WAIT, Job, Repository, labeled, messages, script
from conftest import journal_rows
from fakes.github_api import FakeGitHub, Recorded

from rio_ci.forge.github import GitHubForge
from rio_ci.github.contract import ActionInputs
from rio_ci.github.intake import take_in
from rio_ci.github.job import run
from rio_ci.github.listen import Listener
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests.kit import add, cmd_cell, code_cell

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write")]


def ticking(step: float = 31.0) -> Callable[[], float]:
    """A clock on which every reading is ``step`` seconds after the one before."""
    readings = itertools.count(step=step)
    return lambda: float(next(readings))


def looks_at(gh: FakeGitHub, issue: int) -> Callable[[Recorded], bool]:
    """A look at the issue: a read of it after the job's start."""
    path = f"/repos/{gh.repo}/issues/{issue}"
    return lambda r: r.method == "GET" and r.path == path and "if-none-match" in r.headers


def comment_on_look(
    gh: FakeGitHub, issue: int, nth: int, body: str, ready: Callable[[], bool] = lambda: True
) -> list[int]:
    """While the job runs: a maintainer comments on ``issue`` just before GitHub answers
    the job's ``nth`` conditional look at it (counting looks once ``ready()``). Returns the
    new comment's id, once made."""
    made: list[int] = []
    seen = itertools.count(1)
    is_look = looks_at(gh, issue)

    def observe(req: Recorded) -> None:
        if is_look(req) and ready() and next(seen) == nth:
            made.append(gh.add_comment(issue, body, user="alice"))

    gh.observers.append(observe)
    return made


def run_in_process(repo: Repository, job: Job, clock: Callable[[], float]) -> dict[str, Any]:
    env = ActionInputs.from_environ(job.env)
    forge = GitHubForge(env.repository, env.token, env.api_url, throttle=False, retries=0)
    try:
        return run(env, forge, clock=clock)
    finally:
        forge.close()
        repo.step(job, "finish")
        repo.upload(job)


def test_a_comment_made_mid_job_reaches_that_jobs_next_turn(
    repo: Repository, gh: FakeGitHub
) -> None:
    repo.set_script(script(WAIT, WAIT, WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    db = job.runner_temp / "rio" / "session.sqlite3"

    def turn_fixed() -> bool:  # the first Turn's State is fixed: news is for the next one
        return db.exists() and any(r["kind"] == "turn_prepared" for r in journal_rows(db))

    made = comment_on_look(gh, issue, 1, "also handle the empty case", ready=turn_fixed)

    result = run_in_process(repo, job, ticking())

    assert result["status"] == "waiting", job.logs
    assert len(made) == 1
    events = repo.events(job)
    (comment,) = messages(events, "comment")
    assert comment["id"] == f"comment:{made[0]}"
    turns = [e for e in events if e["kind"] == "turn_prepared"]
    assert comment["id"] not in turns[0]["delivered"]
    assert comment["id"] in turns[1]["delivered"]  # this job's next Turn, not the next job
    unchanged = [r for r in gh.not_modified if looks_at(gh, issue)(r)]
    assert unchanged, "an unchanged look is answered 304"
    assert len([r for r in gh.requests if looks_at(gh, issue)(r)]) >= 2


def test_rio_stop_reaches_a_running_job_and_stops_its_script(
    repo: Repository, gh: FakeGitHub, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    long = add(
        cmd_cell(
            "python3", "-c", f"import time; open({str(started)!r}, 'w').close(); time.sleep(120)"
        )
    )
    repo.set_script(script([long], WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))
    made = comment_on_look(gh, issue, 1, "/rio stop", ready=started.exists)
    job = repo.prepare("issues", labeled(issue))

    result = run_in_process(repo, job, ticking())

    assert made and result["status"] == "failed", job.logs
    assert "stopped by @alice" in str(result["reason"])
    events = repo.events(job)
    assert len([e for e in events if e["kind"] == "model_attempt"]) == 1
    assert started.exists()  # it was running, and it was stopped, not waited for
    assert job.steps[-1].result["status"] == "failed"  # the finish step


def test_looks_are_at_most_every_interval_and_an_unchanged_one_rescans_nothing(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    issue = gh.add_issue("Fix", labels=("rio",))
    now = [0.0]
    session = Session.create(tmp_path / "s.sqlite3", "goal", Settings(cwd=str(tmp_path)))
    session.close()
    owner = Owner(str(tmp_path / "s.sqlite3"))
    forge = GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=0)
    issue_path = f"/repos/{gh.repo}/issues/{issue}"
    try:
        listener = Listener(owner, forge, issue, clock=lambda: now[0], head="")
        listener.prime()  # no request: the job's own re-scan follows
        take_in(owner, forge, issue, head="")
        before = len(gh.requests)
        now[0] = 29.0
        listener()  # too soon: no request at all
        assert len(gh.requests) == before
        now[0] = 30.0
        listener()  # the first look: nothing to compare with, so a re-scan, free
        assert [r.path for r in gh.requests[before:]] == [issue_path, f"{issue_path}/comments"]
        assert listener.scans == 1 and len(gh.not_modified) == 1  # the comments, unchanged
        now[0] = 60.0
        listener()  # unchanged: one 304, no re-scan
        assert [r.path for r in gh.not_modified[1:]] == [issue_path]
        assert listener.scans == 1
        gh.add_comment(issue, "news", user="alice")
        now[0] = 75.0
        listener()  # changed, but 15 s after the last look
        assert listener.scans == 1
        now[0] = 90.0
        listener()
        assert listener.scans == 2
        assert [m["id"] for m in owner.session.refresh().inbox] == [f"comment:{max(gh.comments)}"]
    finally:
        forge.close()
        owner.close()


def test_a_comment_heard_while_the_job_waits_for_a_timer_is_answered_before_it_fires(
    repo: Repository, gh: FakeGitHub
) -> None:
    set_timer = add(
        code_cell(
            "import time\nfrom rio_ci.api import timer\n"
            "timer('soon', time.time() + 40, {'why': 'look again'})\n"
        )
    )
    cancel = add(code_cell("from rio_ci.api import cancel_timer\ncancel_timer('soon')\n"))
    # 1: set the Timer; 2: wait for it (within this job's budget); 3: the comment: cancel it
    repo.set_script(script([set_timer], WAIT, [cancel], WAIT))
    repo.budget_minutes = 2.0
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    db = job.runner_temp / "rio" / "session.sqlite3"

    def waiting() -> bool:  # two patches accepted and nothing queued: the in-job wait
        if not db.exists():
            return False
        kinds = [r["kind"] for r in journal_rows(db)]
        return kinds.count("patch_accepted") == 2 and kinds[-1] != "execution_started"

    made = comment_on_look(gh, issue, 1, "answer me before the Timer", ready=waiting)

    result = run_in_process(repo, job, ticking())

    assert made and result["status"] == "waiting", job.logs
    events = repo.events(job)
    (comment,) = messages(events, "comment")
    turns = [e for e in events if e["kind"] == "turn_prepared"]
    assert comment["id"] in turns[2]["delivered"]
    assert not [e for e in events if e["kind"] == "timer_fired"]  # answered before it fired
