"""rio-ci on the runners users have today (docs/github.md, "The runner"; docs/design.md,
"Becoming root"), each played as a runner user of the test's own (tests/runners.py):
ubuntu-24.04 (classic sudo), ubuntu-26.04 (sudo-rs, through the stand-in that implements its
documented environment policy), a self-hosted runner with passwordless sudo and one without.

Where the runner may sudo, the Owner becomes root and every Cell runs as its Cell user, with
the workflow's environment and without the Owner's credentials; where it may not, the job goes
on and says Cells share the harness's user; a sudo that loses what rio-ci hands it ends the
step at once, in one line.
"""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest
from action_job import WAIT, Job, Repository, conclude, git, labeled, script
from fakes.github_api import FakeGitHub

from tests.hostile.support import everyone_python, one_error
from tests.kit import add, cmd_cell
from tests.runners import RUNNERS, RunnerUser, secure_path
from tests.session_cli import CliSession

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write")]
WORKFLOW = "from the workflow's env:"
PASSED_TOKEN = "deploy-token-for-cells-0123456789"
MODEL_KEY = "sk-ant-never-for-cells-0123456789"


def lines_of(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"


# --- the sudo each runner has ---------------------------------------------------------------


@pytest.mark.parametrize("runner", ["ubuntu-24.04", "ubuntu-26.04"], indirect=True)
def test_each_hosted_image_sudo_gives_a_command_the_environment_its_implementation_documents(
    runner: RunnerUser, shared_place: Path
) -> None:
    """What broke ``sudo -E``: classic sudo keeps the caller's environment with it, sudo-rs
    warns, ignores it and resets the environment; ``--preserve-env=LIST`` works in both."""
    env = runner.environment(FOO="kept?", GITHUB_TOKEN="ghs_not-through-sudo-rs")

    everything = runner.run(["sudo", "-n", "-E", "env"], env, shared_place)
    listed = runner.run(["sudo", "-n", "--preserve-env=FOO,NOPE", "--", "env"], env, shared_place)
    root = runner.run(["sudo", "-n", "id", "-u"], env, shared_place)

    assert everything.returncode == listed.returncode == root.returncode == 0, everything
    assert root.stdout.strip() == "0"
    seen = dict(line.split("=", 1) for line in everything.stdout.splitlines() if "=" in line)
    assert "FOO=kept?" in listed.stdout.splitlines() and "NOPE=" not in listed.stdout
    assert seen["SUDO_USER"] == runner.name and seen["USER"] == "root"
    if runner.profile.sudo == "sudo-rs":
        warning = "sudo: preserving the entire environment is not supported, '-E' is ignored"
        assert warning in everything.stderr.splitlines()
        assert "FOO" not in seen and "GITHUB_TOKEN" not in seen and "PYTHONPATH" not in seen
        assert seen["HOME"] == "/root" and seen["PATH"] == secure_path()
    else:
        assert seen["FOO"] == "kept?" and seen["GITHUB_TOKEN"] == "ghs_not-through-sudo-rs"


# --- an Owner on each runner ----------------------------------------------------------------


def start_session(runner: RunnerUser, place: Path, env: dict[str, str]) -> CliSession:
    tree = place / "cwd"
    tree.mkdir()
    runner.give(place)
    made = runner.rio(
        "new", str(place / "s.db"), "--goal", "g", "--cwd", str(tree), "--pass-env",
        "DEPLOY_TOKEN", env=env, cwd=place,
    )  # fmt: skip
    assert made.returncode == 0, lines_of(made)
    sess = CliSession(place)
    probe = (
        'id -un; echo "workflow=$WORKFLOW_SETTING"; echo "toolcache=${RUNNER_TOOL_CACHE:-}"; '
        'echo "token=$DEPLOY_TOKEN"; echo "key=${ANTHROPIC_API_KEY:-none}"'
    )
    sess.propose(cmd_cell("sh", "-c", probe))
    return sess


@pytest.mark.parametrize("runner", RUNNERS, indirect=True)
def test_an_owner_on_each_runner_runs_its_cells_as_their_own_user_where_it_may_sudo(
    runner: RunnerUser, shared_place: Path, cell_user_name: str
) -> None:
    env = runner.environment(
        WORKFLOW_SETTING=WORKFLOW, DEPLOY_TOKEN=PASSED_TOKEN, ANTHROPIC_API_KEY=MODEL_KEY
    )
    sess = start_session(runner, shared_place, env)

    done = runner.rio(
        "work", str(sess.db), "--cell-user", cell_user_name, env=env, cwd=shared_place
    )

    assert done.returncode == 0, lines_of(done)
    text = sess.json("output", str(sess.db), "1", "--stream", "stdout")["text"]
    user, *lines = text.splitlines()
    separate = runner.profile.separates
    assert user == (cell_user_name if separate else runner.name)
    assert ("Cells share the harness's user" in done.stderr) is not separate
    assert f"workflow={WORKFLOW}" in lines  # the workflow's environment reached the Cell
    toolcache = runner.image_environment().get("RUNNER_TOOL_CACHE", "")
    assert f"toolcache={toolcache}" in lines
    assert "token=***" in lines  # the Owner got it (to pass and to redact)
    assert "key=none" in lines  # the Owner's own credential never reaches a Cell
    if separate:
        assert (sess.cwd / ".").stat().st_uid == runner.uid  # the tree handed back
    if runner.profile.sudo == "sudo-rs":
        given = runner.sudo_command_lines()
        (handing,) = [line for line in given if line[:2] == ["-n", "--"]]
        assert ["-n", "true"] in given and handing[2] == "/usr/bin/env" and "-E" not in handing
        assert not any(PASSED_TOKEN in a or MODEL_KEY in a for a in handing)


@pytest.mark.parametrize("runner", ["lost-hand-over"], indirect=True)
def test_a_sudo_that_loses_the_hand_over_ends_the_owner_in_one_line(
    runner: RunnerUser, shared_place: Path, cell_user_name: str
) -> None:
    env = runner.environment(WORKFLOW_SETTING=WORKFLOW, ANTHROPIC_API_KEY=MODEL_KEY)
    sess = start_session(runner, shared_place, env)

    done = runner.rio(
        "work", str(sess.db), "--cell-user", cell_user_name, env=env, cwd=shared_place
    )

    reason = one_error(done, 2)
    assert "through sudo-rs 0.2.13-0ubuntu1, and its environment did not come with it" in reason
    assert sess.events("execution_started") == []
    with pytest.raises(KeyError):
        pwd.getpwnam(cell_user_name)  # nothing was set up for Cells either


# --- the action's run and finish steps on each runner -----------------------------------------


def job_on(runner: RunnerUser, repo: Repository, job: Job, cell_user: str) -> dict[str, str]:
    """The job's step environment on ``runner``, its folders the runner user's."""
    runner.give(repo.tmp)
    return {**job.env, **runner.environment(RIO_CELL_USER=cell_user)}


def pushed(repo: Repository, branch: str, path: str) -> str:
    """A file on ``branch`` in the origin (which the runner user owns here)."""
    return git(repo.origin, "-c", "safe.directory=*", "show", f"{branch}:{path}")


def step(
    runner: RunnerUser, job: Job, env: dict[str, str], phase: str
) -> subprocess.CompletedProcess[str]:
    argv = [everyone_python(), "-m", "rio_ci", "action", phase]
    return runner.run(argv, env, job.workspace, timeout=180)


@pytest.mark.parametrize("runner", RUNNERS, indirect=True)
def test_the_action_on_each_runner_names_it_and_runs_the_cell_as_the_cell_user(
    runner: RunnerUser, shared_place: Path, gh: FakeGitHub, cell_user_name: str
) -> None:
    repo = Repository(shared_place, gh)
    who = 'id -un > who.txt; printf %s "$RUNNER_TOOL_CACHE" > toolcache.txt'
    repo.set_script(script([add(cmd_cell("sh", "-c", who))], [conclude()]))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    env = job_on(runner, repo, job, cell_user_name)

    run = step(runner, job, env, "run")
    finish = step(runner, job, env, "finish")

    assert run.returncode == 0 and finish.returncode == 0, (lines_of(run), lines_of(finish))
    separate = runner.profile.separates
    branch = f"rio/issue-{issue}"
    assert pushed(repo, branch, "who.txt") == (cell_user_name if separate else runner.name)
    toolcache = runner.image_environment().get("RUNNER_TOOL_CACHE", "")
    assert pushed(repo, branch, "toolcache.txt") == toolcache
    (report,) = [line for line in run.stderr.splitlines() if line.startswith("rio-ci: runner:")]
    image = runner.profile.image
    assert report.startswith(
        "rio-ci: runner: image ubuntu-" if image else "rio-ci: runner: image self-hosted"
    )
    sudo = {"sudo": "sudo classic sudo ", "sudo-rs": "sudo sudo-rs 0.2.13-0ubuntu1"}
    assert sudo.get(runner.profile.sudo or "", "sudo classic sudo ") in report
    cells = f"run as their own user, {cell_user_name}" if separate else "share the harness's user"
    assert f"Cells {cells}" in report and f"| Cells | {cells}" in job.summary
    assert "git 2." in report and "| git | 2." in job.summary
    assert ("Cells share the harness's user" in job.summary) is not separate
    assert gh.pulls, "the run succeeded with a pull request"


@pytest.mark.parametrize("runner", ["lost-hand-over"], indirect=True)
def test_the_run_step_ends_at_once_with_one_annotated_line_when_sudo_loses_the_hand_over(
    runner: RunnerUser, shared_place: Path, gh: FakeGitHub, cell_user_name: str
) -> None:
    repo = Repository(shared_place, gh)
    repo.set_script(script([add(cmd_cell("true"))], WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    env = job_on(runner, repo, job, cell_user_name)

    run = step(runner, job, env, "run")

    reason = one_error(run, 2)
    assert reason.startswith("rio-ci re-executed itself as root through sudo-rs 0.2.13-0ubuntu1")
    assert "GITHUB_EVENT_NAME, GITHUB_EVENT_PATH" in reason
    assert f"::error::rio-ci: {reason}" in run.stderr.splitlines()
    assert not (job.runner_temp / "rio").exists() and not gh.comments_on(issue)


def test_a_git_older_than_rio_ci_needs_is_refused_in_one_line(
    repo: Repository, gh: FakeGitHub, tmp_path: Path
) -> None:
    old = tmp_path / "old-git"
    old.mkdir()
    (old / "git").write_text('#!/bin/sh\necho "git version 2.30.2"\n')
    (old / "git").chmod(0o755)
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    job.env["PATH"] = f"{old}{os.pathsep}{job.env['PATH']}"

    run = repo.step(job)

    reason = one_error(subprocess.CompletedProcess([], run.code, run.stdout, run.stderr), 2)
    assert reason.startswith("git 2.30.2 on this runner: rio-ci needs git 2.36.0 or later")
    assert f"::error::rio-ci: {reason}" in run.stderr.splitlines()
    assert "| git | 2.30.2 |" in job.summary
    assert not (job.runner_temp / "rio").exists()
