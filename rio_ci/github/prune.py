"""The prune step of ``rio-ci action``: superseded generations deleted (docs/github.md
"Requests, rate limits and storage").

The composite's last step, after ``actions/upload-artifact`` succeeded. While the run step
saw fewer than ``keep_generations`` generations, there is nothing to delete and nothing is
asked. Otherwise it lists the Session's generations once and verifies there the one just
uploaded (the upload step's
``artifact-id``): this job's artifact name, not expired, uploaded by this very run, from
this repository. Then, of this repository's older generations, it keeps the newest
``keep_generations`` - 1 (the one uploaded makes ``keep_generations``) and the one this
job's run step restored — the newest generation a restore has verified — and deletes the
rest. A job that published an orphan copy (another job wrote the Session meanwhile) or
uploaded nothing deletes nothing. Nothing here stops a job: a failed listing or deletion is
a warning (without ``actions: write`` GitHub refuses every deletion: one warning, and the
generations stay until they expire).
"""

from __future__ import annotations

from typing import Any

from rio_ci.core.errors import ForgeError, RioError
from rio_ci.forge.base import Artifact, Forge
from rio_ci.github.contract import DEFAULT_KEEP_GENERATIONS, ActionInputs, log, warn
from rio_ci.github.job_state import read_job


def prune(env: ActionInputs, forge: Forge) -> dict[str, Any]:
    job = read_job(env.state_dir)
    name = str(job["artifact_name"])
    if env.artifact_id is None or env.artifact_name != name:
        log(f"rio-ci: no generation of {name} was uploaded by this job; nothing is deleted")
        return {"status": "ignored", "reason": f"no generation of {name} uploaded"}
    keep = int(job.get("keep_generations") or DEFAULT_KEEP_GENERATIONS)
    if len(job.get("seen") or []) < keep:  # fewer generations before this one: none to go
        log(f"rio-ci: {name}: fewer than {keep} generations; none is superseded yet")
        return {"status": "pruned", "deleted": [], "kept": keep}
    try:
        listed = forge.artifacts(name)
        ours = forge.repository_id()
    except RioError as exc:
        warn(env, f"{name}: superseded generations were not deleted: {exc}")
        return {"status": "kept", "reason": str(exc)}
    uploaded = next((a for a in listed if a.id == env.artifact_id), None)
    problem = unverified(env, name, uploaded, ours)
    if problem is not None or uploaded is None:
        warn(env, f"{name}: superseded generations were not deleted: {problem}")
        return {"status": "kept", "reason": problem}
    older = [
        a
        for a in listed  # newest first
        if a.id != uploaded.id
        and not a.expired
        and (a.created_at, a.id) < (uploaded.created_at, uploaded.id)
        and a.repository_id == a.head_repository_id == ours
    ]
    doomed = [a for a in older[keep - 1 :] if a.id != job.get("artifact_id")]
    deleted = delete(env, forge, name, doomed)
    log(
        f"rio-ci: {name}: generation {uploaded.id} uploaded and verified; deleted "
        f"{len(deleted)} superseded generation(s), keeping the newest {keep}"
    )
    return {"status": "pruned", "deleted": deleted, "kept": keep}


def unverified(
    env: ActionInputs, name: str, uploaded: Artifact | None, ours: int | None
) -> str | None:
    """Why the artifact the upload step named is not this job's new generation, or None."""
    if uploaded is None:
        return f"the uploaded artifact {env.artifact_id} is not listed"
    if uploaded.expired:
        return f"the uploaded artifact {uploaded.id} is listed as expired"
    if str(uploaded.run_id) != env.run_id:
        return f"the uploaded artifact {uploaded.id} names run {uploaded.run_id}, not this one"
    if ours is None or uploaded.repository_id != ours or uploaded.head_repository_id != ours:
        return f"the uploaded artifact {uploaded.id} is not shown as this repository's"
    return None


def delete(env: ActionInputs, forge: Forge, name: str, doomed: list[Artifact]) -> list[int]:
    """Delete ``doomed``, oldest last; stop at the first refusal (the others would meet the
    same one), with a warning."""
    deleted = []
    for artifact in doomed:
        try:
            forge.delete_artifact(artifact.id)
        except RioError as exc:
            refused = isinstance(exc, ForgeError) and exc.status == 403
            hint = " (the rio job needs actions: write)" if refused else ""
            warn(env, f"{name}: superseded generation {artifact.id} was not deleted: {exc}{hint}")
            break
        deleted.append(artifact.id)
    return deleted
