"""Resuming a Session: a ``workflow_dispatch`` names its issue, and a runner whose work folder
moved still runs the Session's Cells in this job's checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from action_job import WAIT, Repository, commented, dispatched, script
from fakes.github_api import FakeGitHub

from tests.kit import add, cmd_cell

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write", eve="read")]


# --- dispatch ------------------------------------------------------------------------------------


def test_workflow_dispatch_resumes_the_issue_it_names(repo: Repository, gh: FakeGitHub) -> None:
    issue, _ = repo.labeled_issue(script(WAIT))

    job = repo.job("workflow_dispatch", dispatched(issue))
    nothing = repo.job("workflow_dispatch", dispatched(99))

    assert "restored generation 1" in job.run.stderr
    assert job.outputs["status"] == "waiting"
    assert json.loads((job.artifact_dir / "manifest.json").read_text())["generation"] == 2
    assert nothing.run.result["status"] == "ignored"


def test_a_runner_whose_work_folder_moved_still_runs_cells_in_this_jobs_checkout(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = Repository(tmp_path, gh, moving_workspace=True)
    issue, first = repo.labeled_issue(
        script(
            [add(cmd_cell("python3", "-c", "open('one.txt', 'w').write('1')"))],
            WAIT,
            [add(cmd_cell("python3", "-c", "open('two.txt', 'w').write(open('one.txt').read())"))],
            WAIT,
        )
    )
    steer = gh.add_comment(issue, "go on", user="alice", association="OWNER")

    second = repo.job("issue_comment", commented(gh, steer))

    assert second.workspace != first.workspace
    assert first.workspace.is_symlink() and first.workspace.resolve() == second.workspace
    assert f"now leads to {second.workspace}" in second.run.stderr
    assert (second.workspace / "two.txt").read_text() == "1"
    assert repo.branch_file(f"rio/issue-{issue}", "two.txt") == "1"
