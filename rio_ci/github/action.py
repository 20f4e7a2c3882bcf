"""``rio-ci action``: the GitHub Actions entry points (SPEC §13).

    run     restore the Session → check out its branch → take in the event and re-scan
            comments and checks → run rounds within the time budget
    finish  (``if: always()``) recover → checkpoint the branch → pull request on success →
            final progress comment → leave generation + 1 in $RUNNER_TEMP/rio-artifact/
    sweep   (``schedule``) dispatch a job for every Session whose Timer is due, reading only
            the progress comment's metadata

Every write to GitHub is idempotent: the progress comment is found by its marker and
edited, the pull request is found by its head branch, and each observation enters the
Inbox under a stable id, so a replayed or re-scanned event is taken in once. ``run`` hands
``finish`` what it needs in ``$RUNNER_TEMP/rio/job.json``; ``finish`` without that file
did nothing and writes no outputs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shutil
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rio_ci.errors import RioError
from rio_ci.github import artifact, progress, workspace
from rio_ci.github.env import ActionEnv, Config, log
from rio_ci.github.events import (
    branch_for,
    classify,
    goal_for,
    issue_of_branch,
)
from rio_ci.github.forge.base import Forge
from rio_ci.github.generations import newer_generations, rejections_note, restore, take_over
from rio_ci.github.intake import may_steer, take_in
from rio_ci.github.progress import publish_progress
from rio_ci.harness import Harness
from rio_ci.model import build_model
from rio_ci.run.owner import Owner, handle_signals
from rio_ci.session import Session

JOB_FILE = "job.json"
FAILING = frozenset({"failed", "error", "interrupted"})


def action_command(phase: str, *, emit: Callable[[Any], None],
                   forge: Forge | None = None) -> int:
    env = ActionEnv.from_environ(os.environ)
    if phase == "finish" and not (env.state_dir / JOB_FILE).exists():
        # The run step ignored the event (or died before it had a Session): nothing to
        # persist, no outputs, so the composite's outputs stay the run step's.
        emit({"status": "ignored", "reason": "the run step left no Session"})
        return 0
    host: Forge = forge if forge is not None else github_forge(env)
    if phase == "finish":
        result = finish(env, host)
    elif phase == "sweep" or env.event_name == "schedule":
        result = sweep(env, host)
    else:
        result = run(env, host)
    write_outputs(env, result)
    emit(result)
    return 1 if result.get("status") in FAILING else 0


def github_forge(env: ActionEnv) -> Forge:
    from rio_ci.github.forge.github import GitHubForge

    # PyGithub's spacing between requests is GitHub's advice against its secondary rate
    # limits; an API on this machine (a test fake, a local proxy) does not need it.
    host = urllib.parse.urlsplit(env.api_url).hostname or ""
    local = host == "localhost"
    with contextlib.suppress(ValueError):
        local = local or ipaddress.ip_address(host).is_loopback
    return GitHubForge(env.repository, env.token, env.api_url, throttle=not local)


# --- run ------------------------------------------------------------------------------------


def run(env: ActionEnv, forge: Forge) -> dict[str, Any]:
    (env.state_dir / JOB_FILE).unlink(missing_ok=True)
    trigger = classify(env.event_name, env.event(), env.trigger_label, env.repository)
    if trigger.kind == "sweep":
        return sweep(env, forge)
    issue, pull_request = trigger.issue, None
    if trigger.kind == "comment" and trigger.data.get("is_pull_request") and issue:
        pull_request, issue = issue, issue_of_branch(forge.pull_head(issue))
    if trigger.kind == "ignore" or issue is None:
        log(f"rio-ci: nothing to do ({trigger.reason or 'not a rio-ci pull request'})")
        return {"status": "ignored", "reason": trigger.reason or "not a rio-ci pull request"}
    if trigger.kind == "start" and not may_steer(forge, trigger.actor, None):
        log(f"rio-ci: @{trigger.actor} has no write access; the label is ignored")
        return {"status": "ignored", "reason": "label by a user without write access"}
    if trigger.kind == "comment" and not may_steer(forge, trigger.actor, trigger.association):
        log(f"rio-ci: comment by @{trigger.actor} ignored (no write access)")
        return {"status": "ignored", "reason": "comment by a user without write access"}

    env.state_dir.mkdir(parents=True, exist_ok=True)
    db = env.state_dir / "session.sqlite3"
    restored = restore(env, forge, issue, db)
    if "problem" in restored:
        with contextlib.suppress(RioError):
            forge.upsert_comment(issue, progress.MARKER, progress.render_problem(
                restored["problem"], run_url=env.run_url))
        return {"status": "error", "reason": restored["problem"], "issue": issue}
    if restored["generation"] is None:
        if trigger.kind != "start":
            log(f"rio-ci: issue #{issue} has no Session; label it {env.trigger_label!r} to "
                "start one")
            return {"status": "ignored", "reason": f"issue #{issue} has no Session"}
        info = forge.issue(issue)
        config = Config.load(env.workspace, env.config)
        Session.create(db, goal_for(issue, info.title, info.body), cwd=str(env.workspace),
                       validators=config.validators, limits=config.limits,
                       pass_env=list(config.pass_env)).close()
        restored["generation"] = 0
    remote = workspace.origin_url(env.workspace)  # read before any Cell can change it
    job = {"issue": issue, "db": str(db), "remote": remote, "started": time.time(), **restored}
    (env.state_dir / JOB_FILE).write_text(json.dumps(job))
    log("::group::rio-ci: working tree")
    existed = workspace.check_out(env.workspace, branch_for(issue), remote, env.token)
    log(f"branch {branch_for(issue)} {'restored' if existed else 'started'}")
    log("::endgroup::")

    owner = Owner(str(db))
    restore_signals = handle_signals(owner.interrupted)
    try:
        problem, note = workspace.pin(Path(owner.session.proj.session["cwd"]), env.workspace)
        if note:
            log(f"rio-ci: {note}")
        if problem is not None:
            log(f"::error::rio-ci: {problem}")
            publish_progress(env, forge, owner.session, issue, job["generation"], None,
                             note=problem)
            return {"status": "error", "reason": problem, "issue": issue,
                    "session": owner.session.proj.session["id"]}
        owner.recover()
        if pull_request is not None:
            owner.session.set_watermark("pull_request", pull_request)
        take_in(owner, forge, issue)
        publish_progress(env, forge, owner.session, issue, job["generation"], None,
                         note=rejections_note(job))
        proj = owner.session.refresh()
        if proj.ended:
            log(f"rio-ci: the run of #{issue} has ended ({proj.ended['result']}); "
                "nothing is run")
            status = "succeeded" if proj.ended["result"] == "success" else "failed"
            return {"status": status, "session": proj.session["id"], "issue": issue,
                    "reason": proj.ended["reason"]}
        harness = Harness(owner, build_model(env.model), external_wakeups=True)
        outcome = harness.run(time.monotonic() + env.budget_minutes * 60)
        if owner.running is not None:
            owner.stop_running("owner_interrupted" if outcome.status == "interrupted"
                               else "owner_deadline")
        proj = owner.session.refresh()
        return {"status": outcome.status, "next_wake": outcome.next_wake,
                "session": proj.session["id"], "issue": issue, "reason": outcome.reason}
    finally:
        restore_signals()
        with contextlib.suppress(RioError):
            owner.close()


# --- finish ---------------------------------------------------------------------------------


def finish(env: ActionEnv, forge: Forge) -> dict[str, Any]:
    job = json.loads((env.state_dir / JOB_FILE).read_text())
    issue, db, generation = int(job["issue"]), Path(job["db"]), int(job["generation"])
    name = f"rio-session-{issue}"
    newer = newer_generations(forge, name, set(job.get("seen") or []))
    notes = [n for n in [rejections_note(job)] if n]
    owner = take_over(db)
    try:
        owner.recover()  # a cut-off run's started Execution becomes UnknownExecution now
        sha = None
        try:
            sha = workspace.checkpoint(env.workspace, branch_for(issue),
                                       f"rio-ci: checkpoint of #{issue} (run {env.run_id})",
                                       job["remote"], env.token, exclude=[env.runner_temp])
        except RioError as exc:
            notes.append(f"the working tree was not checkpointed: {exc}")
            log(f"::error::rio-ci: the working tree was not checkpointed: {exc}")
        proj = owner.session.refresh()
        pull = None
        if proj.ended and proj.ended["result"] == "success" and not newer:
            pull = _pull_request(env, forge, owner.session, issue, notes)
        proj = owner.session.refresh()
        next_wake = min((t["deadline"] for t in proj.timers.values()), default=None)
        session_id = proj.session["id"]
        status = "waiting"
        if proj.ended:
            status = "succeeded" if proj.ended["result"] == "success" else "failed"
        if not newer:
            publish_progress(env, forge, owner.session, issue, generation + 1,
                             None if proj.ended else "waiting", note="; ".join(notes) or None,
                             pull_request=pull, final=True)
    finally:
        with contextlib.suppress(RioError):
            owner.close()
    if env.artifact_dir.exists():
        shutil.rmtree(env.artifact_dir)
    artifact.pack(db, env.artifact_dir, generation=generation + 1,
                  parent_generation=generation or None, run_id=_int(env.run_id),
                  next_wake=next_wake)
    result = {"status": status, "session": session_id, "next_wake": next_wake,
              "pull_request": pull, "artifact_name": name, "issue": issue, "commit": sha,
              "generation": generation + 1}
    if newer:
        # Publishing would bury the newer history; the copy is kept under another name,
        # which restore never lists, for whoever investigates.
        orphan = f"rio-orphan-{issue}-{env.run_id}"
        log(f"::error::rio-ci: {name} gained generation(s) {newer} during this job; not "
            f"publishing over them (this job's Session is kept as the artifact {orphan})")
        result.update(status="error", artifact_name=orphan,
                      reason=f"a newer generation of {name} exists")
    return result


def _pull_request(env: ActionEnv, forge: Forge, session: Session, issue: int,
                  notes: list[str]) -> str | None:
    session_id = session.proj.session["id"]
    try:
        info = forge.issue(issue)
        url = forge.open_pull_request(
            branch_for(issue), env.ref_name or "main", f"Fixes #{issue}: {info.title}"[:250],
            f"Fixes #{issue}\n\nOpened by rio-ci (Session {session_id}).\n"
            f"<!-- rio-ci:op {session_id}:pull -->")
    except RioError as exc:
        notes.append(f"the pull request was not opened: {exc}")
        log(f"::error::rio-ci: the pull request was not opened: {exc}")
        return None
    number = re.search(r"/pull/([0-9]+)$", url)
    if number:  # comments on the pull request steer the Session too
        session.set_watermark("pull_request", int(number.group(1)))
    return url


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


# --- sweep ----------------------------------------------------------------------------------


def sweep(env: ActionEnv, forge: Forge) -> dict[str, Any]:
    """Resume every labelled Session whose Timer is due, each in its own job. Decided from
    the progress comment's metadata alone: no journal is downloaded."""
    now, dispatched = time.time(), []
    for issue in forge.issues_with_label(env.trigger_label):
        comment = forge.find_comment(issue.number, progress.MARKER)
        meta = progress.read_meta(comment.body) if comment else None
        wake = meta.get("next_wake") if meta else None
        due = isinstance(wake, int | float) and not isinstance(wake, bool) and wake <= now
        if meta and not meta.get("ended") and due:
            forge.dispatch(env.workflow_file, env.ref_name or "main", {"issue": str(issue.number)})
            dispatched.append(issue.number)
    log(f"rio-ci: sweep dispatched {dispatched or 'nothing'}")
    return {"status": "swept", "dispatched": dispatched}


def write_outputs(env: ActionEnv, result: dict[str, Any]) -> None:
    if env.output is None:
        return
    values = {"status": result.get("status"), "session": result.get("session"),
              "next-wake": result.get("next_wake"), "pull-request": result.get("pull_request"),
              "artifact-name": result.get("artifact_name")}
    with env.output.open("a") as stream:
        for key, value in values.items():
            text = "" if value is None else str(value)
            stream.write(f"{key}={text.splitlines()[0] if text else ''}\n")


__all__ = ["action_command", "finish", "run", "sweep"]
