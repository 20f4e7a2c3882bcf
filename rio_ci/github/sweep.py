"""The sweep decided in Python (docs/github.md ``schedule``): resume every labelled Session whose
Timer is due, each in its own job, from the progress comment's metadata alone."""

from __future__ import annotations

import time
from typing import Any

from rio_ci.forge.base import Forge
from rio_ci.github.contract import ActionInputs, log
from rio_ci.reports import progress


def sweep(env: ActionInputs, forge: Forge) -> dict[str, Any]:
    """Resume every labelled Session whose Timer is due, each in its own job. Decided from
    the progress comment's metadata alone: no journal is downloaded. (The shipped sweep is
    rio-sweep.yml, a few lines of shell that also switch it off; this is the same decision
    for a workflow that runs ``rio-ci action`` on ``schedule``.)"""
    now, dispatched = time.time(), []
    for issue in forge.issues_with_label(env.trigger_label):
        comment = forge.find_comment(issue.number, progress.MARKER)
        meta = progress.read_meta(comment.body) if comment else None
        wake = meta.get("next_wake") if meta else None
        due = isinstance(wake, int | float) and not isinstance(wake, bool) and wake <= now
        if meta and not meta.get("ended") and due:
            forge.dispatch(
                env.workflow_file,
                env.ref_name or forge.default_branch(),
                {"issue": str(issue.number)},
            )
            dispatched.append(issue.number)
    log(f"rio-ci: sweep dispatched {dispatched or 'nothing'}")
    return {"status": "swept", "dispatched": dispatched}
