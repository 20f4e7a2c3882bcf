"""Only rio's own artifacts are restored (docs/github.md, "Whose artifacts are restored").

Any workflow run can upload an artifact named ``rio-session-<n>``, a fork's pull-request run
included. Here each forgery is a valid Session (checksum, integrity_check, schema all pass)
holding a queued ``cmd`` Cell that would leave a marker file: the next job must never
restore it, never run its Cell, and go on from rio's own newest generation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from action_job import WAIT, Job, Repository, commented, script
from fakes.github_api import FakeGitHub

from rio_ci.store.artifact import pack
from tests.kit import cmd_cell
from tests.session_cli import CliSession

pytestmark = pytest.mark.people(alice="write")


def forge_session(job: Job, root: Path, marker: Path, run_id: int, generation: int) -> Path:
    """rio's own snapshot from ``job``, with a queued cmd Cell admitted, packed as a newer
    generation whose manifest names ``run_id``: all a forger needs, and valid."""
    root.mkdir()
    forged = CliSession(root)
    shutil.copyfile(job.artifact_dir / "session.sqlite3", forged.db)
    accepted = forged.propose(cmd_cell("touch", str(marker)))
    assert accepted.get("accepted") is not False, accepted
    return pack(
        forged.db,
        root / "artifact",
        generation=generation,
        parent_generation=generation - 1,
        run_id=run_id,
        next_wake=None,
    )


def foreign(gh: FakeGitHub, kind: str) -> tuple[int, int]:
    """(the run that uploads, the run the manifest names) for each way to forge."""
    if kind == "copied":  # rio's own run uploading a manifest of another run
        return gh.add_rio_run(777_001), 777_002
    run = gh.add_foreign_run(kind)
    return run, run


@pytest.mark.parametrize("kind", ["fork", "target", "workflow", "copied"])
def test_a_forged_generation_from_a_foreign_run_is_never_restored(
    repo: Repository, gh: FakeGitHub, tmp_path: Path, kind: str
) -> None:
    issue, first = repo.labeled_issue(script(WAIT, WAIT))
    marker = tmp_path / "forged-cell-ran"
    uploader, named = foreign(gh, kind)
    bundle = forge_session(first, tmp_path / "forgery", marker, named, generation=2)
    forged = gh.upload_artifact(
        f"rio-session-{issue}", bundle, run_id=uploader, created_at=repo.next_created_at()
    )

    steer = gh.add_comment(issue, "go on", user="alice", association="OWNER")
    job = repo.job("issue_comment", commented(gh, steer))

    assert job.run.code == 0 and job.finish.code == 0, job.logs
    assert "restored generation 1" in job.run.stderr
    assert not marker.exists()
    assert str(marker) not in repo.events_text(job)
    warning = f"skipped artifact {forged}"
    assert warning in job.run.stderr and warning in job.summary
    manifest = json.loads((job.artifact_dir / "manifest.json").read_text())
    assert (manifest["generation"], manifest["parent_generation"]) == (2, 1)
    assert job.outputs["artifact-name"] == f"rio-session-{issue}"


def test_a_forgery_uploaded_during_the_job_does_not_stop_finish_from_publishing(
    repo: Repository, gh: FakeGitHub, tmp_path: Path
) -> None:
    issue, first = repo.labeled_issue(script(WAIT, WAIT))
    fork_run = gh.add_foreign_run("fork")
    bundle = forge_session(first, tmp_path / "forgery", tmp_path / "ran", fork_run, 2)
    steer = gh.add_comment(issue, "go on", user="alice", association="OWNER")

    job = repo.prepare("issue_comment", commented(gh, steer))
    repo.step(job)
    forged = gh.upload_artifact(
        f"rio-session-{issue}", bundle, run_id=fork_run, created_at=repo.next_created_at()
    )
    repo.step(job, "finish")

    assert job.finish.code == 0, job.logs
    assert job.outputs["artifact-name"] == f"rio-session-{issue}"
    assert f"skipped artifact {forged}" in job.finish.stderr


def test_without_github_workflow_ref_no_artifact_is_trusted_and_nothing_runs(
    repo: Repository, gh: FakeGitHub
) -> None:
    issue, _ = repo.labeled_issue(script(WAIT, WAIT))
    steer = gh.add_comment(issue, "go on", user="alice", association="OWNER")

    job = repo.prepare("issue_comment", commented(gh, steer))
    del job.env["GITHUB_WORKFLOW_REF"]
    repo.step(job)

    assert job.run.code == 1 and job.run.result["status"] == "error"
    assert "GITHUB_WORKFLOW_REF" in job.run.result["reason"]
    assert len(gh.artifacts) == 1
