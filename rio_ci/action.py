"""``rio-ci action``: the GitHub Actions entry points (SPEC §13).

    run     restore the Session → check out its branch → take in the event and re-scan
            comments and checks since the watermarks → run rounds within the time budget
    finish  (``if: always()``) recover → checkpoint the branch → pull request on success →
            final progress comment → leave generation + 1 in $RUNNER_TEMP/rio-artifact/
    sweep   (``schedule``) dispatch a job for every Session whose Timer is due, reading only
            the progress comment's metadata

Every write to GitHub is idempotent: the progress comment is found by its marker and
edited, the pull request is found by its head branch, and each observation enters the
Inbox under a stable id, so a replayed or re-scanned event is taken in once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rio_ci import artifact, progress, workspace
from rio_ci.action_env import ActionEnv, Config
from rio_ci.errors import RioError, StorageError
from rio_ci.forge.base import Forge
from rio_ci.github_events import (
    WRITE_ASSOCIATIONS,
    Trigger,
    branch_for,
    classify,
    goal_for,
    issue_of_branch,
    quote_untrusted,
    steer_command,
)
from rio_ci.harness import Harness, build_model
from rio_ci.owner import Owner, handle_signals
from rio_ci.session import Session

WRITERS = frozenset({"admin", "maintain", "write"})
JOB_FILE = "job.json"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def action_command(phase: str, *, emit: Callable[[Any], None],
                   forge: Forge | None = None) -> int:
    env = ActionEnv.from_environ(os.environ)
    if forge is None:
        from rio_ci.forge.github import GitHubForge

        forge = GitHubForge(env.repository, env.token, env.api_url)
    if phase == "finish":
        result = finish(env, forge)
    elif phase == "sweep" or env.event_name == "schedule":
        result = sweep(env, forge)
    else:
        result = run(env, forge)
    write_outputs(env, result)
    emit(result)
    return 1 if result.get("status") in ("failed", "error", "interrupted") else 0


# --- run ------------------------------------------------------------------------------------


def run(env: ActionEnv, forge: Forge) -> dict[str, Any]:
    trigger = classify(env.event_name, env.event(), env.trigger_label)
    if trigger.kind == "sweep":
        return sweep(env, forge)
    issue = trigger.issue
    if trigger.kind == "comment" and trigger.data.get("is_pull_request") and issue:
        issue = issue_of_branch(forge.pull_head(issue))
    if trigger.kind == "ignore" or issue is None:
        log(f"rio-ci: nothing to do ({trigger.reason or 'not a rio-ci branch'})")
        return {"status": "ignored", "reason": trigger.reason}
    if trigger.kind == "start" and not may_steer(forge, trigger.actor, None):
        log(f"rio-ci: @{trigger.actor} has no write access; the label is ignored")
        return {"status": "ignored", "reason": "label by a user without write access"}
    if trigger.kind == "comment" and not may_steer(forge, trigger.actor, trigger.association):
        log(f"rio-ci: comment by @{trigger.actor} ignored (no write access)")
        return {"status": "ignored", "reason": "comment by a user without write access"}

    env.state_dir.mkdir(parents=True, exist_ok=True)
    db = env.state_dir / "session.sqlite3"
    restored = restore(env, forge, issue, db)
    if restored is None:
        if trigger.kind != "start":
            return {"status": "ignored", "reason": f"issue #{issue} has no Session"}
        info = forge.issue(issue)
        config = Config.load(env.workspace, env.config)
        Session.create(db, goal_for(issue, info.title, info.body), cwd=str(env.workspace),
                       validators=config.validators, limits=config.limits).close()
        restored = {"generation": 0, "artifact_id": None}
    job = {"issue": issue, "db": str(db), **restored, "started": time.time()}
    (env.state_dir / JOB_FILE).write_text(json.dumps(job))
    log("::group::rio-ci: working tree")
    existed = workspace.check_out(env.workspace, branch_for(issue), env.token)
    log(f"branch {branch_for(issue)} {'restored' if existed else 'started'}; files may differ "
        "from what the model last saw")
    log("::endgroup::")

    owner = Owner(str(db))
    restore_signals = handle_signals(owner.interrupted)
    try:
        owner.recover()
        take_in(owner, forge, issue)
        publish_progress(env, forge, owner.session, issue, job["generation"], "running")
        model = build_model(env.model)
        harness = Harness(owner, model, external_wakeups=True)
        outcome = harness.run(time.monotonic() + env.budget_minutes * 60)
        if owner.running is not None:
            owner.stop_running("owner_interrupted" if outcome.status == "interrupted"
                               else "owner_deadline")
        proj = owner.session.refresh()
        result = {"status": outcome.status, "next_wake": outcome.next_wake,
                  "session": proj.session["id"], "issue": issue, "reason": outcome.reason}
    finally:
        restore_signals()
        with contextlib.suppress(RioError):
            owner.close()
    return result


def may_steer(forge: Forge, user: str | None, association: str | None) -> bool:
    """Write access: a trusted author_association, else the collaborator-permission API."""
    if not user or user.endswith("[bot]"):
        return False
    if association in WRITE_ASSOCIATIONS:
        return True
    return forge.permission(user) in WRITERS


def restore(env: ActionEnv, forge: Forge, issue: int, db: Path) -> dict[str, Any] | None:
    """Put the newest valid generation at ``db``; None when the Session was never saved."""
    result = artifact.restore_newest(forge, f"rio-session-{issue}", env.state_dir / "restore")
    for rejection in result.rejected:
        log(f"::warning::rio-ci: {rejection}")
    if result.restored is None:
        if result.rejected:
            raise StorageError(f"every saved generation of rio-session-{issue} was rejected: "
                               f"{result.rejected[0]}")
        return None
    if db.exists():
        db.unlink()
    shutil.copyfile(result.restored.snapshot, db)
    generation = result.restored.manifest.generation
    log(f"rio-ci: restored generation {generation} of rio-session-{issue}")
    return {"generation": generation, "artifact_id": result.restored.artifact.id,
            "rejected": [str(r) for r in result.rejected]}


def take_in(owner: Owner, forge: Forge, issue: int) -> None:
    """Re-scan comments (issue and pull request) and checks since the committed watermarks;
    each observation enters the Inbox once, under a stable id."""
    session = owner.session
    marks = session.proj.watermarks
    for number in {issue, *([marks["pull_request"]] if marks.get("pull_request") else [])}:
        key = f"comments:{number}"
        last = int(marks.get(key, 0))
        for comment in forge.comments(number, after_id=last):
            if progress.MARKER in comment.body or comment.author.endswith("[bot]"):
                pass
            elif not may_steer(forge, comment.author, comment.association):
                log(f"rio-ci: comment {comment.id} by @{comment.author} ignored (no write access)")
            elif steer_command(comment.body) == "stop":
                owner.end_in_failure(f"stopped by @{comment.author} ({comment.url})")
            elif steer_command(comment.body) is None:
                session.receive(f"comment:{comment.id}", "comment", {
                    "author": comment.author, "body": quote_untrusted(comment.body, 6000),
                    "url": comment.url, "untrusted": True})
            last = max(last, comment.id)
            _watermark(session, key, last)
    for check in forge.checks(branch_for(issue)):
        session.receive(f"check:{check.kind}:{check.id}", "check", {
            "name": check.name, "conclusion": check.conclusion, "url": check.url,
            "kind": check.kind})


def _watermark(session: Session, name: str, value: Any) -> None:
    if session.proj.watermarks.get(name) == value:
        return
    with session.journal.write() as w:
        w.append("watermark", {"name": name, "value": value})


def publish_progress(env: ActionEnv, forge: Forge, session: Session, issue: int,
                     generation: int, outcome: str | None, note: str | None = None,
                     pull_request: str | None = None) -> None:
    proj = session.refresh()
    status = progress.status_of(proj, outcome)
    body = progress.render(proj, status=status, run_url=env.run_url, generation=generation,
                           operation=f"{proj.session['id']}:{proj.last_seq}", note=note,
                           pull_request=pull_request)
    forge.upsert_comment(issue, progress.MARKER, body)
    if env.summary is not None:
        with env.summary.open("a") as stream:
            stream.write(body.replace(progress.MARKER, "") + "\n")


# --- finish ---------------------------------------------------------------------------------


def finish(env: ActionEnv, forge: Forge) -> dict[str, Any]:
    job_path = env.state_dir / JOB_FILE
    if not job_path.exists():
        return {"status": "ignored", "reason": "the run step left no Session"}
    job = json.loads(job_path.read_text())
    issue, db, generation = job["issue"], Path(job["db"]), int(job["generation"])
    notes: list[str] = []
    owner = Owner(str(db))
    try:
        owner.recover()  # a cut-off run's started Execution becomes UnknownExecution now
        proj = owner.session.refresh()
        sha = None
        try:
            sha = workspace.checkpoint(env.workspace, branch_for(issue),
                                       f"rio-ci: checkpoint of #{issue} (run {env.run_id})",
                                       env.token, exclude=[env.runner_temp])
        except RioError as exc:
            notes.append(f"checkpoint failed: {exc}")
        pull = None
        if proj.ended and proj.ended["result"] == "success":
            info = forge.issue(issue)
            pull = forge.open_pull_request(
                branch_for(issue), env.ref_name or "main", f"Fixes #{issue}: {info.title}"[:250],
                f"Fixes #{issue}\n\nOpened by rio-ci (Session {proj.session['id']}).\n"
                f"<!-- rio-ci:op {proj.session['id']}:pull -->")
        outcome = "waiting" if not proj.ended else None
        publish_progress(env, forge, owner.session, issue, generation + 1, outcome,
                         note="; ".join(notes) or None, pull_request=pull)
        next_wake = min((t["deadline"] for t in proj.timers.values()), default=None)
        session_id = proj.session["id"]
        status = ("succeeded" if proj.ended["result"] == "success" else "failed") \
            if proj.ended else "waiting"
    finally:
        with contextlib.suppress(RioError):
            owner.close()
    name = f"rio-session-{issue}"
    newest = next(iter(forge.artifacts(name)), None)
    if newest is not None and newest.id != job.get("artifact_id"):
        log(f"::error::rio-ci: a newer generation of {name} appeared during this job; "
            "not publishing over it")
        return {"status": "error", "reason": "newer generation exists", "session": session_id}
    if env.artifact_dir.exists():
        shutil.rmtree(env.artifact_dir)
    artifact.pack(db, env.artifact_dir, generation=generation + 1,
                  parent_generation=generation or None, run_id=_int(env.run_id),
                  next_wake=next_wake)
    return {"status": status, "session": session_id, "next_wake": next_wake,
            "pull_request": pull, "artifact_name": name, "issue": issue, "commit": sha,
            "generation": generation + 1}


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


# --- sweep ----------------------------------------------------------------------------------


def sweep(env: ActionEnv, forge: Forge) -> dict[str, Any]:
    """Resume every labelled Session whose Timer is due, each in its own job."""
    now, dispatched = time.time(), []
    for issue in forge.issues_with_label(env.trigger_label):
        comment = forge.find_comment(issue.number, progress.MARKER)
        meta = progress.read_meta(comment.body) if comment else None
        wake = meta.get("next_wake") if meta else None
        if meta and not meta.get("ended") and isinstance(wake, int | float) and wake <= now:
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


__all__ = ["Trigger", "action_command"]
