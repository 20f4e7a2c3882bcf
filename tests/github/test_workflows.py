"""action.yml and the workflows in .github/workflows/: the docs/github.md contract read off the
YAML itself (inputs, outputs, environment mapping, triggers, concurrency, permissions), plus
the rules that keep untrusted text out of shell: no ``${{ }}`` inside any ``run:``; and the
hygiene of docs/github.md: every ``uses:`` pinned to a commit, only the sweep jobs may change
workflows, the README's workflow filters as the full example's, zizmor clean."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rio_ci.github import contract as action_contract
from rio_ci.model.providers import PROVIDERS

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"
INPUTS = {  # input → (environment variable, default)
    "anthropic-api-key": ("ANTHROPIC_API_KEY", ""),
    "github-token": ("GITHUB_TOKEN", "${{ github.token }}"),
    "model": ("RIO_MODEL", ""),  # empty: rio-ci's one default model (rio_ci/model)
    "effort": ("RIO_EFFORT", ""),
    "price": ("RIO_PRICE", ""),
    "fallback-model": ("RIO_FALLBACK_MODEL", ""),
    "trigger-label": ("RIO_TRIGGER_LABEL", action_contract.DEFAULT_LABEL),
    "assignee-trigger": ("RIO_ASSIGNEE_TRIGGER", ""),
    "config": ("RIO_CONFIG", action_contract.DEFAULT_CONFIG),
    "time-budget-minutes": (
        "RIO_TIME_BUDGET_MINUTES",
        f"{action_contract.DEFAULT_BUDGET_MINUTES:g}",
    ),
    "cell-user": ("RIO_CELL_USER", action_contract.ACTION_CELL_USER),
}
OUTPUTS = {"status", "session", "next-wake", "pull-request", "artifact-name"}
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
ZIZMOR = shutil.which(
    "zizmor", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
)
ACTIONLINT = shutil.which(
    "actionlint", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
)
# The one message an actionlint whose schema predates `queue` (rhysd/actionlint 1.7.12 and
# older) gives for it; docs/design.md "queue: max and actionlint".
OLD_SCHEMA = re.compile(r'unexpected key "queue" for "concurrency" section')


def expression(text: str) -> str:
    return "${{ " + text + " }}"


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


@pytest.fixture(scope="module")
def action() -> dict[str, Any]:
    return load(ROOT / "action.yml")


@pytest.fixture(scope="module")
def rio() -> dict[str, Any]:
    return load(WORKFLOWS / "rio.yml")


def steps_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    if "runs" in document:
        steps: list[dict[str, Any]] = document["runs"]["steps"]
        return steps
    return [s for job in document["jobs"].values() for s in job.get("steps", [])]


def step(document: dict[str, Any], step_id: str) -> dict[str, Any]:
    (found,) = [s for s in steps_of(document) if s.get("id") == step_id]
    return found


# --- action.yml ------------------------------------------------------------------------------


def test_the_action_is_composite_with_the_inputs_and_defaults_of_the_contract(
    action: dict[str, Any],
) -> None:
    assert action["runs"]["using"] == "composite"
    assert set(action["inputs"]) == set(INPUTS)
    for name, (_, default) in INPUTS.items():
        assert str(action["inputs"][name]["default"]) == default, name
        assert action["inputs"][name]["description"]
    assert set(action["outputs"]) == OUTPUTS
    for name, output in action["outputs"].items():
        finish, run = f"steps.finish.outputs.{name}", f"steps.run.outputs.{name}"
        assert output["value"] in (expression(finish), expression(f"{finish} || {run}"))


def test_each_providers_key_input_reaches_the_run_step_only(action: dict[str, Any]) -> None:
    """A row of the providers table with an action input: the input exists, and its key
    variable is passed to the run step, never to finish (which never calls a model)."""
    keyed = [row for row in PROVIDERS if row.action_input is not None]
    assert keyed, "the Claude row names the action's anthropic-api-key input"
    for row in keyed:
        assert row.action_input in action["inputs"]
        assert action["inputs"][row.action_input]["default"] == ""
        variable = row.credentials[0]
        assert step(action, "run")["env"][variable] == expression(f"inputs.{row.action_input}")
        assert variable not in step(action, "finish")["env"]


def test_each_input_reaches_rio_ci_through_the_environment_only(action: dict[str, Any]) -> None:
    run = step(action, "run")
    assert run["run"] == 'exec "$RUNNER_TEMP/rio-ci-venv/bin/rio-ci" action'
    for name, (variable, _) in INPUTS.items():
        assert run["env"][variable] == expression(f"inputs.{name}")
    finish = step(action, "finish")
    assert finish["if"] == "always()"
    assert 'exec "$RUNNER_TEMP/rio-ci-venv/bin/rio-ci" action finish' in finish["run"]
    assert "ANTHROPIC_API_KEY" not in finish["env"]  # finish never calls the model
    assert finish["env"]["GITHUB_TOKEN"] == "${{ inputs.github-token }}"
    # finish stops the Cell user's processes and hands the working tree back
    assert finish["env"]["RIO_CELL_USER"] == "${{ inputs.cell-user }}"


def test_rio_ci_is_installed_from_the_actions_own_path_beside_the_workflows_python(
    action: dict[str, Any],
) -> None:
    python = step(action, "python")
    assert python["uses"].startswith("actions/setup-python@")
    assert python["with"]["update-environment"] is False
    (install,) = [s for s in steps_of(action) if "pip install" in s.get("run", "")]
    assert install["env"]["RIO_ACTION_PATH"] == "${{ github.action_path }}"
    assert '"$RIO_ACTION_PATH"' in install["run"]


def test_the_session_is_uploaded_under_the_name_finish_chose_even_after_a_failure(
    action: dict[str, Any],
) -> None:
    (upload,) = [
        s for s in steps_of(action) if str(s.get("uses", "")).startswith("actions/upload-artifact")
    ]
    assert upload["if"] == "always() && steps.finish.outputs.artifact-name != ''"
    assert upload["with"]["name"] == "${{ steps.finish.outputs.artifact-name }}"
    # finish chooses the retention that outlives the latest Timer (empty: the default)
    assert upload["with"]["retention-days"] == "${{ steps.finish.outputs.retention-days }}"
    assert upload["with"]["path"] == "${{ runner.temp }}/rio-artifact/"
    # then, only once the upload succeeded, the superseded generations are deleted
    prune = steps_of(action)[-1]
    assert steps_of(action)[-2] is upload and upload["id"] == "upload"
    assert prune["if"] == "always() && steps.upload.outcome == 'success'"
    assert prune["run"] == 'exec "$RUNNER_TEMP/rio-ci-venv/bin/rio-ci" action prune'
    assert prune["env"] == {
        # as root, like finish, when Cells ran as their own user: the job's records are root's
        "RIO_CELL_USER": "${{ inputs.cell-user }}",
        "GITHUB_TOKEN": "${{ inputs.github-token }}",
        "RIO_ARTIFACT_ID": "${{ steps.upload.outputs.artifact-id }}",
        "RIO_ARTIFACT_NAME": "${{ steps.finish.outputs.artifact-name }}",
    }


# --- the example workflow --------------------------------------------------------------------


def test_the_workflow_has_every_trigger_of_the_contract_and_no_pull_request_target(
    rio: dict[str, Any],
) -> None:
    on = rio["on"]
    assert on["issues"]["types"] == ["labeled", "assigned"]
    assert on["issue_comment"]["types"] == ["created"]
    assert on["pull_request_review"]["types"] == ["submitted"]
    assert on["pull_request_review_comment"]["types"] == ["created"]
    assert on["workflow_run"]["types"] == ["completed"] and on["workflow_run"]["workflows"]
    assert "schedule" not in on  # the sweep is its own workflow, off while nothing waits
    assert load(WORKFLOWS / "rio-sweep.yml")["on"]["schedule"][0]["cron"]
    assert on["workflow_dispatch"]["inputs"]["issue"]["required"] is True
    assert "or check" in on["workflow_dispatch"]["inputs"]["issue"]["description"]
    assert on["repository_dispatch"]["types"] == ["rio-timer"]
    for path in [ROOT / "action.yml", *WORKFLOWS.glob("*.yml")]:
        assert "pull_request_target" not in path.read_text(), path


def test_one_job_per_issue_waits_in_its_concurrency_group(rio: dict[str, Any]) -> None:
    job = rio["jobs"]["rio"]
    group = job["concurrency"]["group"]
    assert group.startswith("rio-issue-${{ ")
    for source in ("github.event.issue.number", "inputs.issue", "needs.route.outputs.issue"):
        assert source in group
    assert job["concurrency"]["cancel-in-progress"] is False
    # docs/github.md "Concurrency": up to 100 jobs wait in order; without it a newer job
    # cancels the one pending (a label's job among them). GitHub refuses it with
    # cancel-in-progress: true, so the two are asserted together.
    assert job["concurrency"]["queue"] == "max"
    assert load(WORKFLOWS / "rio-app.yml")["jobs"]["rio"]["concurrency"] == job["concurrency"]
    assert (
        job["timeout-minutes"] * 60
        > float(job["steps"][-1]["with"]["time-budget-minutes"]) * 60 + 5 * 60
    )  # room for finish


def test_permissions_are_minimal(rio: dict[str, Any]) -> None:
    assert rio["permissions"] == {}
    assert rio["jobs"]["rio"]["permissions"] == {
        "contents": "write",
        "issues": "write",
        "pull-requests": "write",
        "actions": "write",  # delete superseded generations (prune)
        "checks": "read",
    }
    assert rio["jobs"]["route"]["permissions"] == {"pull-requests": "read"}
    assert rio["jobs"]["sweep-wake"]["permissions"] == {"actions": "write"}
    # a queued scheduled sweep would cancel a pending wake-up in the same group
    sweep_group = load(WORKFLOWS / "rio-sweep.yml")["jobs"]["sweep"]["concurrency"]["group"]
    assert rio["jobs"]["sweep-wake"]["concurrency"]["group"] != sweep_group
    sweep = load(WORKFLOWS / "rio-sweep.yml")
    assert sweep["permissions"] == {}
    assert sweep["jobs"]["sweep"]["permissions"] == {"actions": "write", "issues": "read"}


def test_the_checkout_keeps_no_credentials_and_full_history(rio: dict[str, Any]) -> None:
    (checkout,) = [
        s for s in steps_of(rio) if str(s.get("uses", "")).startswith("actions/checkout")
    ]
    assert checkout["with"] == {
        "ref": "${{ github.event.repository.default_branch }}",  # never a review's merge ref
        "fetch-depth": 0,
        "persist-credentials": False,
    }


def test_the_workflow_uses_the_action_with_inputs_it_has(
    rio: dict[str, Any], action: dict[str, Any]
) -> None:
    used = step(rio, "rio")
    assert used["uses"] == "./"
    assert set(used["with"]) <= set(action["inputs"])
    assert used["with"]["anthropic-api-key"] == "${{ secrets.ANTHROPIC_API_KEY }}"
    label = used["with"]["trigger-label"]
    assert f"github.event.label.name == '{label}'" in rio["jobs"]["rio"]["if"]


@pytest.mark.parametrize(
    "path", [ROOT / "action.yml", *sorted(WORKFLOWS.glob("*.yml"))], ids=lambda p: p.name
)
def test_no_expression_is_interpolated_into_shell(path: Path) -> None:
    for each in steps_of(load(path)):
        assert "${{" not in each.get("run", ""), (path.name, each.get("id") or each.get("name"))


def test_a_version_tag_tests_checks_and_then_publishes_the_release() -> None:
    """docs/releasing.md: the suite and the tag's agreement with the version and the
    CHANGELOG come first; only then a job with ``contents: write`` publishes the notes the
    release script extracts and moves the major tag."""
    release = load(WORKFLOWS / "release.yml")
    assert release["on"] == {"push": {"tags": ["v*.*.*"]}}
    assert release["permissions"] == {}
    test, publish = release["jobs"]["test"], release["jobs"]["publish"]
    assert test["permissions"] == {"contents": "read"}
    runs = [s["run"] for s in test["steps"] if "run" in s]
    assert 'python3 .ci/release.py check "$TAG"' in runs[0] and "origin/main" in runs[0]
    assert runs[1] == "bash .ci/run"
    (checked,) = [s for s in test["steps"] if "release.py check" in s.get("run", "")]
    assert checked["env"] == {"TAG": "${{ github.ref_name }}"}
    assert test["steps"][0]["with"]["fetch-depth"] == 0
    assert publish["needs"] == "test"
    assert publish["permissions"] == {"contents": "write"}
    script = "\n".join(s.get("run", "") for s in publish["steps"])
    assert 'python3 .ci/release.py notes "$TAG"' in script
    assert "gh release create" in script and "--notes-file" in script
    assert 'major="${TAG%%.*}"' in script and "force=true" in script
    for job in (test, publish):
        (checkout,) = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout")]
        assert checkout["with"]["persist-credentials"] is False


def test_ci_runs_the_repository_check_script() -> None:
    ci = load(WORKFLOWS / "ci.yml")
    runs = [s["run"] for s in steps_of(ci) if "run" in s]
    assert runs == ["bash .ci/run"]
    assert ci["permissions"] == {"contents": "read"}
    assert "rio/issue-*" in ci["on"]["push"]["branches"]  # so workflow_run reaches rio


# --- hygiene (docs/github.md) -------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [ROOT / "action.yml", *sorted(WORKFLOWS.glob("*.yml"))], ids=lambda p: p.name
)
def test_every_uses_is_pinned_to_a_commit_with_its_version_named(path: Path) -> None:
    lines = [line for line in path.read_text().splitlines() if re.match(r"\s*(- )?uses:", line)]
    for line in lines:
        ref = line.split("uses:", 1)[1].split("#", 1)[0].strip()
        if ref == "./":  # this action itself, in the example users copy (they pin it)
            continue
        assert PINNED.match(ref), line
        assert re.search(r"# v\d+\.\d+\.\d+$", line), f"name the version: {line}"
    assert len(lines) == len([s for s in steps_of(load(path)) if "uses" in s])


def all_jobs() -> list[tuple[str, str, dict[str, Any]]]:
    """Every job with its effective ``permissions`` (the workflow's where it names none)."""
    found = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        workflow = load(path)
        for name, job in workflow["jobs"].items():
            found.append((path.name, name, {"permissions": workflow.get("permissions"), **job}))
    return found


def test_the_jobs_that_may_change_workflows_are_the_sweeps_and_the_rio_job() -> None:
    """The sweep's jobs run nothing fetched; the rio job's token deletes superseded
    generations and never reaches a Cell (docs/security.md)."""
    for file, name, job in all_jobs():
        assert isinstance(job["permissions"], dict), (file, name)  # never the defaults
    writers = {(f, n) for f, n, job in all_jobs() if job["permissions"].get("actions") == "write"}
    sweeps = {("rio-sweep.yml", "sweep"), ("rio.yml", "sweep-wake"), ("rio-app.yml", "sweep-wake")}
    assert writers == {*sweeps, ("rio.yml", "rio")}
    for file, name, job in all_jobs():
        if (file, name) in sweeps:
            assert all(set(s) <= {"name", "shell", "env", "run"} for s in job["steps"])
            assert job["timeout-minutes"] <= 5


def test_the_app_example_is_the_full_example_with_an_app_token() -> None:
    rio, app = load(WORKFLOWS / "rio.yml"), load(WORKFLOWS / "rio-app.yml")
    assert app["on"] == rio["on"] and set(app["jobs"]) == set(rio["jobs"])
    for name in app["jobs"]:
        assert "vars.RIO_APP_CLIENT_ID != ''" in app["jobs"][name]["if"]
    job = app["jobs"]["rio"]
    assert job["permissions"] == {"contents": "read"}
    (token,) = [
        s
        for s in job["steps"]
        if str(s.get("uses", "")).startswith("actions/create-github-app-token@")
    ]
    assert "permission-workflows" not in token["with"]
    assert token["with"]["private-key"] == "${{ secrets.RIO_APP_PRIVATE_KEY }}"
    wanted = expression(f"steps.{token['id']}.outputs.token")
    assert step(app, "rio")["with"]["github-token"] == wanted
    # an installation token lives an hour: the job ends before it does
    assert job["timeout-minutes"] < 60


def clauses(condition: str) -> list[str]:
    """The top-level ``||`` alternatives of ``!cancelled() && ( ... )``, whitespace folded."""
    text = " ".join(condition.split())
    text = text.removeprefix("!cancelled() && (").removesuffix(")")
    found, depth, start = [], 0, 0
    for index, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and text.startswith("||", index):
            found.append(text[start:index].strip())
            start = index + 2
    return [*found, text[start:].strip()]


def readme_workflow() -> dict[str, Any]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```yaml\nname: rio\n", 1)[1].split("```", 1)[0]
    data = yaml.safe_load("name: rio\n" + block)
    data["on"] = data.pop(True)
    assert isinstance(data, dict)
    return data


def test_the_readme_workflow_is_the_full_example_without_its_comments(
    rio: dict[str, Any],
) -> None:
    """docs/github.md "Hygiene": the README's workflow has every trigger and job of the full
    example (the Timer wake-up included: the README says in one line that Timers also need
    rio-sweep.yml), with the same ``if:`` filters, limits, permissions and steps."""
    readme = readme_workflow()
    assert readme["on"] == rio["on"]
    assert set(readme["jobs"]) == set(rio["jobs"])
    for name, job in readme["jobs"].items():
        full = rio["jobs"][name]
        assert job["if"] == full["if"], name
        assert job["timeout-minutes"] == full["timeout-minutes"], name
        for key in ("needs", "permissions", "concurrency", "outputs", "runs-on"):
            assert job.get(key) == full.get(key), (name, key)
    for name in ("route", "sweep-wake"):
        assert readme["jobs"][name]["steps"] == rio["jobs"][name]["steps"], name
    (checkout, action) = readme["jobs"]["rio"]["steps"]
    assert checkout == rio["jobs"]["rio"]["steps"][0]  # the same pinned checkout and settings
    assert PINNED.match(
        action["uses"].replace("OWNER/rio-ci@COMMIT_SHA", "owner/rio-ci@" + "0" * 40)
    )
    assert action["with"] == {k: v for k, v in step(rio, "rio")["with"].items()}
    text = (ROOT / "README.md").read_text()
    assert "Timers also need\n[rio-sweep.yml](.github/workflows/rio-sweep.yml)" in text


@pytest.mark.skipif(ZIZMOR is None, reason="zizmor is not installed (the test extra has it)")
def test_zizmor_finds_nothing_offline() -> None:
    done = subprocess.run(
        [ZIZMOR or "zizmor", "--offline", "--format", "plain", "action.yml", ".github/workflows/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout + done.stderr


@pytest.mark.skipif(ACTIONLINT is None, reason="actionlint is not installed (not in the extra)")
def test_actionlint_finds_nothing_but_an_old_schemas_queue() -> None:
    """Every finding fails the test, except an older actionlint's refusal of ``queue`` on a
    ``queue: max`` line (docs/design.md "queue: max and actionlint")."""
    done = subprocess.run(
        [ACTIONLINT or "actionlint", "-format", "{{json .}}", "-shellcheck=", "-pyflakes="]
        + [str(p.relative_to(ROOT)) for p in sorted(WORKFLOWS.glob("*.yml"))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    findings = json.loads(done.stdout or "[]")
    lines = {p: (ROOT / p).read_text().splitlines() for p in {f["filepath"] for f in findings}}
    unexplained = [
        f
        for f in findings
        if not (
            OLD_SCHEMA.search(f["message"])
            and lines[f["filepath"]][f["line"] - 1].strip() == "queue: max"
        )
    ]
    assert unexplained == [], done.stdout + done.stderr


def test_docs_describe_every_input_output_and_permission(
    action: dict[str, Any], rio: dict[str, Any]
) -> None:
    docs = (ROOT / "docs" / "github.md").read_text()
    for name in [*action["inputs"], *action["outputs"], *rio["jobs"]["rio"]["permissions"]]:
        assert f"`{name}`" in docs, name
    assert "persist-credentials: false" in docs and "fetch-depth: 0" in docs
