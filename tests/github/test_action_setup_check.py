"""The set-up check (docs/github.md, "Checking the set-up"): ``rio.yml`` dispatched with
``check`` as its issue (or ``rio-ci action check``) reports every misconfiguration with what to
fix, in the step summary and the log, and fails the job; a sound set-up passes. Each case
below breaks one thing of a sound repository — its files, FakeGitHub's settings, the Models
API fake's — and expects that one problem."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from action_job import Repository, git
from fakes.github_api import FakeGitHub

from rio_ci.github.action import github_forge
from rio_ci.github.contract import ActionInputs
from rio_ci.github.setup_check import check_setup
from tests.fakes.anthropic_api import FakeAnthropic
from tests.kit import ROOT

pytestmark = pytest.mark.people(alice="write")

WORKFLOWS = ROOT / ".github" / "workflows"
KEY = "sk-ant-test-key"
CHECK = {"inputs": {"issue": "check"}, "sender": {"login": "alice"}}
STOCK_ACTIONS = "      actions: write         # list, download and delete Session artifacts"
READ_ACTIONS = "      actions: read"


def sound_files() -> dict[str, str]:
    """rio.yml (its rio job allowed to dispatch CI and delete artifacts), rio-sweep.yml, a
    CI workflow named CI that accepts workflow_dispatch, and a configuration naming it."""
    rio = (WORKFLOWS / "rio.yml").read_text()
    assert STOCK_ACTIONS in rio
    return {
        ".github/workflows/rio.yml": rio,
        ".github/workflows/rio-sweep.yml": (WORKFLOWS / "rio-sweep.yml").read_text(),
        ".github/workflows/ci.yml": (WORKFLOWS / "ci.yml").read_text(),
        ".github/rio.yml": "validators: ['python3 -m pytest -q']\nci_workflow: ci.yml\n",
    }


def sound_github(gh: FakeGitHub) -> None:
    gh.add_repo_label("rio")
    gh.add_workflow("rio.yml", name="rio")
    gh.add_workflow("rio-sweep.yml", "disabled_manually", name="rio-sweep")
    gh.add_workflow("ci.yml", name="CI")


Breakage = Callable[[dict[str, str], FakeGitHub, FakeAnthropic, dict[str, str]], None]


def edit(path: str, old: str, new: str) -> Breakage:
    def apply(files: dict[str, str], *_: object) -> None:
        assert old in files[path], (path, old)
        files[path] = files[path].replace(old, new)

    return apply


def drop_workflow(name: str) -> Breakage:
    def apply(files: dict[str, str], gh: FakeGitHub, *_: object) -> None:
        del gh.workflows[name]

    return apply


CASES: dict[str, tuple[Breakage, str, str]] = {  # breakage, what is found, what to fix
    "no model key": (
        lambda f, gh, model, env: env.update(ANTHROPIC_API_KEY=""),
        "no key: anthropic-api-key is empty",
        "add the repository secret ANTHROPIC_API_KEY",
    ),
    "a key the provider refuses": (
        lambda f, gh, model, env: setattr(model, "keys", {"sk-ant-another"}),
        "the Claude API refused the key (HTTP 401: invalid x-api-key)",
        "set the secret ANTHROPIC_API_KEY to a key of the Claude Console",
    ),
    "a model the provider does not know": (
        lambda f, gh, model, env: setattr(model, "models", {"claude-opus-5-5"}),
        "the Claude API does not know the model claude-sonnet-5-5",
        "set the action's model input to a model of docs/models.md",
    ),
    "a token that may not read issues": (
        lambda f, gh, model, env: setattr(
            gh.tokens[gh.token],
            "permissions",
            {"contents": "write", "pull-requests": "write", "actions": "write", "checks": "read"},
        ),
        "GET /issues: HTTP 403 (GitHub: it needs issues=read)",
        "add `issues: write` under the rio job's `permissions:`",
    ),
    "the rio job's declared permissions lack a write": (
        edit(
            ".github/workflows/rio.yml",
            "      pull-requests: write   #",
            "      pull-requests: read   #",
        ),
        "it lacks pull-requests: write",
        "add `pull-requests: write` under its `permissions:`",
    ),
    "ci_workflow with actions: read": (
        edit(".github/workflows/rio.yml", STOCK_ACTIONS, READ_ACTIONS),
        "it lacks actions: write",
        "add `actions: write` under its `permissions:`",
    ),
    "actions may not open pull requests": (
        lambda f, gh, model, env: setattr(gh, "actions_open_pulls", False),
        "off: the job token cannot open a pull request",
        "allow GitHub Actions to create and approve pull requests",
    ),
    "no trigger label": (
        lambda f, gh, model, env: gh.labels.clear(),
        "GET /labels/rio: HTTP 404",
        "create the label rio (Issues → Labels)",
    ),
    "workflow_run names no workflow of the repository": (
        edit(".github/workflows/rio.yml", "workflows: [CI]", "workflows: [Tests]"),
        "no workflow is named 'Tests' (this repository has: CI, rio, rio-sweep)",
        "name your CI workflow's `name:` under workflow_run",
    ),
    "no sweep": (
        drop_workflow("rio-sweep.yml"),
        "not installed: a Timer fires only at its Session's next event",
        "copy .github/workflows/rio-sweep.yml beside rio.yml",
    ),
    "nothing switches the sweep on": (
        edit(".github/workflows/rio.yml", "    types: [rio-timer]", "    types: [other]"),
        "rio.yml does not answer repository_dispatch rio-timer",
        "copy rio.yml's sweep-wake job and its repository_dispatch trigger",
    ),
    "the sweep resumes another workflow": (
        edit(".github/workflows/rio-sweep.yml", "WORKFLOW: rio.yml ", "WORKFLOW: rio-app.yml "),
        "rio-sweep.yml dispatches rio-app.yml",
        "set `WORKFLOW: rio.yml` in rio-sweep.yml",
    ),
    "a configuration that does not parse": (
        edit(".github/rio.yml", "ci_workflow: ci.yml", "ci_workflow: [ci.yml"),
        ".github/rio.yml: cannot read the configuration",
        "correct .github/rio.yml",
    ),
    "ci_workflow without workflow_dispatch": (
        edit(".github/workflows/ci.yml", "  workflow_dispatch:\n", ""),
        "ci.yml has no workflow_dispatch trigger: GitHub refuses to dispatch it",
        "add `workflow_dispatch:` under the `on:` of .github/workflows/ci.yml",
    ),
    "ci_workflow naming no workflow": (
        edit(".github/rio.yml", "ci_workflow: ci.yml", "ci_workflow: tests.yml"),
        "this repository has no workflow .github/workflows/tests.yml",
        "fix ci_workflow in .github/rio.yml",
    ),
}


@pytest.fixture
def model() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as fake:
        fake.keys = {KEY}
        yield fake


def checked(
    tmp_path: Path,
    gh: FakeGitHub,
    model: FakeAnthropic,
    breakage: Breakage | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    """The check's run step in a repository set up soundly, then broken by ``breakage``:
    (exit status, log, step summary). With ``monkeypatch`` the check runs in this process
    (the cases below: one problem each), without as the job's ``rio-ci action`` step."""
    files, env = sound_files(), {"ANTHROPIC_API_KEY": KEY}
    sound_github(gh)
    if breakage is not None:
        breakage(files, gh, model, env)
    repo = Repository(tmp_path, gh, files=files, secrets=env)
    gh.set_branch("main", git(repo.origin, "rev-parse", "main"))
    job = repo.prepare("workflow_dispatch", CHECK)
    job.env.update(
        GITHUB_JOB="rio",
        RIO_MODEL="anthropic:claude-sonnet-5-5",
        ANTHROPIC_BASE_URL=model.base_url,
    )
    if monkeypatch is None:
        step = repo.step(job)
        return step.code, step.stdout + step.stderr, job.summary
    # In this process: what the command's ``check`` phase calls, with the job's environment.
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        if name in job.env:
            monkeypatch.setenv(name, job.env[name])
        else:
            monkeypatch.delenv(name, raising=False)
    inputs = ActionInputs.from_environ(job.env)
    with contextlib.redirect_stderr(io.StringIO()) as logs:
        result = check_setup(inputs, lambda: github_forge(inputs))
    return int(result["status"] == "error"), logs.getvalue(), job.summary


def test_a_sound_set_up_passes_and_the_job_writes_nothing(
    tmp_path: Path, gh: FakeGitHub, model: FakeAnthropic
) -> None:
    code, logs, summary = checked(tmp_path, gh, model)
    assert code == 0, logs
    assert "### rio-ci set-up check: no problem found" in summary
    assert "❌" not in summary and "::error::" not in logs
    for row in (
        "the model key",
        "the token reads issues",
        "the trigger label rio",
        "CI on the agent's branch",
    ):
        assert f"| ✅ | {row}" in summary, row
    assert [r.path for r in model.requests] == ["/v1/models/claude-sonnet-5-5"]
    writes = [r for r in gh.requests if r.method != "GET"]
    assert writes == [] and gh.comments == {} and gh.artifacts == {}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_misconfiguration_is_a_problem_with_what_to_fix(
    tmp_path: Path, gh: FakeGitHub, model: FakeAnthropic, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    breakage, found, fix = CASES[case]

    code, logs, summary = checked(tmp_path, gh, model, breakage, monkeypatch)

    assert code == 1, logs
    assert "### rio-ci set-up check: 1 problem(s) to fix" in summary, summary
    (row,) = [line for line in summary.splitlines() if line.startswith("| ❌ |")]
    assert found in row and fix in row, row
    (error,) = [line for line in logs.splitlines() if line.startswith("::error::rio-ci check:")]
    assert found in error and fix in error


def test_actions_read_without_ci_workflow_is_a_warning_that_storage_grows(
    tmp_path: Path, gh: FakeGitHub, model: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    def breakage(files: dict[str, str], *_: object) -> None:
        edit(".github/workflows/rio.yml", STOCK_ACTIONS, READ_ACTIONS)(files)
        files[".github/rio.yml"] = "validators: ['python3 -m pytest -q']\n"

    code, logs, summary = checked(tmp_path, gh, model, breakage, monkeypatch)

    assert code == 0, logs
    (row,) = [line for line in summary.splitlines() if "the rio job's permissions" in line]
    assert row.startswith("| ⚠️ |") and "superseded Session artifacts are not deleted" in row
    assert "give the rio job `actions: write`" in row


def test_the_check_is_also_a_phase_of_the_command(
    tmp_path: Path, gh: FakeGitHub, model: FakeAnthropic
) -> None:
    """``rio-ci action check`` runs it whatever the event; without the workflow's file in
    the checkout, what only that file says is a warning, and the rest is checked."""
    sound_github(gh)
    files = sound_files()
    del files[".github/workflows/rio.yml"]
    repo = Repository(tmp_path, gh, files=files, secrets={"ANTHROPIC_API_KEY": KEY})
    gh.set_branch("main", git(repo.origin, "rev-parse", "main"))
    job = repo.prepare("push", {})
    job.env.update(RIO_MODEL="anthropic:claude-sonnet-5-5", ANTHROPIC_BASE_URL=model.base_url)
    step = repo.step(job, "check")
    assert step.code == 0 and step.result["status"] == "checked", step.stderr
    assert ".github/workflows/rio.yml is not in the checkout" in job.summary
    assert "❌" not in job.summary
    assert "| ✅ | the model key" in job.summary
    assert "| ✅ | the trigger label rio | exists |" in job.summary
