"""docs/github.md "A lost runner never causes a rerun": before every Worker starts, the job
pushes a launch record (the Journal's tail) to refs/rio/sessions/<n>; a runner that dies at
any instant after a launch — no finish step, no artifact — leaves the next job an
UnknownExecution for that Cell, never a rerun, and every accepted round."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from action_job import (
    WAIT,
    Repository,
    commented,
    conclude,
    git,
    kill_tree_when,
    labeled,
    messages,
    resolve_unknown,
    script,
)
from fakes.github_api import FakeGitHub

from tests.kit import add, cmd_cell, code_cell

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write")]


def side_effect_cell(log: Path) -> dict[str, object]:
    return code_cell(
        f"import time\nopen({str(log)!r}, 'a').write('ran\\n')\n"
        "print('side effect done', flush=True)\ntime.sleep(120)\n"
    )


def record(repo: Repository, issue: int) -> tuple[dict[str, object], list[dict[str, object]]]:
    ref = f"refs/rio/sessions/{issue}"
    header = json.loads(git(repo.origin, "show", f"{ref}:record.json"))
    tail = [json.loads(line) for line in git(repo.origin, "show", f"{ref}:tail.jsonl").splitlines()]
    return header, tail


@pytest.mark.parametrize("lost", ["first_job", "later_job"])
def test_a_runner_lost_mid_cell_leaves_an_unknown_execution_and_every_accepted_round(
    tmp_path: Path, gh: FakeGitHub, lost: str
) -> None:
    side_effects = tmp_path / "side-effects.log"
    repo = Repository(
        tmp_path, gh, http=True, files={".github/rio.yml": "validators: ['test -f fixed.txt']\n"}
    )
    rounds = [] if lost == "first_job" else [WAIT]
    repo.set_script(
        script(
            *rounds,
            [add(side_effect_cell(side_effects))],  # the lost job: launched, then the runner dies
            [add(cmd_cell("cat", str(side_effects)))],  # the next job inspects before anything
            [
                resolve_unknown("the log shows the script ran once"),
                add(cmd_cell("python3", "-c", "open('fixed.txt', 'w').write('ok\\n')")),
            ],
            [conclude()],
        )
    )
    issue = gh.add_issue("Fix it", labels=("rio",))
    if lost == "later_job":
        repo.job("issues", labeled(issue))
        event = ("issue_comment", commented(gh, gh.add_comment(issue, "go", user="alice")))
    else:
        event = ("issues", labeled(issue))
    uploads = len(gh.artifacts)

    gone = repo.job(*event, interrupt=kill_tree_when(side_effects), finish=False)

    assert gone.run.code < 0 and len(gh.artifacts) == uploads  # killed; nothing uploaded
    header, tail = record(repo, issue)
    assert header["schema"] == "rio.launch/1" and header["cell_id"] == len(rounds) + 1
    assert tail[-1]["kind"] == "execution_started" and tail[-1]["seq"] == header["last_seq"]
    assert header["after_seq"] == (0 if lost == "first_job" else tail[0]["seq"] - 1)
    assert [r for r in gh.requests if r.path.endswith("/workflows/rio.yml/dispatches")] == []

    steer = gh.add_comment(issue, "carry on, please", user="alice")
    nxt = repo.job("issue_comment", commented(gh, steer))

    assert nxt.run.code == 0, nxt.logs
    assert nxt.finish.result["status"] == "succeeded", nxt.logs
    assert side_effects.read_text() == "ran\n"  # never run again
    events = repo.events(nxt)
    cell = len(rounds) + 1
    starts = [e for e in events if e["kind"] == "execution_started" and e["cell_id"] == cell]
    assert len(starts) == 1
    (unknown,) = [
        m["payload"] for m in messages(events, "execution") if m["id"] == f"execution:{cell}"
    ]
    assert unknown["type"] == "UnknownExecution"
    # No accepted round was lost: the lost job's patch (and its comment) are in the history.
    patches = [e for e in events if e["kind"] == "patch_accepted"]
    assert [p["cells"][0]["kind"] for p in patches] == [
        *(["note"] if rounds else []),
        "code",
        "cmd",
        "note",
        "note",
    ]
    if lost == "later_job":
        assert [m["payload"]["body"] for m in messages(events, "comment")] == [
            "go",
            "carry on, please",
        ]
    assert repo.branch_file(f"rio/issue-{issue}", "fixed.txt") == "ok"


def test_a_job_that_lost_the_lease_launches_nothing_and_publishes_nothing(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    side_effects = tmp_path / "second-cell.log"
    repo = Repository(tmp_path, gh)
    ref = "refs/rio/sessions/1"
    # Cell 1 plays another job that pushed a newer launch record meanwhile.
    other = (
        "import subprocess\n"
        f"origin = {str(repo.origin)!r}\n"
        "tree = subprocess.run(['git', '-C', origin, 'hash-object', '-t', 'tree', '-w', "
        "'--stdin'], input=b'', capture_output=True, check=True).stdout.decode().strip()\n"
        "commit = subprocess.run(['git', '-C', origin, '-c', 'user.name=x', '-c', "
        "'user.email=x@x', 'commit-tree', tree, '-m', 'another job'], "
        "capture_output=True, check=True).stdout.decode().strip()\n"
        f"subprocess.run(['git', '-C', origin, 'update-ref', {ref!r}, commit], check=True)\n"
    )
    issue, job = repo.labeled_issue(
        script(
            [add(code_cell(other))],
            [add(cmd_cell("python3", "-c", f"open({str(side_effects)!r}, 'a').write('ran')"))],
            WAIT,
        ),
        title="Fix it",
    )

    assert job.run.result["status"] == "error"
    assert "moved since this job read it" in job.run.result["reason"]
    assert not side_effects.exists()  # the second Cell was never spawned
    assert job.finish.code == 1 and job.outputs["artifact-name"] == f"rio-orphan-{issue}-1001"
    assert [a["name"] for a in gh.artifacts.values()] == [f"rio-orphan-{issue}-1001"]
    assert repo.progress_comments(issue)[0]["body"].count("### rio-ci: running") == 1
    assert f"refs/heads/rio/issue-{issue}" not in repo.branches()
    events = repo.events(job)
    (lost,) = [m["payload"] for m in messages(events, "execution") if m["id"] == "execution:2"]
    assert lost["type"] == "UnknownExecution"
    tip = subprocess.run(
        ["git", "-C", str(repo.origin), "log", "-1", "--format=%s", ref],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert tip == "another job"


def test_a_session_whose_generations_are_all_gone_is_not_rebuilt_from_an_old_record(
    repo: Repository, gh: FakeGitHub
) -> None:
    """docs/github.md "Launch records": once finish has written generation N + 1 the record
    says so, and a record older than a persisted generation never rebuilds a Session. With
    every artifact deleted after a normally finished job, the dispatched job starts nothing,
    says so on the issue once, and the sweep stops dispatching it."""
    gh.add_workflow("rio.yml")
    timer = code_cell(
        "import time\nfrom rio_ci.api import timer\n"
        "timer('later', time.time() + 3600, {'why': 'look again'})\n"
    )
    issue, done = repo.labeled_issue(script([add(cmd_cell("true"))], [add(timer)], WAIT))
    assert done.outputs["status"] == "waiting", done.logs
    header, _ = record(repo, issue)
    assert header["superseded_by"] == 1 and header["generation"] == 0
    gh.artifacts.clear()  # deleted by a maintainer (or all expired)
    (progress,) = repo.progress_comments(issue)
    progress["body"] = re.sub(r'"next_wake": [0-9.]+', '"next_wake": 1', progress["body"])
    # the Timer is due now: the sweep dispatches the issue

    swept = repo.job("schedule", {"schedule": "*/15 * * * *"})
    resumed = repo.job("workflow_dispatch", {"inputs": {"issue": str(issue)}})
    again = repo.job("workflow_dispatch", {"inputs": {"issue": str(issue)}})
    later = repo.job("schedule", {"schedule": "*/15 * * * *"})

    assert swept.run.result["dispatched"] == [issue]
    assert resumed.run.result["status"] == "ignored", resumed.logs
    assert "rebuilt" not in resumed.logs and "superseded by generation 1" in resumed.logs
    assert resumed.artifact_id is None and gh.artifacts == {}
    (gone,) = repo.progress_comments(issue)  # the same comment, rewritten once
    assert "gone" in gone["body"] and '"next_wake": null' in gone["body"]
    assert '"operation": "gone:' in gone["body"]
    edits = [r for r in gh.requests if r.method == "PATCH" and f"comments/{gone['id']}" in r.path]
    assert again.run.result["status"] == "ignored" and again.artifact_id is None
    assert len([r for r in gh.requests if r.method == "PATCH" and r in edits]) == len(edits)
    assert later.run.result["dispatched"] == []
