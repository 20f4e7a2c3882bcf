"""docs/github.md for the finish step: persist first, offline; refused pushes; the pull-request
gate. Real ``rio-ci action`` processes against FakeGitHub and its origin over smart HTTP."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from action_job import (
    WAIT,
    Job,
    Repository,
    commented,
    conclude,
    dispatched,
    labeled,
    messages,
    script,
)
from fakes.github_api import FakeGitHub, Recorded

from rio_ci.faults.crashpoints import FINISH_POINTS
from rio_ci.github.workspace import refused_paths
from rio_ci.store.artifact import MANIFEST, SNAPSHOT, archive, unpack
from tests.kit import add, cmd_cell, code_cell

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write")]
WRITE = [add(cmd_cell("python3", "-c", "open('notes.txt', 'w').write('hello')"))]


# --- persist first, offline ------------------------------------------------------------------


@pytest.mark.parametrize("outage", ["503", "401", "403", "expired"])
def test_finish_persists_before_any_network_call_and_an_outage_loses_nothing(
    tmp_path: Path, gh: FakeGitHub, outage: str
) -> None:
    repo = Repository(tmp_path, gh, http=True)
    repo.set_script(script(WRITE, WAIT, [add(cmd_cell("cat", "notes.txt"))], WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    repo.step(job)
    manifest = job.artifact_dir / "manifest.json"
    at_first_call: list[object] = []

    def observe(req: Recorded) -> None:
        if not at_first_call:  # what finish had on disk when it first reached GitHub
            at_first_call.append(json.loads(manifest.read_text()) if manifest.exists() else None)

    gh.observers.append(observe)
    if outage == "expired":
        gh.expire_token()  # 401 on the API and over git alike
    else:
        gh.fail(r".*", int(outage))
    repo.step(job, "finish")
    repo.upload(job)

    assert at_first_call and isinstance(at_first_call[0], dict), at_first_call
    assert at_first_call[0]["generation"] == 1
    assert job.outputs["artifact-name"] == f"rio-session-{issue}"
    assert job.outputs["retention-days"] == "90"
    assert job.finish.code == 0, job.finish.stderr
    events = repo.events(job)
    assert [e["kind"] for e in events].count("patch_accepted") == 2
    assert any(e["kind"] == "execution_finished" and e["cell_id"] == 1 for e in events)
    # GitHub comes back; the next job goes on from everything the cut-off one did.
    gh.failures.clear()
    gh.tokens[gh.token].expired = False
    steer = gh.add_comment(issue, "go on", user="alice")
    later = repo.job("issue_comment", commented(gh, steer))
    assert "restored generation 1" in later.run.stderr
    assert later.outputs["status"] == "waiting", later.logs
    (cat,) = [e for e in repo.events(later) if e["kind"] == "output" and e["cell_id"] == 3]
    if outage == "expired":  # git was refused too: the Journal is whole, the tree was not pushed
        assert "not checkpointed" in job.finish.stderr and "No such file" in cat["text"]
        assert "git push failed" in job.finish.result["not_checkpointed"]  # the result says
    else:  # the API was down, git was not: the checkpoint reached the branch
        assert cat["text"] == "hello"


def test_a_success_whose_finish_could_not_reach_github_is_published_by_the_next_job(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """docs/github.md "Its final state is always written" and "On success the branch gets a pull
    request": an outage during finish delays both, and any later job publishes them."""
    repo = Repository(tmp_path, gh, http=True)
    repo.set_script(script(WRITE, [conclude()]))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    repo.step(job)
    gh.fail(r".*", 503)  # the API is down; git over HTTP is not
    repo.step(job, "finish")
    repo.upload(job)
    assert job.finish.code == 0 and job.outputs["status"] == "succeeded", job.logs
    assert not gh.pulls
    assert all("### rio-ci: succeeded" not in c["body"] for c in repo.progress_comments(issue))
    gh.failures.clear()

    later = repo.job("workflow_dispatch", dispatched(issue))

    assert "never reached GitHub; this job publishes it" in later.run.stderr, later.logs
    (pull,) = gh.pulls
    assert later.outputs["pull-request"].endswith(f"/pull/{pull}")
    (progress,) = repo.progress_comments(issue)
    assert "### rio-ci: succeeded" in progress["body"]
    assert f"/pull/{pull}" in progress["body"]
    # Published now: a later job has nothing to do and costs no generation.
    again = repo.job("workflow_dispatch", dispatched(issue))
    assert again.outputs.get("status", "ignored") == "ignored", again.logs
    assert "has ended (success)" in again.run.stderr
    assert list(gh.pulls) == [pull]


# --- refused pushes ---------------------------------------------------------------------------


def test_a_push_refused_for_workflows_and_a_big_file_is_made_without_them(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = Repository(tmp_path, gh, http=True, max_file_bytes=1024 * 1024)
    make = (
        "import os\nos.makedirs('.github/workflows', exist_ok=True)\n"
        "open('.github/workflows/ci.yml', 'w').write('on: push\\n')\n"
        "open('big.bin', 'wb').write(b'x' * (2 * 1024 * 1024))\n"
        "open('fix.py', 'w').write('fixed = True\\n')\n"
    )
    repo.set_script(script([add(code_cell(make))], WAIT, WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))
    branch = f"rio/issue-{issue}"

    job = repo.job("issues", labeled(issue))

    assert job.finish.code == 0, job.finish.stderr
    assert repo.branch_file(branch, "fix.py") == "fixed = True"
    assert repo.branch_file(branch, ".github/workflows/ci.yml") is None
    assert repo.branch_file(branch, "big.bin") is None
    (refused,) = messages(repo.events(job), "push_refused")  # in the rewritten snapshot
    assert sorted(refused["payload"]["paths"]) == [".github/workflows/ci.yml", "big.bin"]
    assert "workflows" in refused["payload"]["reason"] and "100 MB" in refused["payload"]["reason"]
    status = subprocess.run(
        ["git", "status", "--porcelain"],
        cwd=job.workspace,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ".github/" in status and "big.bin" in status  # still here, uncommitted
    assert "::warning::" in job.finish.stderr and "refused" in job.summary
    (comment,) = repo.progress_comments(issue)
    assert "not pushed (refused by GitHub)" in comment["body"]

    steer = gh.add_comment(issue, "go on", user="alice")
    later = repo.job("issue_comment", commented(gh, steer))
    turns = [e for e in repo.events(later) if e["kind"] == "turn_prepared"]
    assert refused["id"] in turns[-1]["delivered"]  # the model is told


def test_githubs_refusal_inside_the_rejected_ref_line_is_read_too() -> None:
    stderr = (
        "To https://github.com/octo/demo.git\n ! [remote rejected] rio/issue-7 -> "
        "rio/issue-7 (refusing to allow a GitHub App to create or update workflow "
        "`.github/workflows/ci.yml` without `workflows` permission)\n"
        "error: failed to push some refs to 'https://github.com/octo/demo.git'\n"
    )
    pat = (
        "! [remote rejected] x -> x (refusing to allow a Personal Access Token to create or "
        "update workflow `.github/workflows/a b.yml` without `workflow` scope)"
    )
    assert refused_paths(stderr)[0] == [".github/workflows/ci.yml"]
    assert refused_paths(pat)[0] == [".github/workflows/a b.yml"]
    assert refused_paths(
        "remote: error: File data/x.bin is 131.37 MB; this exceeds GitHub's "
        "file size limit of 100.00 MB"
    )[0] == ["data/x.bin"]
    assert refused_paths("! [rejected] main -> main (non-fast-forward)") == ([], [])


# --- the pull-request gate --------------------------------------------------------------------

FORGE = (
    "import json, os, sqlite3, time\n"
    "db = sqlite3.connect(os.environ['RIO_SESSION_DB'], timeout=30)\n"
    "seq = db.execute('select max(seq) from events').fetchone()[0] + 1\n"
    "data = {'result': 'success', 'reason': 'conclusion accepted', 'note_id': 9,\n"
    "        'unresolved': [], 'cleanup_error': None}\n"
    "db.execute('insert into events values (?, ?, ?, NULL, ?)',\n"
    "           (seq, 'run_ended', time.time(), json.dumps(data)))\n"
    "db.commit()\n"
)


def test_a_cell_that_forges_success_in_the_session_gets_no_pull_request(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = Repository(tmp_path, gh, files={".github/rio.yml": "validators: ['test -f ok']\n"})
    issue, job = repo.labeled_issue(script([add(code_cell(FORGE))]))

    assert job.run.result["status"] == "succeeded", job.logs  # the forgery fooled the run
    assert gh.pulls == {}
    assert job.outputs["status"] == "error" and job.outputs["pull-request"] == ""
    assert "not committed by the Owner" in job.finish.result["reason"]
    (comment,) = repo.progress_comments(issue)
    assert "no pull request" in comment["body"]


def test_validators_run_again_in_the_finish_step_before_the_pull_request(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    runs = tmp_path / "validator-runs"
    # Passes the first time only: what a Cell's leftover could make of a validator.
    once = (
        f'python3 -c "import pathlib, sys; p = pathlib.Path({str(runs)!r}); '
        "n = len(p.read_text()) if p.exists() else 0; p.write_text('x' * (n + 1)); "
        'sys.exit(n)"'
    )
    config = f"validators: [{json.dumps(once)}]\n"
    repo = Repository(tmp_path, gh, files={".github/rio.yml": config})
    _, job = repo.labeled_issue(script(WRITE, [conclude()]))

    assert job.run.result["status"] == "succeeded", job.logs
    assert runs.read_text() == "xx"  # at the conclusion, then again in the finish step
    assert gh.pulls == {} and job.outputs["status"] == "error"
    assert "failed in the finish step" in job.finish.result["reason"]
    results = [e for e in repo.events(job) if e["kind"] == "validator_result"]
    assert [r["result"]["type"] for r in results] == ["success", "error"]


# --- the artifact directory is replaced atomically ---------------------------------------


def published_generation(job: Job) -> int | None:
    """The generation the upload step would publish, checked as restore checks it; None
    when no artifact-name was published."""
    if not job.outputs.get("artifact-name"):
        return None
    assert sorted(p.name for p in job.artifact_dir.iterdir()) == [MANIFEST, SNAPSHOT]
    bundle = archive(job.artifact_dir, job.directory / "check.zip")
    return unpack(bundle, job.directory / "check").generation


@pytest.mark.parametrize("nth", [1, 2], ids=["first-snapshot", "second-snapshot"])
@pytest.mark.parametrize("point", FINISH_POINTS)
def test_finish_killed_at_any_step_of_the_replacement_leaves_a_complete_generation(
    tmp_path: Path, gh: FakeGitHub, point: str, nth: int
) -> None:
    # A success: the finish step runs the validators again (a commit), so it snapshots twice.
    repo = Repository(tmp_path, gh, files={".github/rio.yml": "validators: ['true']\n"})
    repo.set_script(script(WRITE, [conclude()]))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    repo.step(job)
    job.env["RIO_CRASH_AT"] = f"{point}:{nth}"

    killed = repo.step(job, "finish")

    assert killed.code == -signal.SIGKILL, job.logs  # the crash landed
    if nth == 1:
        assert published_generation(job) is None  # named only once it was complete
    else:
        assert published_generation(job) == 1
