"""The run step of ``rio-ci action`` (docs/github.md).

    restore the newest valid generation, merged with the launch record a lost runner left
    → start a Session (label, ``/rio <request>``, a follow-up after the run ended) or go on
    with the restored one → check out ``rio/issue-<n>`` → take in the event, re-scan
    comments and checks → rounds within the time budget, a launch record pushed before every
    Worker starts → the tree handed back, the checkout's ``.git`` rebuilt
    (``workspace.reseal``: nothing a Cell wrote there runs in a later step)

A comment or check event that brings nothing new (a duplicate, a comment by someone without
write access when no dropped comment waits, anything on an ended run that starts no
follow-up) stops before ``job.json`` exists: no generation, no push, no progress write
(``/rio status`` still rewrites the progress comment). A label or a dispatch always goes on:
someone asked for the Session to run.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from rio_ci.core.errors import ModelError, RioError, UsageError
from rio_ci.core.projection import Projection
from rio_ci.core.timeline import JOB_MARK
from rio_ci.forge.base import Forge
from rio_ci.forge.issues import branch_for, issue_of_branch
from rio_ci.github import starts, timers, workspace
from rio_ci.github.comment import Pacer, publish_problem, publish_progress
from rio_ci.github.contract import (
    JOB_FILE,
    ActionInputs,
    Config,
    log,
    log_error,
    seal_state_dir,
    warn,
)
from rio_ci.github.generations import rejections_note, restore
from rio_ci.github.git import Git
from rio_ci.github.images import ImageFetcher
from rio_ci.github.intake import may_steer, take_in
from rio_ci.github.job_state import Exit, JobState, Restored, RestoreFailed, write_job
from rio_ci.github.listen import Listener
from rio_ci.github.record import Fenced, LaunchRecord, RecordError
from rio_ci.github.sweep import sweep
from rio_ci.github.triggers import Trigger, classify, request_of, steer_command
from rio_ci.model.providers import parse_price, priced_models
from rio_ci.reports import progress
from rio_ci.reports.live import LiveLog
from rio_ci.reports.next_step import MODEL_ERROR_TODO
from rio_ci.rounds.loop import RoundLoop
from rio_ci.run.owner import Owner, handle_signals
from rio_ci.session.session import Session

TIMER_REFUSALS = 5  # rounds of "that Timer is too far" a job gives the model before it stops
Start = Literal["created", "restored", "republish"]


def run(
    env: ActionInputs, forge: Forge, *, clock: Callable[[], float] = time.monotonic
) -> dict[str, Any]:
    """The run step. ``clock`` paces the job's listening for new comments (listen.py); a
    test passes its own so that "30 s later" takes no time."""
    (env.state_dir / JOB_FILE).unlink(missing_ok=True)
    trigger = classify(
        env.event_name, env.event(), env.trigger_label, env.repository, env.assignee_trigger
    )
    if trigger.kind == "sweep":
        return sweep(env, forge)
    triaged = _triage(forge, trigger)
    if isinstance(triaged, Exit):
        return triaged.to_dict()
    issue, pull_request, writer = triaged
    try:
        config = Config.load(env.workspace, env.config)
    except UsageError as exc:
        todo = (
            f"Fix {env.config} on the default branch (docs/github.md, Configuration), then "
            "comment here to continue."
        )
        return publish_problem(env, forge, issue, str(exc), todo, exc.exit_code)
    if config.skipped is not None:
        warn(env, f"{config.skipped}; the configuration's defaults apply")
    for problem in config.problems:
        warn(env, problem)
    seal_state_dir(env)  # before anything is written there, and before any Cell runs
    db = env.state_dir / "session.sqlite3"
    repo = workspace.adopt(env.state_dir, env.workspace)  # before any Cell can change it
    remote = workspace.origin_url(repo)
    launches = LaunchRecord(env.state_dir / "record.git", remote, env.token, issue, env.run_id)
    restored = restore(env, forge, issue, db, launches)
    if isinstance(restored, RestoreFailed):
        return _restore_failed(env, forge, issue, restored)
    start = _start(env, forge, trigger, writer, issue, db, config, restored)
    if isinstance(start, Exit):
        return start.to_dict()
    created = start == "created"
    launches.begin(restored["generation"] or 0, 0 if created else restored["record_after"])
    job: JobState = {
        "generation": launches.generation,
        "artifact_id": restored["artifact_id"],
        "seen": restored["seen"],
        "saved_at": restored["saved_at"],
        "rejected": restored["rejected"],
        "record_after": launches.after_seq,
        "notes": restored["notes"],
        "record_imported": restored["record_imported"],
        "issue": issue,
        "db": str(db),
        "started": time.time(),
        "artifact_name": f"rio-session-{issue}",
        "retention_days": env.retention_days(config),
        "ci_workflow": config.ci_workflow,  # from the default branch, before any Cell ran
        "keep_generations": config.keep_generations,  # likewise (prune.py)
        "fresh": start != "restored" or bool(restored["record_imported"]),
    }
    write_job(env.state_dir, job)
    _check_out(env, repo, remote, issue, job)
    work = _Work(env, forge, trigger, writer, pull_request, clock)
    return work.run(job, launches)


def _triage(forge: Forge, trigger: Trigger) -> tuple[int, int | None, bool] | Exit:
    """(issue, pull request, whether the actor may steer) for an event that reaches a
    Session, or the job's ``ignored`` result."""
    issue, pull_request = trigger.issue, None
    if trigger.kind == "comment" and trigger.data.get("is_pull_request") and issue:
        pull_request, issue = issue, issue_of_branch(forge.pull_head(issue))
    if trigger.kind == "ignore" or issue is None:
        log(f"rio-ci: nothing to do ({trigger.reason or 'not a rio-ci pull request'})")
        return Exit("ignored", trigger.reason or "not a rio-ci pull request")
    writer = trigger.kind in ("start", "comment") and may_steer(
        forge, trigger.actor, trigger.association
    )
    if trigger.kind == "start" and not writer:
        what = "assignment" if trigger.data.get("by") == "assignment" else "label"
        log(f"rio-ci: @{trigger.actor} has no write access; the {what} is ignored")
        return Exit("ignored", f"{what} by a user without write access")
    if trigger.kind == "comment" and not writer:
        # Its job still re-scans: a maintainer's comment whose own job was dropped (a
        # concurrency group keeps one pending job) is delivered now.
        log(f"rio-ci: comment by @{trigger.actor} ignored (no write access); re-scanning")
    return issue, pull_request, writer


def _restore_failed(
    env: ActionInputs, forge: Forge, issue: int, restored: RestoreFailed
) -> dict[str, Any]:
    log(f"::error::rio-ci: {restored.problem}")
    with contextlib.suppress(RioError):
        if not restored.passing:
            forge.upsert_comment(
                issue,
                progress.MARKER,
                progress.render_problem(restored.problem, run_url=env.run_url),
            )
    return {"status": "error", "reason": restored.problem, "issue": issue}


def _check_out(env: ActionInputs, repo: Git, remote: str, issue: int, job: JobState) -> None:
    log("::group::rio-ci: working tree")
    existed = workspace.check_out(repo, branch_for(issue), remote, env.token)
    workspace.lend(repo, branch_for(issue))
    job["start"] = workspace.head(repo)
    job["branch_head"] = job["start"] if existed else ""  # "": not on GitHub, no checks
    write_job(env.state_dir, job)
    log(f"branch {branch_for(issue)} {'restored' if existed else 'started'}")
    log("::endgroup::")


@dataclass
class _Work:
    """The job's Owner and rounds, once the Session and the branch are in place."""

    env: ActionInputs
    forge: Forge
    trigger: Trigger
    writer: bool
    pull_request: int | None
    clock: Callable[[], float]

    def run(self, job: JobState, launches: LaunchRecord) -> dict[str, Any]:
        env = self.env
        owners: list[Owner] = []

        def before_spawn(cell_id: int, token: str) -> None:
            launches.push(owners[0].session, cell_id)

        owner = Owner(
            job["db"],
            before_spawn=before_spawn,
            confinement=env.confinement,
            notice=lambda message: warn(env, message),
        )
        owners.append(owner)
        restore_signals = handle_signals(owner.interrupted)
        result: dict[str, Any] = {}
        try:
            result = self.rounds(owner, job)
        except RecordError as exc:
            log(f"::error::rio-ci: {exc}")
            if isinstance(exc, Fenced):  # another job writes this Session: publish nothing
                write_job(env.state_dir, {**job, "fenced": True})
            result = {
                "status": "error",
                "reason": str(exc),
                "issue": job["issue"],
                "session": owner.session.proj.session["id"],
            }
        finally:
            restore_signals()
            with contextlib.suppress(RioError):
                owner.close()  # the tree handed back; then nothing a Cell wrote in .git stays
            problem = workspace.reseal(env.state_dir, env.workspace)
            if problem is not None:
                result["not_resealed"] = problem
        return result

    def rounds(self, owner: Owner, job: JobState) -> dict[str, Any]:
        env = self.env
        listener = Listener(
            owner,
            self.forge,
            job["issue"],
            clock=self.clock,
            warn=lambda m: warn(env, m),
            head=job.get("branch_head"),
        )
        result = _work(env, self.forge, listener, job, self.trigger, self.writer, self.pull_request)
        if (env.state_dir / JOB_FILE).exists():  # how the rounds ended, for finish's status
            job["outcome"] = result.get("status")
            for said in ("problem", "todo"):  # an error between rounds, for finish's comment
                if said in result:
                    job[said] = str(result[said])
            write_job(env.state_dir, job)
        return result


def _start(
    env: ActionInputs,
    forge: Forge,
    trigger: Trigger,
    writer: bool,
    issue: int,
    db: Path,
    config: Config,
    restored: Restored,
) -> Start | Exit:
    """``created``: this job created the Session (label, /rio request, a label whose own job
    was lost, follow-up);
    ``restored``: it goes on with the restored one; ``republish``: the restored run ended but
    its end never reached GitHub (an outage during its finish), so this job's finish
    publishes it; an Exit: there is nothing to do (the step's result)."""
    body = str(trigger.data.get("body") or "")
    request = request_of(body) if writer and trigger.kind == "comment" else None
    generation = restored["generation"]
    if generation is None:
        return _start_new(env, forge, trigger, issue, db, config, request, restored["saved_at"])
    session = Session.open(db)
    proj = session.refresh()
    comment = None
    try:
        if not proj.ended:
            return "restored"
        if trigger.kind != "start":
            comment = starts.follow_up_request(forge, proj, issue)
        if (
            comment is None
            and trigger.kind != "start"
            and writer
            and steer_command(body) == "status"
        ):
            publish_progress(env, forge, session, issue, generation, None)
    finally:
        session.close()
    if trigger.kind == "start":  # the label again, by a writer: a new Session on the issue
        starts.relabel(env, forge, db, config, proj, issue)
        return "created"
    if comment is not None:
        starts.follow_up(env, db, config, proj, comment)
        return "created"
    return _ended(proj, issue)


def _start_new(
    env: ActionInputs,
    forge: Forge,
    trigger: Trigger,
    issue: int,
    db: Path,
    config: Config,
    request: str | None,
    saved_at: str | None,
) -> Start | Exit:
    """No Session on the issue: a label, an assignment or a writer's ``/rio`` request starts
    one, and so does any other job while a writer's label or assignment that no Session
    took stands on the issue (its own job was cancelled while pending, or lost); anything
    else starts nothing."""
    if trigger.kind == "start":
        # An assignment labels the issue too: the sweep looks only at labelled issues.
        label = trigger.data.get("by") == "assignment"
        starts.from_issue(env, forge, db, config, issue, label=label)
        return "created"
    if request is None:
        standing = starts.lost_start(env, forge, trigger, issue, saved_at)
        if standing is not None:
            label = standing.how == "assignment"
            starts.from_issue(env, forge, db, config, issue, label=label)
            return "created"
    if request is not None and not trigger.data.get("is_pull_request"):
        starts.from_issue(
            env,
            forge,
            db,
            config,
            issue,
            (str(trigger.actor), str(trigger.data.get("url")), request),
        )
        session = Session.open(db)
        try:  # the request is in the goal, not a message
            session.set_watermark(f"comments:{issue}", trigger.data.get("comment_id"))
        finally:
            session.close()
        return "created"
    if trigger.kind == "resume":
        try:
            if timers.clear_next_wake(forge, issue, env.run_url):
                log(f"rio-ci: #{issue} has no Session any more; its next wake is cleared")
        except RioError as exc:
            warn(env, f"the progress comment of #{issue} was not checked: {exc}")
    log(
        f"rio-ci: issue #{issue} has no Session; label it {env.trigger_label!r} (or "
        "comment /rio <request>) to start one"
    )
    return Exit("ignored", f"issue #{issue} has no Session")


def _ended(proj: Projection, issue: int) -> Start | Exit:
    """A restored run that has ended and that nothing asks to follow up: publish its end if
    that never reached GitHub, else nothing to do."""
    assert proj.ended is not None
    if not proj.watermarks.get(progress.PUBLISHED) and not (
        proj.ended["result"] == "success" and proj.watermarks.get("pull_request")
    ):
        log(
            f"rio-ci: the end of #{issue}'s run ({proj.ended['result']}) never reached GitHub; "
            "this job publishes it"
        )
        return "republish"
    log(
        f"rio-ci: the run of #{issue} has ended ({proj.ended['result']}) and no maintainer "
        "asked for more; nothing is run"
    )
    return Exit(
        "ignored",
        f"the run has ended ({proj.ended['result']}); nothing new",
        issue=issue,
        session=proj.session["id"],
    )


def _work(
    env: ActionInputs,
    forge: Forge,
    listener: Listener,
    job: JobState,
    trigger: Trigger,
    writer: bool,
    pull_request: int | None,
) -> dict[str, Any]:
    issue = int(job["issue"])
    owner = listener.owner
    session = owner.session
    problem, note = workspace.pin(Path(session.proj.session["cwd"]), env.workspace)
    if note:
        log(f"rio-ci: {note}")
    if problem is not None:
        log(f"::error::rio-ci: {problem}")
        publish_progress(env, forge, session, issue, job["generation"], None, note=problem)
        return _result("error", session.proj, issue, problem)
    base = session.refresh().last_seq
    if not session.proj.ended:  # this job, in the history the comment shows, before the
        # recovery: what it finds of a job cut off without its finish belongs to this one
        session.set_watermark(JOB_MARK, job_label(env))
    owner.recover()
    if pull_request is not None:
        session.set_watermark("pull_request", pull_request)
    listener.prime()  # its first look, one interval from now, re-scans after this one
    take_in(
        owner,
        forge,
        issue,
        warn=lambda message: warn(env, message),
        reported=trigger.data.get("check"),
        fetcher=ImageFetcher(env.server_url, env.api_url, env.token),
        head=job.get("branch_head"),
    )
    if trigger.kind in ("comment", "check") and not job["fresh"] and quiet(session, base):
        (env.state_dir / JOB_FILE).unlink(missing_ok=True)
        if writer and steer_command(str(trigger.data.get("body") or "")) == "status":
            publish_progress(env, forge, session, issue, job["generation"], "waiting")
        log(f"rio-ci: nothing new for the Session of #{issue}: no rounds, no new generation")
        return _result("ignored", session.proj, issue, "nothing new for the Session")
    return _rounds(env, forge, listener, job)


def _result(status: str, proj: Projection, issue: int, reason: str | None) -> dict[str, Any]:
    return {"status": status, "reason": reason, "issue": issue, "session": proj.session["id"]}


def _rounds(env: ActionInputs, forge: Forge, listener: Listener, job: JobState) -> dict[str, Any]:
    """The job's model rounds, within its time budget, with the listener and the paced
    progress comment between them."""
    issue, owner = int(job["issue"]), listener.owner
    session = owner.session
    label = job_label(env)
    publish_progress(env, forge, session, issue, job["generation"], None, note=rejections_note(job))
    proj = session.refresh()
    if proj.ended:
        status = "succeeded" if proj.ended["result"] == "success" else "failed"
        return _result(status, proj, issue, proj.ended["reason"])
    try:
        given = parse_price(env.price) if env.price else None
        model, fallback = priced_models(
            env.model, env.fallback_model, effort=env.effort, price=given, stored=proj.prices
        )
    except (UsageError, ModelError) as exc:
        return _no_model(env, proj, issue, exc)
    if given is not None:
        session.set_price(model.name, asdict(given))
    live = LiveLog(session, sys.stderr, groups=True)  # each round collapsed in the job's log
    pacer = Pacer(lambda: publish_progress(env, forge, session, issue, job["generation"], None))

    def between_rounds() -> None:  # new comments and reviews in; the progress comment out
        listener()
        pacer()

    loop = RoundLoop(
        owner,
        model,
        live=live,
        external_wakeups=True,
        fallback=fallback,
        between_rounds=between_rounds,
        job_label=label,
    )
    deadline = time.monotonic() + env.budget_minutes * 60
    for _ in range(TIMER_REFUSALS):
        outcome = loop.run(deadline)
        if outcome.status != "waiting" or not timers.refuse_far_timers(
            session, job["retention_days"]
        ):
            break
    live.close()
    if owner.running is not None:
        owner.stop_running(
            "owner_interrupted" if outcome.status == "interrupted" else "owner_deadline"
        )
    proj = session.refresh()
    if proj.ended and str(proj.ended["reason"]).startswith("model error"):
        # The provider refused: the comment's Next says what to check (finish writes it).
        log_error(f"{proj.ended['reason']}. {MODEL_ERROR_TODO}")
    return {**_result(outcome.status, proj, issue, outcome.reason), "next_wake": proj.next_wake()}


def _no_model(
    env: ActionInputs, proj: Projection, issue: int, exc: UsageError | ModelError
) -> dict[str, Any]:
    """The model cannot be asked (an unknown id, no price, no key): an ``::error::`` now; the
    finish step writes the problem and what to do on the issue and in the step summary."""
    todo = (
        "Set the repository secret the action's `anthropic-api-key` input reads (docs/github.md), "
        "then comment here to continue."
        if isinstance(exc, ModelError)
        else "Fix the action's `model` input (docs/models.md), then comment here to continue."
    )
    log_error(f"{exc}. {todo}")
    said = {"problem": str(exc), "todo": todo, "exit_code": exc.exit_code}
    return {**_result("error", proj, issue, str(exc)), **said}


def job_label(env: ActionInputs) -> str:
    return f"GitHub Actions run {env.run_id}"


def quiet(session: Session, base: int) -> bool:
    """Nothing new since seq ``base`` but watermarks, and nothing the round loop would do."""
    proj = session.refresh()
    now = time.time()
    kinds = {e["kind"] for e in session.events(after=base)}
    return kinds <= {"watermark"} and not (
        proj.inbox
        or proj.turn
        or proj.controls
        or (proj.queued() and not proj.pause)
        or any(t["deadline"] <= now for t in proj.timers.values())
    )
