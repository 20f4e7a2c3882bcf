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
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rio_ci import artifact, progress, workspace
from rio_ci.action_env import ActionEnv, Config
from rio_ci.errors import OwnershipError, Rejected, RioError, RunEnded
from rio_ci.forge.base import Forge
from rio_ci.github_events import (
    WRITE_ASSOCIATIONS,
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
COMMENT_QUOTE_BYTES = 6000
FAILING = frozenset({"failed", "error", "interrupted"})


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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
    from rio_ci.forge.github import GitHubForge

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
            _watermark(owner.session, "pull_request", pull_request)
        take_in(owner, forge, issue)
        publish_progress(env, forge, owner.session, issue, job["generation"], None,
                         note=_rejections_note(job))
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


def may_steer(forge: Forge, user: str | None, association: str | None) -> bool:
    """Write access: a trusted author_association, else the collaborator-permission API."""
    if not user or user.endswith("[bot]"):
        return False
    if association in WRITE_ASSOCIATIONS:
        return True
    return forge.permission(user) in WRITERS


def restore(env: ActionEnv, forge: Forge, issue: int, db: Path) -> dict[str, Any]:
    """Put the newest valid generation at ``db``. Returns ``{"generation", "artifact_id",
    "seen", "rejected"}`` (``generation`` None: never saved) or ``{"problem"}`` when every
    saved generation was refused — starting over would publish over the lost history."""
    name = f"rio-session-{issue}"
    # Every generation that exists now; finish treats any other one as a newer job's.
    seen = [a.id for a in forge.artifacts(name)]
    result = artifact.restore_newest(forge, name, env.state_dir / "restore")
    rejected = [str(r) for r in result.rejected]
    for rejection in rejected:
        log(f"::error::rio-ci: {name}: {rejection}")
    if result.restored is None:
        if rejected:
            return {"problem": f"every saved generation of {name} was refused; the newest: "
                               f"{rejected[0]}. Nothing was run."}
        return {"generation": None, "artifact_id": None, "seen": seen, "rejected": []}
    db.unlink(missing_ok=True)
    shutil.copyfile(result.restored.snapshot, db)
    generation = result.restored.manifest.generation
    log(f"rio-ci: restored generation {generation} of {name}")
    return {"generation": generation, "artifact_id": result.restored.artifact.id,
            "seen": sorted({*seen, result.restored.artifact.id}), "rejected": rejected}


def _rejections_note(job: dict[str, Any]) -> str | None:
    rejected = job.get("rejected") or []
    if not rejected:
        return None
    return (f"Refused {len(rejected)} saved generation(s) and continued from generation "
            f"{job['generation']}: " + "; ".join(rejected))


def take_in(owner: Owner, forge: Forge, issue: int) -> None:
    """Re-scan comments (issue and pull request) and checks; each observation enters the
    Inbox once, under a stable id. Comments advance a watermark (their ids rise in the order
    they are written); checks do not — runs finish out of id order — and rely on the
    message id alone. A full Inbox stops the scan without advancing past what it refused."""
    session = owner.session
    marks = session.proj.watermarks
    numbers = [issue, *([int(marks["pull_request"])] if marks.get("pull_request") else [])]
    try:
        for number in numbers:
            _take_comments(owner, forge, number)
        for check in forge.checks(branch_for(issue)):
            if session.refresh().ended:
                return
            session.receive(f"check:{check.kind}:{check.id}", "check", {
                "name": check.name, "conclusion": check.conclusion, "url": check.url,
                "kind": check.kind})
    except (Rejected, RunEnded) as exc:
        log(f"::warning::rio-ci: an observation was not taken in: {exc}")


def _take_comments(owner: Owner, forge: Forge, number: int) -> None:
    session = owner.session
    key = f"comments:{number}"
    last = int(session.proj.watermarks.get(key, 0))
    for comment in forge.comments(number, after_id=last):
        if session.refresh().ended:
            return
        command = steer_command(comment.body)
        if progress.MARKER in comment.body or comment.author.endswith("[bot]"):
            pass
        elif not may_steer(forge, comment.author, comment.association):
            log(f"rio-ci: comment {comment.id} by @{comment.author} ignored (no write access)")
        elif command == "stop":
            owner.end_in_failure(f"stopped by @{comment.author} ({comment.url})")
        elif command is None:
            session.receive(f"comment:{comment.id}", "comment", {
                "author": comment.author, "url": comment.url, "untrusted": True,
                "body": quote_untrusted(comment.body, COMMENT_QUOTE_BYTES)})
        # "/rio status" needs nothing here: this job rewrites the progress comment anyway.
        _watermark(session, key, comment.id)


def _watermark(session: Session, name: str, value: Any) -> None:
    with session.journal.write() as w:
        if w.proj.watermarks.get(name) != value:
            w.append("watermark", {"name": name, "value": value})


def publish_progress(env: ActionEnv, forge: Forge, session: Session, issue: int,
                     generation: int, outcome: str | None, *, note: str | None = None,
                     pull_request: str | None = None, final: bool = False) -> None:
    """Rewrite the progress comment from committed facts. A failed write is logged, never
    fatal: the work and the Session matter more than the report."""
    proj = session.refresh()
    status = progress.status_of(proj, outcome)
    body = progress.render(proj, status=status, run_url=env.run_url, generation=generation,
                           operation=f"{proj.session['id']}:{proj.last_seq}", note=note,
                           pull_request=pull_request)
    try:
        forge.upsert_comment(issue, progress.MARKER, body)
    except RioError as exc:
        log(f"::warning::rio-ci: the progress comment was not written: {exc}")
    if final and env.summary is not None:
        with env.summary.open("a") as stream:
            stream.write(body.replace(progress.MARKER, "") + "\n")


# --- finish ---------------------------------------------------------------------------------


def finish(env: ActionEnv, forge: Forge) -> dict[str, Any]:
    job = json.loads((env.state_dir / JOB_FILE).read_text())
    issue, db, generation = int(job["issue"]), Path(job["db"]), int(job["generation"])
    name = f"rio-session-{issue}"
    newer = _newer_generations(forge, name, set(job.get("seen") or []))
    notes = [n for n in [_rejections_note(job)] if n]
    owner = _take_over(db)
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


def _take_over(db: Path, patience: float = 10.0) -> Owner:
    """Become the Owner. The run step's process may take a moment to die after a cancel;
    its lock goes with it."""
    deadline = time.monotonic() + patience
    while True:
        try:
            return Owner(str(db))
        except OwnershipError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _newer_generations(forge: Forge, name: str, seen: set[int]) -> list[int]:
    """Artifact ids of ``name`` that this job did not see when it restored: another job
    published after us. A listing that fails counts as unknown, and unknown is not safe."""
    try:
        return [a.id for a in forge.artifacts(name) if a.id not in seen]
    except RioError as exc:
        log(f"::error::rio-ci: cannot list {name} to check for newer generations: {exc}")
        return [-1]


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
        _watermark(session, "pull_request", int(number.group(1)))
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
