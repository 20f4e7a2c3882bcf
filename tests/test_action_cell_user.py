"""``rio-ci action`` as root with the action's ``cell-user`` (``RIO_CELL_USER=rio-cell``, the
composite's default): the Cell runs as ``rio-cell`` and cannot write rio-ci's install, the
Session file or the job's records, nor read the Owner's environment; the working tree it
wrote is handed back, so finish's git checkpoints it (docs/github.md, docs/design.md)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from action_job import WAIT, Repository, add, cmd_cell, labeled, script
from fakes.github_api import FakeGitHub

import rio_ci
from tests.hostile.support import NOBODY, shared_folder, unprivileged_command, unprivileged_env
from tests.kit import cli_env

pytestmark = [
    pytest.mark.people(alice="write"),
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("useradd"),
        reason="the Cell user needs rio-ci to be root on Linux (as in CI)",
    ),
]


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder every user may enter (tmp_path's parents are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="rio-cell-action-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_under_the_action_the_cell_runs_as_rio_cell_and_reaches_only_the_tree(
    place: Path, gh: FakeGitHub
) -> None:
    repo = Repository(place, gh)
    package = Path(rio_ci.__file__).parent
    probe = f"""
        id -un
        echo cell-was-here > cell-was-here.txt && echo tree=written
        state="$RUNNER_TEMP/rio"
        (echo x >> "$state/job.json") 2>/dev/null && echo record=written || echo record=refused
        (echo x >> "$state/session.sqlite3") 2>/dev/null && echo session=written \
            || echo session=refused
        touch {package}/planted.pth 2>/dev/null && echo install=written || echo install=refused
        mkdir "$RUNNER_TEMP/rio-artifact-planted" 2>/dev/null && echo temp=written \
            || echo temp=refused
        cat /proc/$PPID/environ > /dev/null 2>&1 && echo environ=read || echo environ=refused
        if command -v sudo > /dev/null; then
            sudo -n true > /dev/null 2>&1 && echo sudo=root || echo sudo=refused
        else
            echo sudo=absent
        fi
        python3 -c "from rio_ci.api import records; print('api', len(records()) > 0)"
    """
    repo.set_script(script([add(cmd_cell("sh", "-c", probe))], WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    job.env["RIO_CELL_USER"] = "rio-cell"

    run = repo.collect(job, repo.start(job))
    finish = repo.step(job, "finish")

    assert run.code == 0 and finish.code == 0, (run.stderr, finish.stderr)
    text = "".join(
        e["text"]
        for e in repo.events(job)
        if e["kind"] == "output" and e["cell_id"] == 1 and e["stream"] == "stdout" and "text" in e
    )
    lines = text.split()
    assert lines[0] == "rio-cell"
    for seen in (
        "tree=written",
        "record=refused",
        "session=refused",
        "install=refused",
        "temp=refused",  # the artifact directory cannot be planted or replaced
    ):
        assert seen in lines, (seen, lines)
    assert "environ=refused" in lines
    # sudo fails for the Cell (.ci/install-fiu installs it, so it is tried in CI)
    assert "sudo=refused" in lines or (shutil.which("sudo") is None and "sudo=absent" in lines)
    assert "api" in lines and lines[lines.index("api") + 1] == "True"  # rio_ci.api works
    assert not (package / "planted.pth").exists()
    modes = [e for e in repo.events(job) if e["kind"] == "cell_user"]
    assert modes and modes[-1]["mode"] == "separate" and modes[-1]["user"] == "rio-cell"
    assert modes[-1]["uid"] == pwd.getpwnam("rio-cell").pw_uid
    # handed back before finish's git: the file the Cell wrote is on the Session's branch
    assert (job.workspace / "cell-was-here.txt").stat().st_uid == 0
    assert repo.branch_file(f"rio/issue-{issue}", "cell-was-here.txt") == "cell-was-here"


def test_where_no_cell_user_is_possible_the_job_goes_on_and_says_so(gh: FakeGitHub) -> None:
    """The run step as a user who is not root and has no sudo (a self-hosted runner): the
    Cell runs as that user, and the log and the step summary say Cells share its user."""
    with shared_folder() as place:
        repo = Repository(place, gh)
        repo.set_script(script([add(cmd_cell("id", "-u"))], WAIT))
        issue = gh.add_issue("Fix", labels=("rio",))
        job = repo.prepare("issues", labeled(issue))
        job.env.update(unprivileged_env(), RIO_CELL_USER="rio-cell")
        for folder, dirs, files in os.walk(place):
            for name in [".", *dirs, *files]:
                os.lchown(os.path.join(folder, name), NOBODY, NOBODY)
        prefix, python = unprivileged_command()

        run = subprocess.run(
            [*prefix, python, "-m", "rio_ci.cli", "action"],
            cwd=job.workspace,
            env=job.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

        assert run.returncode == 0, run.stderr
        assert "Cells share the harness's user" in run.stderr
        assert "Cells share the harness's user" in job.summary
        events = subprocess.run(
            [
                sys.executable,
                "-m",
                "rio_ci.cli",
                "events",
                str(job.runner_temp / "rio" / "session.sqlite3"),
            ],
            env=cli_env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        modes = [json.loads(line) for line in events.splitlines() if '"cell_user"' in line]
        assert [m["mode"] for m in modes] == ["shared"]
        outputs = [json.loads(line) for line in events.splitlines() if '"kind": "output"' in line]
        assert any(o.get("text", "").strip() == str(NOBODY) for o in outputs)
