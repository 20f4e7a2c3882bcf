"""A tree that would hang or blow up git costs seconds, not the job's results (docs/github.md,
"The tree cannot hang the checkpoint").

A Cell leaves a FIFO as a nested repository's ``HEAD`` (``sub/.git/HEAD``), a FIFO and a socket
at the top of the tree and a 1 TiB sparse file (or the largest the file system allows: the
Cell writes down the size it got, and the test checks it is over the cap). The finish step still
succeeds, writes the artifact and the final comment, and pushes the rest; the model is told
what was left out, and a pull request says it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from action_job import (
    WAIT,
    Repository,
    commented,
    conclude,
    kill_tree_when,
    labeled,
    messages,
    resolve_unknown,
    script,
)
from fakes.github_api import FakeGitHub

from tests.kit import add, cmd_cell

pytestmark = [pytest.mark.people(alice="write")]

HOSTILE_TREE = """
import os, pathlib, socket
os.makedirs("sub/.git", exist_ok=True)
os.mkfifo("sub/.git/HEAD")
pathlib.Path("sub/lib.py").write_text("x = 1\\n")
os.mkfifo("top.fifo")
with socket.socket(socket.AF_UNIX) as server:
    server.bind("server.sock")
size = 1 << 40
while True:
    try:
        with open("huge.bin", "wb") as out:
            out.truncate(size)
        break
    except OSError:
        size //= 2
pathlib.Path("fix.py").write_text("fixed = True\\n")
"""


def test_a_fifo_head_a_socket_and_a_terabyte_cost_seconds_not_the_jobs_results(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """The run step is killed while the Cell runs, so its own end never rebuilds the
    checkout's ``.git``: finish meets the FIFO ``sub/.git/HEAD`` itself."""
    repo = Repository(tmp_path, gh, http=True)
    built = tmp_path / "built"
    hostile = HOSTILE_TREE + f"open({str(built)!r}, 'w').write(f'{{size}}\\n')\nimport time\n"
    hostile += "time.sleep(120)\n"
    repo.set_script(
        script([add(cmd_cell("python3", "-c", hostile))], [resolve_unknown()], WAIT),
    )
    issue = gh.add_issue("Fix", labels=("rio",))
    branch = f"rio/issue-{issue}"

    job = repo.prepare("issues", labeled(issue))
    process = repo.start(job)
    kill_tree_when(built)(job, process)
    repo.collect(job, process)
    finish = repo.step(job, "finish", timeout=60)  # a hang would be the 300 s of git's limit
    repo.upload(job)

    assert finish.code == 0, job.logs
    assert int(built.read_text()) > 100 * 1024 * 1024  # the size the file system took
    assert job.outputs["artifact-name"] == f"rio-session-{issue}" and job.artifact_id
    left = {"sub", "top.fifo", "server.sock", "huge.bin"}
    assert {item.split(":")[0] for item in finish.result["left_out"]} == left
    # The push happened, without what was left out.
    assert repo.branch_file(branch, "fix.py") == "fixed = True"
    for path in ("sub/lib.py", "top.fifo", "server.sock", "huge.bin"):
        assert repo.branch_file(branch, path) is None, path
    # The final comment is written and says it; the model is told.
    (comment,) = repo.progress_comments(issue)
    assert "left out of the branch" in comment["body"], comment["body"]
    (told,) = messages(repo.events(job), "left_out")
    assert set(told["payload"]["paths"]) == left
    assert "a FIFO" in told["payload"]["reasons"]["top.fifo"]
    assert "nested repository" in told["payload"]["reasons"]["sub"]
    assert "over the 100.0 MiB cap" in told["payload"]["reasons"]["huge.bin"]
    assert not (job.workspace / "sub" / ".git").exists()  # and finish's end removed it

    steer = gh.add_comment(issue, "go on", user="alice")
    later = repo.job("issue_comment", commented(gh, steer))
    turns = [e for e in repo.events(later) if e["kind"] == "turn_prepared"]
    assert any(told["id"] in turn["delivered"] for turn in turns), later.logs


def test_the_pull_request_says_what_is_not_on_the_branch(tmp_path: Path, gh: FakeGitHub) -> None:
    repo = Repository(tmp_path, gh, http=True)
    make = "import os; os.mkfifo('left.fifo'); open('fix.py', 'w').write('ok = 1\\n')"
    _, job = repo.labeled_issue(script([add(cmd_cell("python3", "-c", make))], [conclude()]))

    assert job.outputs["status"] == "succeeded", job.logs
    (pull,) = gh.pulls.values()
    assert "Not on the branch" in pull["body"]
    assert "left.fifo: a FIFO, which git cannot store" in pull["body"]
