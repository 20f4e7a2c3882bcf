"""GitHub Actions jobs, played for real against FakeGitHub.

A ``Repository`` is a bare git ``origin`` in ``tmp_path`` plus a FakeGitHub holding its issues,
comments, artifacts and pull requests. ``Repository.job(event)`` plays one job the way the
composite action does: a fresh clone as ``GITHUB_WORKSPACE``, a fresh ``RUNNER_TEMP``, then
``rio-ci action`` and ``rio-ci action finish`` as real subprocesses with the docs/github.md
environment, then the upload step (the artifact directory zipped into FakeGitHub). Nothing
of rio_ci is imported or patched: only its command line is run.
"""

from __future__ import annotations

import base64
import contextlib
import io
import itertools
import json
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml
from fakes.git_origin import install_push_rules
from fakes.github_api import FakeGitHub

from rio_ci.core.events import message_of
from tests.kit import CliResult, add, cli_env, note_cell, run_cli, until

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_REF = "{repo}/.github/workflows/rio.yml@refs/heads/main"


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


# --- event payloads (the fields GitHub sends that rio-ci reads, and a few it must ignore) ----


def labeled(issue: int, sender: str = "alice", label: str = "rio") -> dict[str, Any]:
    return {
        "action": "labeled",
        "label": {"name": label},
        "sender": {"login": sender},
        "issue": {"number": issue, "title": "ignored: read through the API"},
    }


def commented(gh: FakeGitHub, comment_id: int) -> dict[str, Any]:
    comment = gh.comments[comment_id]
    issue = gh.issues[comment["issue_number"]]
    return {"action": "created", "sender": comment["user"], "comment": comment, "issue": issue}


def workflow_run(
    branch: str, run_id: int, repo: str, conclusion: str = "failure"
) -> dict[str, Any]:
    return {
        "action": "completed",
        "sender": {"login": "alice"},
        "workflow_run": {
            "id": run_id,
            "name": "CI",
            "head_branch": branch,
            "conclusion": conclusion,
            "html_url": f"https://github.test/{repo}/actions/runs/{run_id}",
            "head_repository": {"full_name": repo},
        },
    }


def dispatched(issue: int) -> dict[str, Any]:
    return {"inputs": {"issue": str(issue)}, "sender": {"login": "github-actions[bot]"}}


def script(*rounds: list[dict[str, Any]]) -> str:
    """A scripted model: one patch per round, as YAML."""
    return yaml.safe_dump([list(r) for r in rounds], sort_keys=False)


WAIT = [add(note_cell("waiting for a comment"))]  # a round that leaves nothing to run


def conclude(result: str = "success") -> dict[str, Any]:
    return add(note_cell(f"conclude {result}", role="conclusion", result=result))


def resolve_unknown(text: str = "inspected the effects") -> dict[str, Any]:
    return add(
        note_cell(
            text, role="resolution", target_cell_id="$unresolved", evidence_refs=["$delivered"]
        )
    )


# --- one job ---------------------------------------------------------------------------------


@dataclass
class Step:
    """What one ``rio-ci action`` step printed and returned."""

    code: int
    stdout: str
    stderr: str

    @property
    def result(self) -> dict[str, Any]:
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        parsed: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        return parsed


@dataclass
class Job:
    number: int
    directory: Path
    workspace: Path
    runner_temp: Path
    env: dict[str, str]
    steps: list[Step] = field(default_factory=list)
    artifact_id: int | None = None

    @property
    def run(self) -> Step:
        return self.steps[0]

    @property
    def finish(self) -> Step:
        return self.steps[1]

    @property
    def outputs(self) -> dict[str, str]:
        path = Path(self.env["GITHUB_OUTPUT"])
        text = path.read_text() if path.exists() else ""
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    @property
    def summary(self) -> str:
        path = Path(self.env["GITHUB_STEP_SUMMARY"])
        return path.read_text() if path.exists() else ""

    @property
    def artifact_dir(self) -> Path:
        return self.runner_temp / "rio-artifact"

    @property
    def logs(self) -> str:
        return "\n".join(s.stdout + s.stderr for s in self.steps)


class Repository:
    """One GitHub repository: FakeGitHub for the API, a bare git repository for ``origin``."""

    def __init__(
        self,
        tmp: Path,
        gh: FakeGitHub,
        *,
        files: dict[str, str] | None = None,
        secrets: dict[str, str] | None = None,
        budget_minutes: float = 1.0,
        moving_workspace: bool = False,
        http: bool = False,
        max_file_bytes: int | None = None,
        first_job: int = 1,
    ):
        """``http``: the origin is served by ``gh`` over smart HTTP (the token decides, and
        GitHub's push refusals apply, files over ``max_file_bytes`` among them), as on
        GitHub; otherwise jobs clone and push through the file system. Jobs are numbered
        from ``first_job`` (their run id is 1000 + the number)."""
        self.tmp, self.gh = tmp, gh
        self.origin = tmp / "origin.git"
        self.workspace = tmp / "work" / gh.name
        self.secrets = secrets or {"ANTHROPIC_API_KEY": "sk-ant-test-key"}
        self.budget_minutes = budget_minutes
        self.moving_workspace = moving_workspace
        self.model = tmp / "model.yaml"
        self.model.write_text("[]\n")
        self._jobs = itertools.count(first_job)
        self._uploads = itertools.count(1)
        self.jobs: list[Job] = []
        seed = tmp / "seed"
        seed.mkdir()
        git(tmp, "init", "--quiet", "--bare", "--initial-branch=main", str(self.origin))
        git(seed, "init", "--quiet", "--initial-branch=main")
        for name, text in {"README.md": "# demo\n", **(files or {})}.items():
            (seed / name).parent.mkdir(parents=True, exist_ok=True)
            (seed / name).write_text(text)
        git(seed, "add", "--all")
        git(seed, "commit", "--quiet", "-m", "initial")
        git(seed, "push", "--quiet", str(self.origin), "main")
        self.url = str(self.origin)
        # How a step starts rio-ci: this checkout's, as a module; a test of the installed
        # command (the action's `rio-ci`) puts that here.
        self.command = [sys.executable, "-m", "rio_ci"]
        if http:
            self.url = gh.serve_git(self.origin)
            if max_file_bytes is not None:
                install_push_rules(self.origin, max_file_bytes=max_file_bytes)

    def set_script(self, text: str) -> None:
        self.model.write_text(text)

    def labeled_issue(self, model_script: str, title: str = "Fix") -> tuple[int, Job]:
        """How most stories start: the scripted model's replies, an issue labelled ``rio``,
        and the job its ``labeled`` event runs. Returns the issue's number and that job."""
        self.set_script(model_script)
        issue = self.gh.add_issue(title, labels=("rio",))
        return issue, self.job("issues", labeled(issue))

    # -- jobs ----------------------------------------------------------------------------

    def prepare(self, event_name: str, payload: dict[str, Any]) -> Job:
        number = next(self._jobs)
        directory = self.tmp / f"job{number}"
        runner_temp = directory / "runner-temp"
        runner_temp.mkdir(parents=True)
        # Like a hosted runner: the same workspace path in every job, checked out afresh.
        # A moving workspace is a runner whose work folder differs from job to job (and
        # whose earlier folders are gone).
        workspace = self.workspace
        if self.moving_workspace:
            for earlier in self.jobs:
                shutil.rmtree(earlier.workspace, ignore_errors=True)
            workspace = directory / "workspace"
        elif workspace.exists():
            shutil.rmtree(workspace)
        basic = base64.b64encode(f"x-access-token:{self.gh.token}".encode()).decode()
        git(
            self.tmp,
            "-c",
            f"http.extraheader=AUTHORIZATION: basic {basic}",
            "clone",
            "--quiet",
            self.url,
            str(workspace),
        )
        (directory / "event.json").write_text(json.dumps(payload))
        env = cli_env(**self.secrets)
        env.update(
            GITHUB_ACTIONS="true",
            GITHUB_EVENT_NAME=event_name,
            GITHUB_EVENT_PATH=str(directory / "event.json"),
            GITHUB_REPOSITORY=self.gh.repo,
            GITHUB_API_URL=self.gh.api_url,
            GITHUB_TOKEN=self.gh.token,
            GITHUB_RUN_ID=str(1000 + number),
            GITHUB_WORKSPACE=str(workspace),
            GITHUB_OUTPUT=str(directory / "output.txt"),
            GITHUB_STEP_SUMMARY=str(directory / "summary.md"),
            RUNNER_TEMP=str(runner_temp),
            GITHUB_SERVER_URL="https://github.test",
            GITHUB_REF_NAME="main",
            GITHUB_WORKFLOW_REF=WORKFLOW_REF.format(repo=self.gh.repo),
            RIO_MODEL=f"scripted:{self.model}",
            RIO_TRIGGER_LABEL="rio",
            RIO_TIME_BUDGET_MINUTES=str(self.budget_minutes),
            GITHUB_RETENTION_DAYS=str(self.gh.max_retention_days),
        )
        if int(env["GITHUB_RUN_ID"]) not in self.gh.runs:  # this job is a run of rio.yml
            self.gh.add_rio_run(int(env["GITHUB_RUN_ID"]), event=event_name)
        job = Job(number, directory, workspace, runner_temp, env)
        self.jobs.append(job)
        return job

    def start(self, job: Job, phase: str = "run") -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.command, "action", phase],
            cwd=job.workspace,
            env=job.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def step(self, job: Job, phase: str = "run", timeout: float = 90) -> Step:
        process = self.start(job, phase)
        return self.collect(job, process, timeout)

    def collect(self, job: Job, process: subprocess.Popen[str], timeout: float = 90) -> Step:
        stdout, stderr = process.communicate(timeout=timeout)
        step = Step(process.returncode, stdout, stderr)
        job.steps.append(step)
        return step

    def job(
        self,
        event_name: str,
        payload: dict[str, Any],
        *,
        interrupt: Callable[[Job, subprocess.Popen[str]], None] | None = None,
        upload: bool = True,
        finish: bool = True,
    ) -> Job:
        """Run step, then (``if: always()``) finish, then the upload step. ``interrupt``
        is called while the run step is running (to cancel or kill it). ``finish=False``:
        the runner is lost after the run step — no finish, no upload."""
        job = self.prepare(event_name, payload)
        process = self.start(job)
        if interrupt is not None:
            interrupt(job, process)
        self.collect(job, process)
        if finish:
            self.step(job, "finish")
            if upload:
                self.upload(job)
        return job

    def upload(self, job: Job) -> int | None:
        """actions/upload-artifact: zip the directory under the finish step's name."""
        name = job.outputs.get("artifact-name", "")
        if not name or not job.artifact_dir.is_dir():
            return None
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(job.artifact_dir.iterdir()):
                bundle.write(path, arcname=path.name)
        retention = job.outputs.get("retention-days", "")
        job.artifact_id = self.gh.add_artifact(
            name,
            buffer.getvalue(),
            self.next_created_at(),
            run_id=int(job.env["GITHUB_RUN_ID"]),
            retention_days=int(retention or 0) or None,
        )
        return job.artifact_id

    def prune(self, job: Job) -> Step:
        """The composite's last step, after a successful upload: ``rio-ci action prune``
        with the upload's ``artifact-id`` and the name finish chose."""
        job.env.update(
            RIO_ARTIFACT_ID=str(job.artifact_id or ""),
            RIO_ARTIFACT_NAME=job.outputs.get("artifact-name", ""),
        )
        return self.step(job, "prune")

    def next_created_at(self) -> str:
        return f"2024-05-01T10:{next(self._uploads):02d}:00Z"

    # -- reading the results ---------------------------------------------------------------

    def session_file(self, job: Job) -> Path:
        return job.artifact_dir / "session.sqlite3"

    def events(self, job: Job) -> list[dict[str, Any]]:
        """``rio-ci events`` on a copy of the job's packed Session."""
        lines: list[dict[str, Any]] = self._events(job).lines
        return lines

    def events_text(self, job: Job) -> str:
        return self._events(job).stdout

    def _events(self, job: Job) -> CliResult:
        copy = job.directory / "inspect.sqlite3"
        copy.write_bytes(self.session_file(job).read_bytes())
        done = run_cli("events", copy, env=job.env)
        assert done.returncode == 0, done.stderr
        return done

    def progress_comments(self, issue: int) -> list[dict[str, Any]]:
        return [c for c in self.gh.comments_on(issue) if "<!-- rio-ci:progress -->" in c["body"]]

    def push_branch(self, branch: str) -> str:
        """A branch on GitHub (in the origin and in the API alike) at ``main``'s commit, as
        if an earlier job had pushed it; its head commit."""
        sha = git(self.origin, "rev-parse", "main")
        git(self.origin, "update-ref", f"refs/heads/{branch}", sha)
        self.gh.set_branch(branch, sha)
        return sha

    def delete_branch(self, branch: str) -> None:
        """What GitHub's "delete branch" after a merge does to the origin."""
        git(self.origin, "update-ref", "-d", f"refs/heads/{branch}")

    def branches(self) -> list[str]:
        return git(
            self.origin, "for-each-ref", "--format=%(refname)", "refs/heads/", "refs/rio/"
        ).splitlines()

    def branch_file(self, branch: str, path: str) -> str | None:
        try:
            return git(self.origin, "show", f"{branch}:{path}")
        except subprocess.CalledProcessError:
            return None


def messages(events: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    """The Inbox messages committed in ``events`` (optionally of one kind)."""
    found = []
    payloads = {}  # a fired Timer's message carries the payload it was set with
    for event in events:
        data = event.get("data") or event
        if event["kind"] == "timer_set":
            payloads[data["id"]] = data["payload"]
        message = message_of(event["kind"], data)
        if event["kind"] == "timer_fired" and message is not None:
            message = {**message, "payload": payloads.get(data["id"])}
        if (
            message
            and event["kind"] != "control_rejected"
            and (kind is None or message["kind"] == kind)
        ):
            found.append(message)
    return found


def kill_when(path: Path, sig: signal.Signals) -> Callable[[Job, subprocess.Popen[str]], None]:
    """An ``interrupt`` that sends ``sig`` to the run step once ``path`` has a line: the
    runner cancelling (SIGTERM) or the machine dying (SIGKILL) in the middle of a script."""

    def interrupt(job: Job, process: subprocess.Popen[str]) -> None:
        until(
            lambda: path.exists() and path.read_text().count("\n") >= 1, 60, f"{path} to get a line"
        )
        process.send_signal(sig)
        # docs/cli.md: stop the Worker group, commit what is known, exit within 5 s.
        process.wait(timeout=5)

    return interrupt


def kill_tree_when(path: Path) -> Callable[[Job, subprocess.Popen[str]], None]:
    """An ``interrupt`` for a runner that vanishes: once ``path`` has a line, SIGKILL the
    run step and every process it started (the Worker's group included) at once."""

    def interrupt(job: Job, process: subprocess.Popen[str]) -> None:
        until(
            lambda: path.exists() and path.read_text().count("\n") >= 1, 60, f"{path} to get a line"
        )
        tree = psutil.Process(process.pid)
        doomed = [tree, *tree.children(recursive=True)]
        for each in doomed:
            with contextlib.suppress(psutil.NoSuchProcess):
                each.kill()
        process.wait(timeout=10)  # reaped here: psutil would take its exit status away
        psutil.wait_procs(doomed[1:], timeout=10)

    return interrupt
