"""The set-up check a maintainer runs once (docs/github.md, "Checking the set-up"): ``rio-ci
action check``, or ``rio.yml`` dispatched with ``check`` as its issue — the rio job itself, so
the token, the permissions, the inputs and the secret are the ones its Sessions get.

Each check is a ``Finding``: ``ok``, ``warning`` (it works, but something a Session may need
is missing) or ``problem`` (a Session will fail, or wait forever), with what was found and
what to change. They go to the step summary as one table and to the log (a problem as an
error annotation); the job fails when any is a problem. Nothing is written: every GitHub
request is a read, and the model key is checked with the Models API, which costs no tokens.
This module checks the configuration, the key and the token; ``setup_workflows`` what starts
and wakes Sessions (the label, the workflows, the sweep, CI).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rio_ci.core.errors import RioError, UsageError
from rio_ci.github.contract import ActionInputs, Config, log
from rio_ci.github.setup_workflows import (
    OK,
    PROBLEM,
    WARNING,
    Finding,
    Probe,
    ci_dispatch,
    label,
    sweep,
    unread,
    waking_workflows,
    workflow_file,
)
from rio_ci.reports import markdown as md

MARKS = {OK: "✅", WARNING: "⚠️", PROBLEM: "❌"}
# What the rio job's token must be allowed (docs/github.md, "Permissions and why").
NEEDED = {
    "contents": "write",
    "issues": "write",
    "pull-requests": "write",
    "actions": "read",
    "checks": "read",
}
LEVELS = {"none": 0, "read": 1, "write": 2}


def check_setup(env: ActionInputs, connect: Callable[[], Probe]) -> dict[str, Any]:
    """Run every check and report them (step summary and log); the job's result."""
    config, findings = _configuration(env)
    findings.append(_model_key(env))
    workflow = workflow_file(env, env.workflow_file)
    try:
        forge = connect()
    except RioError as exc:
        findings.append(Finding("the token", PROBLEM, str(exc), "pass a valid github-token"))
    else:
        findings += _token(forge)
        findings.append(_declared(env, workflow, config))
        findings.append(_pull_requests_allowed(forge))
        findings.append(label(env, forge))
        findings += waking_workflows(env, forge, workflow)
        findings += sweep(env, forge, workflow)
        findings.append(ci_dispatch(env, forge, config.ci_workflow if config else None))
    _report(env, findings)
    problems = sum(f.status == PROBLEM for f in findings)
    if problems:
        return {"status": "error", "reason": f"{problems} problem(s) in the set-up"}
    return {"status": "checked", "warnings": sum(f.status == WARNING for f in findings)}


# --- the configuration and the model ------------------------------------------------------


def _configuration(env: ActionInputs) -> tuple[Config | None, list[Finding]]:
    what = f"the configuration {env.config}"
    try:
        config = Config.load(env.workspace, env.config)
    except UsageError as exc:
        return None, [Finding(what, PROBLEM, str(exc), f"correct {env.config}")]
    if config.skipped is not None:
        return config, [Finding(what, PROBLEM, config.skipped, f"make {env.config} a file")]
    found = f"{len(config.validators)} validator(s)"
    if config.ci_workflow:
        found += f", ci_workflow {config.ci_workflow}"
    if not config.validators:
        why = f"{found}: nothing but the model's word stands behind a success"
        fix = f"list your test command under `validators:` in {env.config}"
        return config, [Finding(what, WARNING, why, fix)]
    return config, [Finding(what, OK, found)]


def _model_key(env: ActionInputs) -> Finding:
    from rio_ci.model.base import KeyCheck
    from rio_ci.model.providers import build_model

    what = f"the model key ({env.model})"
    kind = env.model.partition(":")[0]
    if kind == "scripted":
        return Finding(what, OK, "a scripted model: no key")
    if kind != "anthropic":
        return Finding(what, WARNING, f"not checked here: {kind} checks its credentials itself")
    if not os.environ.get("ANTHROPIC_API_KEY"):
        fix = "add the repository secret ANTHROPIC_API_KEY (the workflow passes it on)"
        return Finding(what, PROBLEM, "no key: anthropic-api-key is empty", fix)
    try:
        model = build_model(env.model, effort=env.effort)
        refused = model.verify() if isinstance(model, KeyCheck) else None
    except RioError as exc:
        return Finding(what, PROBLEM, str(exc), "fix the action's model input")
    if refused is None:
        return Finding(what, OK, "the Claude API takes the key and knows the model")
    about, why = refused
    fixes = {
        "key": "set the secret ANTHROPIC_API_KEY to a key of the Claude Console",
        "model": "set the action's model input to a model of docs/models.md",
        "provider": "run the check again; if it persists, see the provider's status page",
    }
    return Finding(what, PROBLEM, why, fixes[about])


# --- the token ----------------------------------------------------------------------------


def _token(forge: Probe) -> list[Finding]:
    """The reads a job makes, tried as it makes them: each answer says whether the token
    may (GitHub names what a refused request needed in X-Accepted-GitHub-Permissions)."""
    repository = forge.probe("").body
    default = str((isinstance(repository, dict) and repository.get("default_branch")) or "main")
    reads: dict[str, tuple[str, dict[str, Any] | None]] = {
        "issues": ("/issues", {"state": "open", "per_page": 1}),
        "pull-requests": ("/pulls", {"state": "open", "per_page": 1}),
        "actions": ("/actions/artifacts", {"per_page": 1}),
        "checks": (f"/commits/{default}/check-runs", {"per_page": 1}),
        "contents": (f"/branches/{default}", None),
    }
    findings = []
    for scope, (path, params) in reads.items():
        answer = forge.probe(path, params)
        what = f"the token reads {scope}"
        found = f"GET {path}: HTTP {answer.status}"
        if answer.ok:
            findings.append(Finding(what, OK, found))
            continue
        found += f" (GitHub: it needs {answer.accepted})" if answer.accepted else ""
        fix = f"add `{scope}: {NEEDED[scope]}` under the rio job's `permissions:`"
        findings.append(Finding(what, PROBLEM, found, fix))
    return findings


def _declared(env: ActionInputs, workflow: dict[str, Any] | None, config: Config | None) -> Finding:
    """What no read can try — the writes: the permissions the rio job declares for the job
    token (a token of its own, ``github-token``, was tried by the reads instead)."""
    what = "the rio job's permissions"
    if workflow is None:
        return unread(env)
    jobs = workflow.get("jobs")
    job = jobs.get(env.job) if isinstance(jobs, dict) and env.job else None
    if not isinstance(job, dict):
        return Finding(what, WARNING, f"not checked: no job {env.job!r} in {env.workflow_file}")
    steps = [s for s in job.get("steps") or [] if isinstance(s, dict)]
    if any("github-token" in (s.get("with") or {}) for s in steps):
        return Finding(what, OK, "it passes a token of its own (github-token)")
    declared = job.get("permissions", workflow.get("permissions"))
    if not isinstance(declared, dict):
        fix = "declare the rio job's permissions as rio.yml does"
        return Finding(what, PROBLEM, "none declared: the repository's default applies", fix)
    needed = {**NEEDED, **({"actions": "write"} if config and config.ci_workflow else {})}
    lacking = [
        f"{scope}: {level}"
        for scope, level in needed.items()
        if LEVELS.get(str(declared.get(scope, "none")), 0) < LEVELS[level]
    ]
    if lacking:
        fix = "add " + ", ".join(f"`{x}`" for x in lacking) + " under its `permissions:`"
        return Finding(what, PROBLEM, f"it lacks {', '.join(lacking)}", fix)
    if declared.get("actions") != "write":  # works, but nothing deletes old generations
        found = "actions: read: superseded Session artifacts are not deleted (storage grows)"
        return Finding(what, WARNING, found, "give the rio job `actions: write`, as rio.yml does")
    return Finding(what, OK, ", ".join(f"{k}: {v}" for k, v in sorted(declared.items())))


def _pull_requests_allowed(forge: Probe) -> Finding:
    """The repository setting without which the job token cannot open a pull request."""
    what = "GitHub Actions may open pull requests"
    answer = forge.probe("/actions/permissions/workflow")
    body = answer.body if isinstance(answer.body, dict) else {}
    where = "Settings → Actions → General → Workflow permissions"
    if not answer.ok or "can_approve_pull_request_reviews" not in body:
        found = f"not readable with this token (HTTP {answer.status})"
        return Finding(what, WARNING, found, f"look at {where}")
    if body["can_approve_pull_request_reviews"] is not True:
        fix = f"{where}: allow GitHub Actions to create and approve pull requests"
        return Finding(what, PROBLEM, "off: the job token cannot open a pull request", fix)
    return Finding(what, OK, "on")


# --- the report ---------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text in a table cell: one line, control characters escaped, no pipe to end it."""
    return md.one_line(text).replace("|", "\\|")


def _report(env: ActionInputs, findings: list[Finding]) -> None:
    prefixes = {PROBLEM: "::error::", WARNING: "::warning::", OK: ""}
    for f in findings:
        line = f"rio-ci check: {f.what}: {f.found}" + (f" — {f.fix}" if f.fix else "")
        log(prefixes[f.status] + md.one_line(line))
    if env.summary is None:
        return
    problems = sum(f.status == PROBLEM for f in findings)
    head = f"{problems} problem(s) to fix" if problems else "no problem found"
    rows = [
        f"| {MARKS[f.status]} | {_cell(f.what)} | {_cell(f.found)} | {_cell(f.fix)} |"
        for f in findings
    ]
    table = ["| | checked | found | to fix |", "| --- | --- | --- | --- |", *rows]
    with env.summary.open("a") as stream:
        stream.write(f"### rio-ci set-up check: {head}\n\n" + "\n".join(table) + "\n\n")
