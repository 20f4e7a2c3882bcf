"""The scheduled sweep: resume Sessions whose Timer is due, each in its own dispatched job,
deciding from the progress comment's metadata alone (no journal is downloaded)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from action_job import Repository, conclude, dispatched, messages, script
from fakes.github_api import FakeGitHub

from tests.kit import add, code_cell, note_cell, until

pytestmark = [pytest.mark.people(alice="write"), pytest.mark.workflows("rio.yml")]

MARKER = "<!-- rio-ci:progress -->"
SCHEDULE = {"schedule": "*/15 * * * *"}


def progress_body(next_wake: float | None, ended: bool = False) -> str:
    meta = {
        "status": "waiting",
        "generation": 3,
        "operation": "x:1",
        "next_wake": next_wake,
        "ended": ended,
    }
    return f"{MARKER}\n<!-- rio-ci:meta {json.dumps(meta)} -->\n### rio-ci: waiting\n"


def test_the_sweep_dispatches_only_sessions_with_a_due_wake_from_comment_metadata(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = Repository(tmp_path, gh)
    past, future = time.time() - 60, time.time() + 3600
    due = gh.add_issue("due", labels=("rio",))
    gh.add_comment(due, "a human remark", user="alice", association="OWNER")
    gh.add_comment(due, progress_body(past), user=gh.bot, association="NONE")
    later = gh.add_issue("later", labels=("rio",))
    gh.add_comment(later, progress_body(future), user=gh.bot, association="NONE")
    ended = gh.add_issue("ended", labels=("rio",))
    gh.add_comment(ended, progress_body(past, ended=True), user=gh.bot, association="NONE")
    planted = gh.add_issue("planted", labels=("rio",))  # no write access: not our comment
    gh.add_comment(planted, progress_body(past), user="eve", association="NONE")
    unlabelled = gh.add_issue("unlabelled")
    gh.add_comment(unlabelled, progress_body(past), user=gh.bot, association="NONE")
    closed = gh.add_issue("closed", labels=("rio",), state="closed")
    gh.add_comment(closed, progress_body(past), user=gh.bot, association="NONE")
    pull = gh.add_pull("rio/issue-99", "a pull request")
    gh.add_label(pull, "rio")
    gh.add_comment(pull, progress_body(past), user=gh.bot, association="NONE")

    job = repo.job("schedule", SCHEDULE)

    assert job.run.code == 0, job.logs
    assert job.run.result == {"status": "swept", "dispatched": [due]}
    assert gh.dispatches == [{"workflow": "rio.yml", "ref": "main", "inputs": {"issue": str(due)}}]
    assert [r for r in gh.requests if "/actions/artifacts" in r.path] == []
    assert [r for r in gh.requests if r.method != "GET" and "dispatches" not in r.path] == []
    assert job.finish.result["status"] == "ignored"
    assert job.outputs["status"] == "swept" and job.outputs["artifact-name"] == ""


def test_a_timer_set_in_one_job_is_swept_when_due_and_resumes_the_session(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    # 3 s: shorter than the Timer, which is far enough that a busy machine's first job and
    # early sweep end before it falls due
    repo = Repository(tmp_path, gh, budget_minutes=0.05)
    issue, first = repo.labeled_issue(
        script(
            [
                add(
                    code_cell(
                        "import time\nfrom rio_ci.api import timer\n"
                        "timer('look-again', time.time() + 15, {'why': 'look at CI again'})\n"
                    )
                )
            ],
            [add(note_cell("waiting for the Timer"))],
            [conclude()],
        ),
        title="Watch CI",
    )
    # That a sweep leaves a Timer that is not yet due alone is the test above's "later"
    # issue; here nothing races the clock: the test only waits for the wake to pass.
    wake = float(first.outputs["next-wake"])
    artifact_reads = len([r for r in gh.requests if "/actions/artifacts" in r.path])
    until(lambda: time.time() > wake + 0.1, 60, "the Timer to fall due")
    sweep = repo.job("schedule", SCHEDULE)

    assert first.outputs["status"] == "waiting", first.logs
    assert sweep.run.result["dispatched"] == [issue]
    assert len([r for r in gh.requests if "/actions/artifacts" in r.path]) == artifact_reads

    resumed = repo.job("workflow_dispatch", dispatched(issue))

    assert resumed.outputs["status"] == "succeeded", resumed.logs
    (fired,) = messages(repo.events(resumed), "timer")
    assert fired == {
        "id": "timer:look-again",
        "kind": "timer",
        "payload": {"why": "look at CI again"},
    }
    assert len(gh.pulls) == 1
