"""The finish step of ``rio-ci action`` (``if: always()``; docs/github.md).

Persist first, offline: recover (a cut-off run's ``started`` Execution becomes an
UnknownExecution), withdraw Timers past the retention horizon, and write generation + 1 to
``$RUNNER_TEMP/rio-artifact/`` with the outputs the upload step needs (``artifact-name``,
``retention-days``) — named from ``job.json``, what this job restored, never from the API.
Only then the network: the branch push (a refused path becomes a ``push_refused`` message,
a path the checkpoint left out a ``left_out`` one) and the dispatch of the repository's CI
on it (``ci_dispatch``), the pull request (only after the gate: the
validators pass again here), the progress comment, the sweep's wake-up. The snapshot is
written again after anything those commit, before finish exits. An outage, a 401/403, an
expired token or a git that does not finish on the way loses nothing. Last, the checkout's
git directories are rebuilt from what the run step kept (``workspace.reseal``): nothing a
Cell wrote there runs in a later step.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rio_ci.core.entities import Ended
from rio_ci.core.errors import RioError
from rio_ci.core.json_value import ascii_int
from rio_ci.faults.crashpoints import crash_point
from rio_ci.forge.base import Forge
from rio_ci.forge.issues import branch_for
from rio_ci.github import timers, workspace
from rio_ci.github.ci_dispatch import dispatch_ci
from rio_ci.github.comment import publish_progress
from rio_ci.github.contract import ActionInputs, log, warn, write_outputs
from rio_ci.github.generations import newer_generations, rejections_note, take_over
from rio_ci.github.git import Git
from rio_ci.github.job_state import JobState, read_job
from rio_ci.github.record import LaunchRecord
from rio_ci.reports import progress
from rio_ci.reports.publish import open_pull_request, remember_pull_request
from rio_ci.run.confinement import home as cell_home
from rio_ci.run.gate import pull_request_gate
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.store import artifact

FIRST_OUTPUTS = ("artifact-name", "retention-days")


def finish(env: ActionInputs, connect: Callable[[], Forge]) -> dict[str, Any]:
    job = read_job(env.state_dir)
    issue, generation = int(job["issue"]), int(job["generation"])
    notes = [n for n in [rejections_note(job)] if n]
    result: dict[str, Any] = {
        "issue": issue,
        "generation": generation + 1,
        "artifact_name": job["artifact_name"],
        "retention_days": job["retention_days"],
    }
    if job.get("fenced"):
        result.update(
            artifact_name=f"rio-orphan-{issue}-{env.run_id}",
            status="error",
            reason="another job wrote this Session's launch record meanwhile",
        )
    owner = take_over(Path(job["db"]), confinement=env.confinement)
    packed = None
    try:
        try:
            owner.recover()
            owner.hand_back()  # a run step killed before its own hand back
            timers.refuse_far_timers(owner.session, job["retention_days"])
            packed = _persist(env, job["db"], result, generation, job)
            write_outputs(env, result, FIRST_OUTPUTS)
            if job.get("fenced"):
                log(
                    f"::error::rio-ci: {result['reason']}; this job's Session is kept as the "
                    f"artifact {result['artifact_name']} and nothing is published"
                )
            else:
                result.update(_publish(env, connect, owner, job, notes))
        finally:
            with contextlib.suppress(RioError):
                owner.close()
    finally:  # also when publishing failed: what it committed is saved before finish exits
        # After the last Cell (the validators) and the last git: nothing a Cell wrote in the
        # checkout's .git outlives the step.
        problem = workspace.reseal(env.state_dir, env.workspace)
        if problem is not None:
            result["not_resealed"] = problem
        if packed is not None:
            if _last_seq(job["db"]) != packed:  # a push_refused message, validator results
                _persist(env, job["db"], result, generation, job)
            write_outputs(env, result)
    _remove_cell_home(env)
    return result


def _remove_cell_home(env: ActionInputs) -> None:
    """The job's steps end here: the Cell user's HOME and what it left in the machine's
    world-writable folders go, so nothing this Session's Cells left reaches the next job's
    Cells (docs/security.md, "A fresh Cell home"). Every Owner of the job has closed, and
    its Cells with it; any process of that user still alive is stopped first. A finish cut
    off before this leaves it to the next job's run step, which empties it first thing."""
    cell_user = env.confinement.cell_user
    if cell_user is None:
        return
    try:
        removed = cell_home.remove_named(cell_user)
    except RioError as exc:
        warn(env, f"the Cell home was not removed: {exc}")
        return
    if removed:
        log(f"rio-ci: removed the Cell home of {cell_user} ({len(removed)} path(s))")


def _publish(
    env: ActionInputs,
    connect: Callable[[], Forge],
    owner: Owner,
    job: JobState,
    notes: list[str],
) -> dict[str, Any]:
    """Everything after the Session is safe on disk: each part may fail alone."""
    session = owner.session
    issue = int(job["issue"])
    out: dict[str, Any] = {}
    problem = pull_request_gate(owner) if _succeeded(session) else None
    forge = None
    try:
        forge = connect()
    except RioError as exc:
        warn(
            env,
            f"the GitHub API cannot be reached ({exc}); the Session is saved, the "
            "pull request and the progress comment wait for the next job",
        )
    newer = (
        newer_generations(env, forge, job["artifact_name"], set(job.get("seen") or []))
        if forge is not None
        else []
    )
    if newer:
        # Publishing would bury the newer history; the copy is kept under another name,
        # which restore never lists, for whoever investigates.
        orphan = f"rio-orphan-{issue}-{env.run_id}"
        log(
            f"::error::rio-ci: {job['artifact_name']} gained generation(s) {newer} during this "
            f"job; not publishing over them (this job's Session is kept as the artifact "
            f"{orphan})"
        )
        return {
            "status": "error",
            "artifact_name": orphan,
            "reason": f"a newer generation of {job['artifact_name']} exists",
        }
    owner.hand_back()  # the validators ran as the Cell user; git works on the harness's tree
    _supersede(env, job)
    done = _checkpoint(env, session, job, notes, out)
    ci = None  # a push by the job token starts no CI: the job dispatches it
    pushed = out["commit"] is not None
    if pushed and forge and dispatch_ci(env, forge, job.get("ci_workflow"), branch_for(issue)):
        ci = job.get("ci_workflow")
    pull = None
    if problem is not None:
        notes.append(f"no pull request: {problem}")
        log(f"::error::rio-ci: no pull request: {problem}")
        out.update(status="error", reason=problem)
    elif _succeeded(session) and forge is not None:
        pull = _pull_request(env, forge, session, issue, notes, _not_on_branch(done))
    proj = session.refresh()
    out.setdefault("status", _status(proj.ended, job))
    out.update(session=proj.session["id"], next_wake=proj.next_wake(), pull_request=pull)
    if forge is None:
        return out
    written = publish_progress(
        env,
        forge,
        session,
        issue,
        int(job["generation"]) + 1,
        None if proj.ended else _status(None, job),
        note="; ".join(notes) or None,
        pull_request=pull,
        final=True,
        sweep=_sweep_installed(env, forge) if proj.next_wake() is not None else None,
        ci=ci,
        problem=(job["problem"], job.get("todo")) if job.get("problem") else None,
    )
    if (
        proj.ended
        and written
        and (pull is not None or problem is not None or proj.ended["result"] != "success")
    ):
        # The end is on GitHub: later jobs need not publish it again (job.py).
        session.set_watermark(progress.PUBLISHED, int(job["generation"]) + 1)
    if proj.next_wake() is not None:
        _wake_sweep(env, forge)
    return out


def _sweep_installed(env: ActionInputs, forge: Forge) -> bool | None:
    """Whether the sweep that fires a waiting Timer exists, for the comment (None: GitHub
    did not say)."""
    try:
        return timers.sweep_installed(forge)
    except RioError as exc:
        warn(env, f"whether the sweep is installed is not known: {exc}")
        return None


def _wake_sweep(env: ActionInputs, forge: Forge) -> None:
    """A Timer waits: the sweep must be on (timers.py). A repository without one gets a
    warning: nothing will fire the Timer on time."""
    try:
        said = timers.wake_sweep(forge)
    except RioError as exc:
        warn(env, f"the sweep could not be switched on for the Timer: {exc}")
        return
    if said == timers.NOT_INSTALLED:
        warn(env, said)
    else:
        log(f"rio-ci: {said}")


def _supersede(env: ActionInputs, job: JobState) -> None:
    """Generation + 1 is written: the launch record is history now (record.py), and must
    never rebuild the Session once that generation is gone. A failure here is a warning:
    the record then still merges as before, into a generation that already holds it."""
    generation = int(job["generation"]) + 1
    try:
        # The origin the harness kept before any Cell ran (docs/github.md), as the push.
        origin = workspace.origin_url(workspace.harness_git(env.state_dir, env.workspace))
        launches = LaunchRecord(
            env.state_dir / "record.git", origin, env.token, int(job["issue"]), env.run_id
        )
        if launches.supersede(generation):
            log(f"rio-ci: the launch record is superseded by generation {generation}")
    except RioError as exc:
        warn(env, f"the launch record was not marked superseded by generation {generation}: {exc}")


def _checkpoint(
    env: ActionInputs,
    session: Session,
    job: JobState,
    notes: list[str],
    out: dict[str, Any],
) -> workspace.Checkpoint | None:
    """The checkpoint, its commit in ``out["commit"]``; what it left out or GitHub refused is
    a note, a warning and an Inbox message. A failure (a git that did not finish included)
    is a note, an error line and ``out["not_checkpointed"]``, never the job's end."""
    issue = int(job["issue"])
    out["commit"] = None
    if not job.get("start"):  # the run step never checked the branch out: nothing to save
        return None
    try:
        # The harness's git directory and the origin it kept: not job.json's "remote", nor
        # anything in the checkout.
        repo = workspace.harness_git(env.state_dir, env.workspace)
        done = workspace.checkpoint(
            repo,
            branch_for(issue),
            f"rio-ci: checkpoint of #{issue} (run {env.run_id})",
            workspace.origin_url(repo),
            env.token,
            job["start"],
            exclude=[env.runner_temp],
        )
    except RioError as exc:
        notes.append(f"the working tree was not checkpointed: {exc}")
        log(f"::error::rio-ci: the working tree was not checkpointed: {exc}")
        out["not_checkpointed"] = str(exc)
        return None
    out["commit"] = done.sha
    if done.left_out:
        out["left_out"] = [str(item) for item in done.left_out]
        _tell_left_out(env, session, issue, done, notes)
    if done.refused:
        _tell_refused(env, session, issue, done, notes)
    return done


LISTED = 50  # paths named in one message (the rest are counted)


def _tell_left_out(
    env: ActionInputs, session: Session, issue: int, done: workspace.Checkpoint, notes: list[str]
) -> None:
    shown = done.left_out[:LISTED]
    more = len(done.left_out) - len(shown)
    named = ", ".join(item.path for item in shown) + (f" and {more} more" if more else "")
    details = "; ".join(str(item) for item in done.left_out[:5])
    warn(
        env,
        f"the checkpoint of {branch_for(issue)} left out {len(done.left_out)} path(s), kept "
        f"in this job's working tree only: {details}{'; …' if len(done.left_out) > 5 else ''}",
    )
    notes.append(f"left out of the branch: {named}")
    digest = hashlib.sha256(json.dumps([str(i) for i in done.left_out]).encode()).hexdigest()
    with contextlib.suppress(RioError):  # an ended run takes no message
        session.receive(
            f"left_out:{digest[:16]}",
            "left_out",
            {
                "paths": [item.path for item in shown],
                "reasons": {item.path: item.why for item in shown},
                "more": more,
                "branch": branch_for(issue),
                "note": "the checkpoint did not give these to git (nested repositories, FIFOs, "
                "sockets, devices, files over the size cap): they are in this job's working "
                "tree only, uncommitted; the next job's checkout will not have them",
            },
        )


def _tell_refused(
    env: ActionInputs, session: Session, issue: int, done: workspace.Checkpoint, notes: list[str]
) -> None:
    reason = done.reason
    warn(
        env,
        f"GitHub refused {list(done.refused)} in the push of {branch_for(issue)}; "
        f"the rest was pushed. {reason}",
    )
    notes.append(f"not pushed (refused by GitHub): {', '.join(done.refused)}")
    digest = hashlib.sha256(json.dumps([done.sha, done.refused]).encode()).hexdigest()
    with contextlib.suppress(RioError):  # an ended run takes no message
        session.receive(
            f"push_refused:{digest[:16]}",
            "push_refused",
            {
                "paths": list(done.refused),
                "reason": reason,
                "branch": branch_for(issue),
                "note": "these files are in this job's working tree only, uncommitted: the "
                "next job's checkout will not have them",
            },
        )


def _not_on_branch(done: workspace.Checkpoint | None) -> list[str]:
    """What the pull request says is missing from the branch: left out, or refused."""
    if done is None:
        return []
    left = [str(item) for item in done.left_out[:LISTED]]
    if len(done.left_out) > LISTED:
        left.append(f"and {len(done.left_out) - LISTED} more")
    return [*left, *(f"{path}: refused by GitHub" for path in done.refused)]


def _pull_request(
    env: ActionInputs,
    forge: Forge,
    session: Session,
    issue: int,
    notes: list[str],
    missing: list[str],
) -> str | None:
    try:
        base = env.ref_name or forge.default_branch()
        diffstat = _diffstat(workspace.harness_git(env.state_dir, env.workspace), base)
        url = open_pull_request(
            forge, session, issue, base, diffstat=diffstat, not_on_branch=missing
        )
    except RioError as exc:
        notes.append(f"the pull request was not opened: {exc}")
        log(
            f"::error::rio-ci: the pull request was not opened: {exc}; the next job for the "
            "issue (any event on it) opens it"
        )
        return None
    remember_pull_request(session, url)
    return url


def _diffstat(repo: Git, base: str) -> str | None:
    """What the branch changes against ``base`` as fetched (``git diff --stat``), or None
    when the harness's git directory does not have ``base`` (a shallow clone of another
    ref). Read through the harness's own git, like the checkpoint it describes."""
    for ref in (f"refs/remotes/origin/{base}", f"refs/heads/{base}"):
        done = repo.run("diff", "--stat", "--no-color", f"{ref}...HEAD", check=False)
        if done.returncode == 0:
            return done.stdout
    return None


def _persist(
    env: ActionInputs, db: str, result: dict[str, Any], generation: int, job: JobState
) -> int:
    """Write generation + 1 into the artifact directory (no network); returns the seq it
    holds. The Owner may hold the Session meanwhile: the snapshot is SQLite's backup."""
    reader = Session.open(db)
    try:
        proj = reader.refresh()
        result.update(
            session=proj.session["id"],
            next_wake=proj.next_wake(),
            status=result.get("status") or _status(proj.ended, job),
        )
        # Written aside, then swapped in: the upload step may publish the directory under
        # the artifact-name already in the outputs, so it is never empty or half written.
        aside = env.artifact_dir.with_name(env.artifact_dir.name + ".next")
        if aside.exists():
            shutil.rmtree(aside)  # a half-written one from a finish killed before
        artifact.pack(
            Path(db),
            aside,
            generation=generation + 1,
            parent_generation=generation or None,
            run_id=ascii_int(env.run_id),
            next_wake=result["next_wake"],
        )
        crash_point("artifact_aside_written")
        artifact.replace_directory(aside, env.artifact_dir)
        return proj.last_seq
    finally:
        reader.close()


def _last_seq(db: str) -> int:
    session = Session.open(db)
    try:
        return session.proj.last_seq
    finally:
        session.close()


def _succeeded(session: Session) -> bool:
    ended = session.refresh().ended
    return bool(ended and ended["result"] == "success")


def _status(ended: Ended | None, job: JobState) -> str:
    """The job's status: how the run ended, else how its rounds stopped — ``waiting``,
    ``deadline`` (the time budget ran out), ``interrupted`` (cancelled; also when the run
    step left no outcome: it was cut off)."""
    if ended:
        return "succeeded" if ended["result"] == "success" else "failed"
    outcome = job.get("outcome")
    return outcome if outcome in ("waiting", "deadline", "error") else "interrupted"
