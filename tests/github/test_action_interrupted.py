"""a GitHub job cancelled or timed out mid-script → the next job reports an
UnknownExecution for that Cell and continues (the script is never run twice)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from action_job import (
    Repository,
    commented,
    conclude,
    kill_when,
    labeled,
    messages,
    resolve_unknown,
    script,
)
from fakes.github_api import FakeGitHub

from tests import mermaid
from tests.kit import add, cmd_cell, code_cell

pytestmark = pytest.mark.people(alice="write")


@pytest.mark.parametrize(
    ("sig", "reason"),
    [
        (signal.SIGTERM, "owner_interrupted"),  # the runner cancels the job or it times out
        (signal.SIGKILL, "worker_lost_before_result_commit"),  # the step's process is killed
    ],
    ids=["cancelled", "killed"],
)
def test_a_job_cut_off_mid_script_leaves_an_unknown_execution_the_next_job_resolves(
    tmp_path: Path, gh: FakeGitHub, sig: signal.Signals, reason: str
) -> None:
    side_effects = tmp_path / "side-effects.log"
    config = "validators: ['test -f fixed.txt']\n"  # success needs the fix in the tree
    repo = Repository(tmp_path, gh, files={".github/rio.yml": config})
    repo.set_script(
        script(
            # job 1: a script with an external side effect, then a long sleep
            [
                add(
                    code_cell(
                        f"import time\nopen({str(side_effects)!r}, 'a').write('ran\\n')\n"
                        "print('side effect done', flush=True)\ntime.sleep(120)\n"
                    )
                )
            ],
            # job 2: the UnknownExecution and the comment arrive; inspect before anything else
            [add(cmd_cell("cat", str(side_effects)))],
            [
                resolve_unknown("the log shows the script ran once"),
                add(cmd_cell("python3", "-c", "open('fixed.txt', 'w').write('ok\\n')")),
            ],
            [conclude()],
        )
    )
    issue = gh.add_issue("Fix it", "Please fix the thing", labels=("rio",))

    first = repo.job("issues", labeled(issue), interrupt=kill_when(side_effects, sig))

    assert first.run.code != 0
    assert first.finish.code == 0, first.finish.stderr
    assert first.outputs["status"] == "interrupted"  # the composite's output: finish's
    assert first.outputs["artifact-name"] == f"rio-session-{issue}"
    unknown = [
        m
        for m in messages(repo.events(first), "execution")
        if m["payload"]["type"] == "UnknownExecution"
    ]
    assert [(m["payload"]["cell_id"], m["payload"]["reason"]) for m in unknown] == [(1, reason)]
    (comment,) = repo.progress_comments(issue)
    assert "UnknownExecution" in comment["body"]
    # Nothing runs until someone acts, and the comment says so first (not "paused").
    shown = [line for line in comment["body"].splitlines() if line and "<!--" not in line]
    assert shown[0] == f"### rio-ci: stopped (the job was cut off) · #{issue} Fix it"
    assert shown[1].startswith("**Next: you.** Nothing is running: this job was cut off")

    steer = gh.add_comment(issue, "carry on, please", user="alice", association="COLLABORATOR")
    second = repo.job("issue_comment", commented(gh, steer))

    assert second.run.code == 0, second.logs
    assert second.finish.result["status"] == "succeeded", second.logs
    assert side_effects.read_text() == "ran\n"  # never rerun
    events = repo.events(second)
    started = [e for e in events if e["kind"] == "execution_started" and e["cell_id"] == 1]
    assert len(started) == 1
    records = [m["payload"] for m in messages(events, "execution") if m["id"] == "execution:1"]
    assert [r["type"] for r in records] == ["UnknownExecution"]
    resolutions = [
        e
        for e in events
        if e["kind"] == "patch_accepted"
        and any(
            c.get("role") == "resolution" and c.get("target_cell_id") == 1
            for c in e.get("cells", [])
        )
    ]
    assert len(resolutions) == 1
    assert [m["payload"]["body"] for m in messages(events, "comment")] == ["carry on, please"]
    (pull,) = gh.pulls.values()
    assert pull["head"]["ref"] == f"rio/issue-{issue}"
    assert f"Fixes #{issue}" in pull["body"]
    assert second.outputs["pull-request"] == pull["html_url"]
    assert repo.branch_file(f"rio/issue-{issue}", "fixed.txt") == "ok"
    (comment,) = repo.progress_comments(issue)
    # The dashboard tells both jobs: the cut-off Cell stays listed with its resolution.
    body = comment["body"]
    assert f"**Next: you.** Review [#{pull['number']}]({pull['html_url']})" in body
    assert "| `alice` | [comment](" in body and "| round 2 (job 2) |" in body  # heard
    assert [r["content"] for r in gh.reactions[steer]] == ["eyes"]
    assert "Job 2 · " in body and "started in job 1, recorded by job 1" in body
    note = next(c["id"] for c in resolutions[0]["cells"] if c.get("role") == "resolution")
    assert f"Resolved by note {note} in round" in body
    (chart,) = mermaid.blocks(body)
    assert "    section job 1, " in chart and "    section job 2, " in chart
    assert "cut off :milestone" in chart
    assert mermaid.blocks(second.summary) == [chart]  # the step summary draws it too


def test_a_job_whose_time_budget_runs_out_says_deadline(tmp_path: Path, gh: FakeGitHub) -> None:
    """The composite's ``status`` output is the finish step's: ``deadline`` when the time
    budget ran out with work left (docs/github.md "Outputs"), not ``waiting``."""
    repo = Repository(tmp_path, gh, budget_minutes=0.05)
    repo.set_script(script([add(cmd_cell("sleep", "10"))], [conclude()]))
    issue = gh.add_issue("Slow", labels=("rio",))

    job = repo.job("issues", labeled(issue))

    assert job.run.result["status"] == "deadline", job.logs
    assert job.finish.code == 0 and job.outputs["status"] == "deadline"
