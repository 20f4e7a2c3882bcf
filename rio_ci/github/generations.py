"""Generations of a Session artifact: restoring the newest valid one at the start of a job,
merged with the launch record a lost runner may have left, and knowing at the end whether
another job published meanwhile."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path

from rio_ci.core.entities import Execution
from rio_ci.core.errors import OwnershipError, Rejected, RioError
from rio_ci.core.json_value import json_equal
from rio_ci.forge.base import Forge
from rio_ci.github import newest
from rio_ci.github.contract import ActionInputs, log, warn
from rio_ci.github.job_state import JobState, Restored, RestoreFailed
from rio_ci.github.provenance import Provenance
from rio_ci.github.record import LaunchRecord, tail_events
from rio_ci.run.confinement.settings import ConfinementSettings
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from rio_ci.store.at_rest import SCHEMA_VERSION
from rio_ci.store.launch_record import Record


def restore(
    env: ActionInputs, forge: Forge, issue: int, db: Path, launches: LaunchRecord
) -> Restored | RestoreFailed:
    """Put the newest valid generation at ``db``, merged with the launch record: what was
    restored, or why nothing may run: every saved generation was refused (starting over
    would publish over the lost history), the launch record cannot be read, or it shows a
    launch the restored Session would run again."""
    name = f"rio-session-{issue}"
    provenance = Provenance(forge, env.repository, env.workflow_ref)
    listed = forge.artifacts(name)
    if provenance.path is None and listed:
        return RestoreFailed(
            f"GITHUB_WORKFLOW_REF is {env.workflow_ref or 'not set'!r}, so no "
            f"artifact of {name} can be shown to come from this workflow's own runs "
            "(docs/github.md, whose artifacts are restored). Nothing was run."
        )
    # Every generation that exists now; finish treats any other one as a newer job's.
    seen = [a.id for a in listed]
    result = newest.restore_newest(
        forge, name, env.state_dir / "restore", provenance=provenance.problem, listed=listed
    )
    for skipped in result.skipped:
        warn(env, f"{name}: skipped artifact {skipped.artifact_id}: {skipped.reason}")
    problem = _refusals(name, result)
    if problem is not None:
        return RestoreFailed(problem)
    rejected = [str(r) for r in result.rejected]
    generation, artifact_id, after = _put_in_place(name, result, db)
    if artifact_id is not None:
        seen = sorted({*seen, artifact_id})
    try:
        found = launches.fetch()
    except RioError as exc:  # maybe passing: the progress comment keeps its next wake
        return RestoreFailed(f"{exc}. Nothing was run.", passing=True)
    notes = [found] if isinstance(found, str) else []
    merged = merge(db, found if isinstance(found, Record) else None, generation)
    if merged.problem:
        return RestoreFailed(merged.problem)
    notes += [merged.note] if merged.note else []
    for note in notes:
        log(f"::warning::rio-ci: {note}")
    if merged.adopted:
        after = 0  # the Session this job continues is newer than any artifact
    if merged.imported:
        log(
            f"rio-ci: took {merged.imported} event(s) from the launch record of a job whose "
            "runner was lost"
        )
    return {
        "generation": generation if db.exists() else None,
        "artifact_id": artifact_id,
        "seen": seen,
        "saved_at": max((a.created_at for a in listed), default=None),
        "rejected": rejected,
        "record_after": after,
        "notes": notes,
        "record_imported": merged.imported or merged.adopted,
    }


def _refusals(name: str, result: newest.RestoreResult) -> str | None:
    """Why nothing may run when no generation could be restored (each damaged one logged),
    or None. GitHub keeps listing an artifact past its retention, marked expired: a Session
    whose generations all expired is gone (docs/github.md), not damaged."""
    damaged = [r for r in result.rejected if r.reason != newest.EXPIRED]
    for rejection in damaged:
        log(f"::error::rio-ci: {name}: {rejection}")
    if result.restored is None and damaged:
        return (
            f"every saved generation of {name} was refused; the newest: "
            f"{result.rejected[0]}. Nothing was run."
        )
    if result.restored is None and result.rejected:
        log(
            f"rio-ci: every saved generation of {name} expired (artifact retention): its "
            "Session is gone"
        )
    return None


def _put_in_place(name: str, result: newest.RestoreResult, db: Path) -> tuple[int, int | None, int]:
    """Copy the restored snapshot to ``db`` (or leave none): (generation, artifact id, the
    last seq it holds); (0, None, 0) when there is none."""
    db.unlink(missing_ok=True)
    if result.restored is None:
        return 0, None, 0
    shutil.copyfile(result.restored.snapshot, db)
    generation = result.restored.manifest.generation
    session = Session.open(db)  # an older format is migrated here, before anything reads it
    after, older = session.proj.last_seq, session.migrated_from
    session.close()
    migrated = f" (Session format {older}, migrated to {SCHEMA_VERSION})" if older else ""
    log(f"rio-ci: restored generation {generation} of {name}{migrated}")
    return generation, result.restored.artifact.id, after


@dataclass(frozen=True)
class Merge:
    imported: int = 0
    adopted: bool = False
    note: str | None = None  # why the record was left out (logged, and in the progress)
    problem: str | None = None  # leaving it out could run a launched Cell again


def merge(db: Path, record: Record | None, generation: int) -> Merge:
    """Fold the launch record into the Session at ``db``: the events after the artifact's
    last seq, when the record's tail continues that very history (same Session id, the
    overlapping events identical, no gap). A record of a Session newer than the artifact
    (created by a job after the restored generation, which was never persisted) becomes the
    Session. Any other record is left out; if it shows a launch the Session has as queued,
    that is a problem (fail closed) rather than a rerun."""
    if record is None:
        return Merge()
    if record.superseded_by is not None:
        return _superseded(db, record, generation)
    if not db.exists():
        return _adopt(db, record, generation)
    session = Session.open(db)
    try:
        proj = session.refresh()
        if record.session_id != proj.session["id"]:
            if record.after_seq == 0 and record.generation == generation:
                session.close()
                return _adopt(db, record, generation)
            return Merge()  # an earlier Session's record (before a follow-up): history
        last = proj.last_seq
        why = None
        if record.after_seq > last:
            why = (
                f"the launch record starts after seq {record.after_seq}, but the restored "
                f"Session ends at seq {last}"
            )
        elif not _same_history(session, record, last):
            why = "the launch record and the restored Session differ in their common part"
        else:
            tail = [e for e in record.events if e["seq"] > last]
            try:
                session.import_tail(last, tail)
                return Merge(imported=len(tail))
            except (Rejected, ValueError, KeyError, TypeError) as exc:
                why = f"the launch record's tail does not fold: {exc}"
        return _left_out(proj.executions, record, why)
    finally:
        session.close()


def _superseded(db: Path, record: Record, generation: int) -> Merge:
    """A record that finish superseded with generation ``record.superseded_by`` is never
    used: that generation holds all of it. Restored, it (or a later one) makes the record
    history; an older generation restored is the record left out (failing closed on a
    launch it would rerun); none restored is a Session gone — every generation is."""
    if not db.exists():
        return Merge(
            note=f"the launch record was superseded by generation {record.superseded_by}, "
            "and no generation is left: the Session is gone"
        )
    if generation >= (record.superseded_by or 0):
        return Merge()
    session = Session.open(db)
    try:
        proj = session.refresh()
    finally:
        session.close()
    if proj.session["id"] != record.session_id:
        return Merge()  # an earlier Session's record (before a follow-up): history
    why = (
        f"the launch record was superseded by generation {record.superseded_by}, newer than "
        f"the restored generation {generation}"
    )
    return _left_out(proj.executions, record, why)


def _same_history(session: Session, record: Record, last: int) -> bool:
    mine = {e["seq"]: e for e in tail_events(session, record.after_seq) if e["seq"] <= last}
    return all(
        e["kind"] == mine[e["seq"]]["kind"] and json_equal(e["data"], mine[e["seq"]]["data"])
        for e in record.events
        if e["seq"] <= last
    )


def _left_out(executions: dict[str, Execution], record: Record, why: str) -> Merge:
    launched = {e["data"].get("cell_id") for e in record.events if e["kind"] == "execution_started"}
    queued = sorted(
        c
        for c in launched
        if (ex := executions.get(str(c))) is not None and ex["phase"] == "queued"
    )
    if queued:
        return Merge(
            problem=f"{why}, and it shows Cell(s) {queued} launched, which the "
            "restored Session would run again. Nothing was run; see "
            "docs/github.md (launch records) to continue."
        )
    return Merge(note=f"{why}; the record was left out")


def _adopt(db: Path, record: Record, generation: int) -> Merge:
    first = record.events[0] if record.events else None
    if (
        record.after_seq != 0
        or record.generation != generation
        or first is None
        or first["kind"] != "session_created"
    ):
        return Merge()
    data = first["data"]
    db.unlink(missing_ok=True)
    try:
        session = Session.create(
            db,
            data["goal"],
            Settings.stored(data),
            session_id=record.session_id,
        )
        try:
            created = next(tail_events(session, 0))
            if not json_equal(created["data"], data):
                raise ValueError("its first event cannot be made again here")
            session.import_tail(1, record.events[1:])
        finally:
            session.close()
    except (RioError, ValueError, KeyError, TypeError) as exc:
        db.unlink(missing_ok=True)
        return _left_out({}, record, f"the launch record's Session cannot be rebuilt: {exc}")
    log(
        f"rio-ci: the Session {record.session_id} was rebuilt from its launch record "
        "(its job's runner was lost before the finish step)"
    )
    return Merge(imported=len(record.events), adopted=True)


def rejections_note(job: JobState) -> str | None:
    rejected = job.get("rejected") or []
    notes = list(job.get("notes") or [])
    if rejected:
        notes.insert(
            0,
            f"Refused {len(rejected)} saved generation(s) and continued from "
            f"generation {job['generation']}: " + "; ".join(rejected),
        )
    return "; ".join(notes) or None


def take_over(
    db: Path, patience: float = 10.0, confinement: ConfinementSettings | None = None
) -> Owner:
    """Become the Owner (its Cells confined as ``confinement`` says, see ``Owner``) after the
    run step of the same job, whose Cell home it goes on with. The run step's process may
    take a moment to die after a cancel; its lock goes with it."""
    settings = replace(confinement or ConfinementSettings(), fresh_home=False)
    deadline = time.monotonic() + patience
    while True:
        try:
            return Owner(str(db), confinement=settings)
        except OwnershipError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def newer_generations(env: ActionInputs, forge: Forge, name: str, seen: set[int]) -> list[int]:
    """Artifact ids of ``name`` that this job did not see when it restored: another of
    rio's own jobs published after us (an artifact from anywhere else is skipped with a
    warning, so a fork cannot stop a job from publishing). An optional check: the per-issue
    concurrency group already makes this job the only writer, so a listing that fails (an
    outage, an expired token) is logged and counts as none."""
    provenance = Provenance(forge, env.repository, env.workflow_ref)
    try:
        newer = []
        for candidate in forge.artifacts(name):
            if candidate.id in seen:
                continue
            foreign = provenance.problem(candidate)
            if foreign is None:
                newer.append(candidate.id)
            else:
                warn(env, f"{name}: skipped artifact {candidate.id}: {foreign}")
        return newer
    except RioError as exc:
        log(f"::warning::rio-ci: cannot list {name} to check for newer generations: {exc}")
        return []
