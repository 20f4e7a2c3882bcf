"""The set-up check's look at what starts and wakes Sessions (``setup_check`` runs them): the
trigger label, the workflows whose results wake a Session (``workflow_run``), the sweep that
fires Timers and the workflow that switches it back on, and the CI workflow finish dispatches.
The workflow files are read from the job's checkout of the default branch — GitHub runs
``workflow_run`` and ``schedule`` workflows from there — and the repository's workflows
through the API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import yaml

from rio_ci.forge.github_probe import Answer
from rio_ci.github.contract import ActionInputs
from rio_ci.github.timers import WAKE_EVENT
from rio_ci.reports.next_step import SWEEP_WORKFLOW
from rio_ci.untrusted.treefile import read_tree_file

OK, WARNING, PROBLEM = "ok", "warning", "problem"
WORKFLOW_MAX_BYTES = 512 * 1024


class Probe(Protocol):
    """The reads the check makes (``GitHubForge.probe``): the status is the answer."""

    def probe(self, path: str, params: dict[str, Any] | None = None) -> Answer: ...


@dataclass(frozen=True)
class Finding:
    """One check: what was checked, ``status`` (ok, warning, problem), what was found, and
    what to change."""

    what: str
    status: str
    found: str
    fix: str = ""


def workflow_file(env: ActionInputs, name: str) -> dict[str, Any] | None:
    """``.github/workflows/<name>`` of the checkout, parsed; None when absent or unreadable
    (read as ``rio_ci.untrusted.treefile`` reads what the repository holds: no link out of it)."""
    found = read_tree_file(env.workspace, f".github/workflows/{name}", WORKFLOW_MAX_BYTES)
    if found.data is None or found.over:
        return None
    try:
        data = yaml.safe_load(found.data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def triggers(workflow: dict[str, Any] | None) -> dict[str, Any]:
    """A workflow's ``on:`` as a mapping of event → its settings (None when it has none)."""
    on = (workflow or {}).get("on")
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(map(str, on))
    return on if isinstance(on, dict) else {}


def listed(forge: Probe) -> dict[str, dict[str, Any]]:
    """The repository's workflows as GitHub lists them, by file name."""
    body = forge.probe("/actions/workflows", {"per_page": 100}).body
    found = body.get("workflows") if isinstance(body, dict) else None
    return {
        str(w.get("path", "")).rsplit("/", 1)[-1]: w
        for w in (found if isinstance(found, list) else [])
        if isinstance(w, dict)
    }


def unread(env: ActionInputs) -> Finding:
    """The workflow that runs rio-ci is not in the checkout (``rio-ci action check`` run
    outside it): what only its file says is not checked."""
    path = f".github/workflows/{env.workflow_file}"
    return Finding(
        f"the workflow {env.workflow_file}",
        WARNING,
        f"{path} is not in the checkout: its triggers and permissions were not checked",
        "run the check from the workflow that runs rio-ci",
    )


def label(env: ActionInputs, forge: Probe) -> Finding:
    what = f"the trigger label {env.trigger_label}"
    answer = forge.probe(f"/labels/{env.trigger_label}")
    if answer.ok:
        return Finding(what, OK, "exists")
    fix = f"create the label {env.trigger_label} (Issues → Labels)"
    return Finding(what, PROBLEM, f"GET /labels/{env.trigger_label}: HTTP {answer.status}", fix)


def waking_workflows(
    env: ActionInputs, forge: Probe, workflow: dict[str, Any] | None
) -> list[Finding]:
    """The workflows ``workflow_run`` names (by their ``name:``) must exist."""
    if workflow is None:
        return [unread(env)]
    run = triggers(workflow).get("workflow_run")
    names = run.get("workflows") if isinstance(run, dict) else None
    if not isinstance(names, list) or not names:
        found = f"{env.workflow_file} has no workflow_run trigger: no CI result wakes a Session"
        fix = "list your CI workflow's name under `workflow_run: workflows:`"
        return [Finding("the workflows whose results wake a Session", WARNING, found, fix)]
    known = {str(w.get("name")): w for w in listed(forge).values()}
    findings = []
    for name in map(str, names):
        what = f"the workflow {name!r} of workflow_run"
        if name in known:
            found = f"{known[name].get('path')}, {known[name].get('state')}"
            findings.append(Finding(what, OK, found))
            continue
        found = f"no workflow is named {name!r} (this repository has: {', '.join(sorted(known))})"
        fix = f"in {env.workflow_file}, name your CI workflow's `name:` under workflow_run"
        findings.append(Finding(what, PROBLEM, found, fix))
    return findings


def sweep(env: ActionInputs, forge: Probe, workflow: dict[str, Any] | None) -> list[Finding]:
    """Timers: any Session may set one, so the sweep must be installed, dispatch this
    workflow, and be switched back on by it (``repository_dispatch`` rio-timer)."""
    what = f"the sweep {SWEEP_WORKFLOW} (Timers)"
    state = listed(forge).get(SWEEP_WORKFLOW, {}).get("state")
    if state is None:
        found = "not installed: a Timer fires only at its Session's next event"
        fix = f"copy .github/workflows/{SWEEP_WORKFLOW} beside {env.workflow_file}"
        return [Finding(what, PROBLEM, found, fix)]
    findings = [Finding(what, OK, f"installed, {state} (off while no Timer waits)")]
    wake = triggers(workflow).get("repository_dispatch")
    types = wake.get("types") if isinstance(wake, dict) else None
    if workflow is not None and not (isinstance(types, list) and WAKE_EVENT in types):
        found = f"{env.workflow_file} does not answer repository_dispatch {WAKE_EVENT}"
        fix = "copy rio.yml's sweep-wake job and its repository_dispatch trigger"
        findings.append(Finding("what switches the sweep on", PROBLEM, found, fix))
    dispatched = _dispatched_by(workflow_file(env, SWEEP_WORKFLOW))
    if dispatched and env.workflow_file not in dispatched:
        found = f"{SWEEP_WORKFLOW} dispatches {', '.join(sorted(dispatched))}"
        fix = f"set `WORKFLOW: {env.workflow_file}` in {SWEEP_WORKFLOW}"
        findings.append(Finding("the workflow the sweep resumes", PROBLEM, found, fix))
    return findings


def _dispatched_by(sweep_file: dict[str, Any] | None) -> set[str]:
    """The ``WORKFLOW`` the sweep's steps dispatch."""
    jobs = (sweep_file or {}).get("jobs")
    steps = [
        step
        for job in (jobs.values() if isinstance(jobs, dict) else [])
        if isinstance(job, dict)
        for step in job.get("steps") or []
        if isinstance(step, dict) and isinstance(step.get("env"), dict)
    ]
    return {str(step["env"]["WORKFLOW"]) for step in steps if "WORKFLOW" in step["env"]}


def ci_dispatch(env: ActionInputs, forge: Probe, name: str | None) -> Finding:
    """``ci_workflow``: a workflow of this repository that accepts ``workflow_dispatch``."""
    what = "CI on the agent's branch"
    if name is None:
        found = "no ci_workflow: with the job token, your CI does not run on the agent's branch"
        fix = "name your CI workflow in .github/rio.yml (`ci_workflow: ci.yml`), or use rio-app.yml"
        return Finding(what, WARNING, found, fix)
    if name not in listed(forge):
        found = f"this repository has no workflow .github/workflows/{name}"
        return Finding(what, PROBLEM, found, "fix ci_workflow in .github/rio.yml")
    if "workflow_dispatch" not in triggers(workflow_file(env, name)):
        found = f"{name} has no workflow_dispatch trigger: GitHub refuses to dispatch it"
        fix = f"add `workflow_dispatch:` under the `on:` of .github/workflows/{name}"
        return Finding(what, PROBLEM, found, fix)
    return Finding(what, OK, f"{name} is dispatched on rio/issue-<n> after each push")
