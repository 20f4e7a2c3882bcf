"""Generations of a Session artifact: restoring the newest valid one at the start of a job,
and knowing at the end whether another job published meanwhile."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from rio_ci.errors import OwnershipError, RioError
from rio_ci.github import artifact
from rio_ci.github.env import ActionEnv, log
from rio_ci.github.forge.base import Forge
from rio_ci.run.owner import Owner


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


def rejections_note(job: dict[str, Any]) -> str | None:
    rejected = job.get("rejected") or []
    if not rejected:
        return None
    return (f"Refused {len(rejected)} saved generation(s) and continued from generation "
            f"{job['generation']}: " + "; ".join(rejected))


def take_over(db: Path, patience: float = 10.0) -> Owner:
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


def newer_generations(forge: Forge, name: str, seen: set[int]) -> list[int]:
    """Artifact ids of ``name`` that this job did not see when it restored: another job
    published after us. A listing that fails counts as unknown, and unknown is not safe."""
    try:
        return [a.id for a in forge.artifacts(name) if a.id not in seen]
    except RioError as exc:
        log(f"::error::rio-ci: cannot list {name} to check for newer generations: {exc}")
        return [-1]
