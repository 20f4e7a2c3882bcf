"""What a Session costs GitHub: REST requests that count against the job token's rate limit,
and the artifact bytes it keeps, measured by running the real ``rio-ci action`` job code
(``rio_ci.github``: the run step, finish, the upload as ``actions/upload-artifact`` does
it, and the prune step that deletes superseded generations) in this process against a loopback
GitHub that counts as GitHub does (``github_api``, ``rate_limit``).

A ``Site`` is one repository: a bare git origin on disk, the counting GitHub, a scripted
model, and the jobs it has run. The figures (docs/performance.md):

- ``github_requests_label_job``: the job an issue's trigger label starts, one round (a note,
  then the Session waits for a comment);
- ``github_requests_wakeup_job``: a writer's comment wakes that Session, one round (the
  fourth job of the Session: steady state, a superseded generation to delete);
- ``github_requests_listen_10min``: a job's intake on that Session once it has a pull
  request and every comment taken in (the re-scan), then ten minutes of listening (a look
  every 30 s on an injected clock) while nothing changes;
- ``ratio_artifact_bytes_20_vs_3_jobs``: the bytes of a Session's artifacts GitHub keeps
  after 20 jobs over those after 3. A Session's own history grows with every job (a round
  is a few hundred compressed bytes of events), so the Session measured is one that worked:
  its first job ran ``WORK_ROUNDS`` rounds, each a test run printing a report of about 2 KB
  and a note on it; then 19 comments woke it for a round each.

The site works as well with the tests' fake (``tests/fakes/github``), which the tests use to
hold this fake to the same counts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import json
import shutil
import subprocess
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import yaml

from rio_ci.commands.bench.github_api import LoopbackGitHub
from rio_ci.commands.bench.rate_limit import Counted
from rio_ci.forge.base import Forge
from rio_ci.github import action, finish, job, prune
from rio_ci.github.contract import ActionInputs
from rio_ci.github.intake import take_in
from rio_ci.github.listen import Listener
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings

__all__ = ["CountingGitHub", "Site", "measure_github"]

WRITER = "alice"
JOBS_FOR_BYTES = (3, 20)
WAKEUP_JOB = 4  # the label job, two wake-ups, then the one measured
LISTEN_SECONDS = 600
NOTE = [{"op": "add", "path": "/cells/-", "value": {"kind": "note", "text": "waiting"}}]
WAIT = [{"op": "replace", "path": "/cells/0", "value": {"kind": "note", "text": "waiting"}}]
WORK_ROUNDS = 24


def work_round(n: int) -> list[dict[str, Any]]:
    """A round of real work: a test run printing a report of about 2 KB (its timings and
    ids differ from run to run, as a real one's do) and a note on what it showed."""
    report = "".join(
        f"tests/test_module_{n}.py::test_case_{i:03d} PASSED in "
        f"{(i * n * 7919) % 997 / 1000:.3f}s [{(i * n * 104729) % 1000003:x}]\n"
        for i in range(30)
    )
    note = f"round {n}: ran the tests; module {n} still fails on the empty input. " * 3
    return [
        {
            "op": "add",
            "path": "/cells/-",
            "value": {"kind": "cmd", "argv": ["python3", "-c", f"print({report!r})"]},
        },
        {"op": "add", "path": "/cells/-", "value": {"kind": "note", "text": note}},
    ]


class CountingGitHub(Protocol):
    """What a site needs of a loopback GitHub (the bench's and the tests' fakes both are)."""

    repo: str
    token: str
    api_url: str
    artifacts: dict[int, Any]
    comments: dict[int, Any]
    issues: dict[int, Any]
    branches: dict[str, str]

    @property
    def counted(self) -> list[Counted]: ...

    def add_user(self, login: str, role: str | None) -> None: ...

    def add_issue(
        self, title: str, body: str = "", user: str = "alice", labels: Any = ()
    ) -> int: ...

    def add_comment(self, number: int, body: str, user: str = "alice") -> int: ...

    def add_rio_run(self, run_id: int, event: str = "workflow_dispatch") -> int: ...

    def add_artifact(
        self, name: str, zip_bytes: bytes, created_at: str = ..., *, run_id: int = ...
    ) -> int: ...


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


class Site:
    """One repository on ``github``: its origin under ``root`` and the jobs run so far."""

    def __init__(
        self,
        root: Path,
        github: CountingGitHub,
        *,
        files: dict[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``files``: the repository's files besides a README (``.github/rio.yml``, say);
        ``sleep``: how the jobs wait out rate limits."""
        self.root, self.github, self.sleep = root, github, sleep
        self.origin = root / "origin.git"
        self.model = root / "model.yaml"
        self.jobs = itertools.count(1)
        self.uploads = itertools.count(1)
        self.logs: list[str] = []
        self.results: list[dict[str, Any]] = []
        self.envs: list[ActionInputs] = []
        seed = root / "seed"
        seed.mkdir(parents=True)
        git(root, "init", "--quiet", "--bare", "--initial-branch=main", str(self.origin))
        git(seed, "init", "--quiet", "--initial-branch=main")
        for name, text in {"README.md": "# bench\n", **(files or {})}.items():
            (seed / name).parent.mkdir(parents=True, exist_ok=True)
            (seed / name).write_text(text)
        git(seed, "add", "--all")
        git(seed, "commit", "--quiet", "-m", "initial")
        git(seed, "push", "--quiet", str(self.origin), "main")
        github.add_user(WRITER, "write")
        self.script([NOTE] * 8)

    def script(self, rounds: list[list[dict[str, Any]]]) -> None:
        """The scripted model's replies, one per round of a Session (its k-th Turn)."""
        self.model.write_text(yaml.safe_dump(rounds))

    def action_env(self, event_name: str, payload: dict[str, Any]) -> ActionInputs:
        """The next job's environment, as the runner gives it to the steps (docs/github.md,
        the environment contract): a fresh runner temp, a fresh clone at the same path (as
        on a hosted runner), the event, a run of rio.yml."""
        number = next(self.jobs)
        directory = self.root / f"job{number}"
        (directory / "temp").mkdir(parents=True)
        workspace = self.root / "work" / "bench"
        shutil.rmtree(workspace, ignore_errors=True)
        git(self.root, "clone", "--quiet", str(self.origin), str(workspace))
        (directory / "event.json").write_text(json.dumps(payload))
        run_id = 1000 + number
        self.github.add_rio_run(run_id, event=event_name)
        repo = self.github.repo
        return ActionInputs(
            event_name=event_name,
            event_path=directory / "event.json",
            repository=repo,
            api_url=self.github.api_url,
            token=self.github.token,
            run_id=str(run_id),
            workspace=workspace,
            output=directory / "output.txt",
            summary=None,
            runner_temp=directory / "temp",
            model=f"scripted:{self.model}",
            effort="high",
            price=None,
            fallback_model=None,
            trigger_label="rio",
            config=".github/rio.yml",
            budget_minutes=5.0,
            server_url="https://github.test",
            workflow_ref=f"{repo}/.github/workflows/rio.yml@refs/heads/main",
            ref_name="main",
            runner_retention_days=90,
            repository_id=1,
        )

    def job(self, event_name: str, payload: dict[str, Any]) -> list[Counted]:
        """One job as the composite action runs it; the requests it made that counted. Each
        step's result is appended to ``results`` (``{"step": ..., **result}``), the job's
        environment to ``envs``."""
        before = len(self.github.counted)
        env = self.action_env(event_name, payload)
        self.envs.append(env)
        with self.quiet():
            # The listener's clock stands still: a job's looks are measured apart (``listen``),
            # so a slow machine cannot add one to a job's count.
            ran = job.run(env, self.forge(env, "run"), clock=lambda: 0.0)
            self.results.append({"step": "run", **ran})
            if (env.state_dir / "job.json").exists():
                done = finish.finish(env, lambda: self.forge(env, "finish"))
                self.results.append({"step": "finish", **done})
                uploaded = self.upload(env)
                if uploaded is not None:  # the composite's step after a successful upload
                    named = dataclasses.replace(
                        env, artifact_id=uploaded, artifact_name=self.uploaded_name(env)
                    )
                    pruned = prune.prune(named, self.forge(named, "prune"))
                    self.results.append({"step": "prune", **pruned})
        return self.github.counted[before:]

    def forge(self, env: ActionInputs, phase: str) -> Forge:
        return action.step_forge(env, phase, sleep=self.sleep)

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """The job's log lines (and the live log) go to ``logs``, not the bench's output."""
        stream = io.StringIO()
        try:
            with contextlib.redirect_stderr(stream):
                yield
        finally:
            self.logs.append(stream.getvalue())

    @staticmethod
    def uploaded_name(env: ActionInputs) -> str:
        """The ``artifact-name`` the finish step wrote to its outputs (its last value)."""
        lines = (env.output or Path()).read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line).get("artifact-name", "")

    def upload(self, env: ActionInputs) -> int | None:
        """``actions/upload-artifact``: the artifact directory, zipped, under the name the
        finish step wrote to its outputs; the artifact's id."""
        name = self.uploaded_name(env)
        if not name or not env.artifact_dir.is_dir():
            return None
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as bundle:
            for path in sorted(env.artifact_dir.iterdir()):
                bundle.write(path, arcname=path.name)
        created = f"2024-05-01T{next(self.uploads) // 60:02d}:{next(self.uploads) % 60:02d}:00Z"
        return self.github.add_artifact(name, buffer.getvalue(), created, run_id=int(env.run_id))

    # -- the events ---------------------------------------------------------------------------

    def label(self, title: str = "Fix the parser") -> tuple[int, list[Counted]]:
        issue = self.github.add_issue(title, "It fails on empty input.", WRITER, ("rio",))
        payload = {
            "action": "labeled",
            "label": {"name": "rio"},
            "sender": {"login": WRITER},
            "issue": {"number": issue},
        }
        return issue, self.job("issues", payload)

    def comment(self, issue: int, body: str) -> list[Counted]:
        made = self.github.add_comment(issue, body, user=WRITER)
        payload = {
            "action": "created",
            "sender": {"login": WRITER},
            "comment": self.github.comments[made],
            "issue": self.github.issues[issue],
        }
        return self.job("issue_comment", payload)

    def push_branch(self, branch: str) -> str:
        """``branch`` on GitHub (the origin's and the API's) at ``main``'s commit; its head."""
        sha = git(self.origin, "rev-parse", "main")
        git(self.origin, "update-ref", f"refs/heads/{branch}", sha)
        self.github.branches[branch] = sha
        return sha

    def kept_bytes(self, issue: int) -> int:
        """The bytes of the Session's artifacts GitHub keeps now."""
        name = f"rio-session-{issue}"
        return sum(
            int(a["size_in_bytes"])
            for a in self.github.artifacts.values()
            if a["name"] == name and not a["expired"]
        )


def listen(
    site: Site, issue: int, pull: int, head: str, seconds: float = LISTEN_SECONDS
) -> list[Counted]:
    """A job's intake on the Session of ``issue`` with its pull request ``pull`` from the
    branch at ``head`` (what the run step does before its rounds: the listener's clock
    started, then the re-scan), then the listener called every second of an injected clock
    for ``seconds``, nothing changing."""
    env = site.action_env("workflow_dispatch", {})
    db = site.root / "listen.sqlite3"
    taken = max(
        (c for c, v in site.github.comments.items() if v["issue_number"] == issue), default=0
    )
    _session_with_pull(db, env, pull, {f"comments:{issue}": taken})
    now = [0.0]
    before = len(site.github.counted)
    owner = Owner(str(db))
    forge = site.forge(env, "run")
    try:
        with site.quiet():
            listener = Listener(owner, forge, issue, clock=lambda: now[0], head=head)
            listener.prime()
            take_in(owner, forge, issue, head=head)
            while now[0] < seconds:
                now[0] += 1.0
                listener()
    finally:
        owner.close()
    return site.github.counted[before:]


def _session_with_pull(db: Path, env: ActionInputs, pull: int, marks: dict[str, Any]) -> None:
    """The listening job's Session: its pull request, and the comments it has taken in."""
    session = Session.create(db, "goal", Settings(cwd=str(env.workspace)))
    try:
        for name, value in {"pull_request": pull, **marks}.items():
            session.set_watermark(name, value)
    finally:
        session.close()


def measure_github(
    root: Path, quick: bool, make: Callable[[], Any] = LoopbackGitHub
) -> dict[str, Any]:
    """The figures of the module docstring, each from jobs run in this call: one Session's
    label job, three wake-ups and its listening; then another Session's 20 jobs."""
    with make() as github:
        site = Site(root / "github", github)
        issue, label = site.label()
        counted = {1: label}
        for number in range(2, WAKEUP_JOB + 1):
            counted[number] = site.comment(issue, f"also handle case {number}")
        head = site.push_branch(f"rio/issue-{issue}")
        pull = github.add_pull(f"rio/issue-{issue}", "Fix the parser")
        listened = listen(site, issue, pull, head)
        site.script([work_round(n) for n in range(1, WORK_ROUNDS + 1)] + [WAIT] * 32)
        worked, _ = site.label("Make the parser accept empty input")
        kept = {}
        for number in range(2, max(JOBS_FOR_BYTES) + 1):
            site.comment(worked, f"and case {number}")
            if number in JOBS_FOR_BYTES:
                kept[number] = site.kept_bytes(worked)
    three, twenty = (kept[n] for n in JOBS_FOR_BYTES)
    return {
        "github_requests_label_job": len(label),
        "github_requests_wakeup_job": len(counted[WAKEUP_JOB]),
        "github_requests_listen_10min": len(listened),
        "artifact_bytes_3_jobs": three,
        "artifact_bytes_20_jobs": twenty,
        "ratio_artifact_bytes_20_vs_3_jobs": round(twenty / three, 3),
    }
