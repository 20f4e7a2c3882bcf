"""Timers on GitHub: the artifact must outlive them, and the sweep must be on while they wait.

- **Retention.** A Session lives only as long as its newest artifact. Every generation is
  uploaded with ``retention-days`` = the repository's retention as the runner reports it
  (``GITHUB_RETENTION_DAYS``; it also caps ``retention-days``), lowered by ``retention_days``
  in the configuration if that is smaller (default 90, GitHub's default), and a Timer
  due later than that minus a day of margin (the sweep runs late under
  load) is refused: it is withdrawn and the model gets an Inbox message ``timer_refused``
  saying why, so it never waits on a wake-up that would find no Session.
- **The sweep.** After the progress comment carrying the new ``next_wake`` is written, if
  ``rio-sweep.yml`` exists but is not active, a ``repository_dispatch`` ``rio-timer`` asks the
  workflow's ``sweep-wake`` job to switch it on (the job token here has ``actions: read``
  only; ``repository_dispatch`` needs only ``contents: write``).
- **A sweep that finds no Session** (its artifacts expired) clears the progress comment's
  ``next_wake``, so the sweep stops dispatching it.
"""

from __future__ import annotations

import time

from rio_ci.core.errors import RioError
from rio_ci.forge.base import Forge
from rio_ci.github.contract import log
from rio_ci.reports import progress
from rio_ci.reports.next_step import SWEEP_WORKFLOW
from rio_ci.session.session import Session

DAY = 86_400.0
MARGIN_DAYS = 1
WAKE_EVENT = "rio-timer"


def horizon(retention_days: int, now: float | None = None) -> float:
    """The latest deadline a Timer may have: the artifact uploaded now must outlive it."""
    return (time.time() if now is None else now) + (retention_days - MARGIN_DAYS) * DAY


def refuse_far_timers(session: Session, retention_days: int) -> list[str]:
    """Withdraw every waiting Timer due past the horizon and tell the model; returns their
    ids. On an ended run nothing waits, so nothing is refused."""
    proj = session.refresh()
    latest = horizon(retention_days)
    refused = []
    for timer in sorted(proj.timers.values(), key=lambda t: t["id"]):
        if timer["deadline"] <= latest or proj.ended:
            continue
        days = (timer["deadline"] - time.time()) / DAY
        reason = (
            f"Timer {timer['id']!r} is due in {days:.1f} days, past this repository's "
            f"artifact retention of {retention_days} days (the runner's "
            "GITHUB_RETENTION_DAYS, or retention_days in .github/rio.yml if lower): the "
            "Session would be deleted before it fires. Timers "
            f"may be due at most {retention_days - MARGIN_DAYS} days ahead; it was "
            "withdrawn."
        )
        session.cancel_timer(timer["id"])
        log(f"::warning::rio-ci: {reason}")
        try:
            session.receive(
                f"timer_refused:{timer['id']}",
                "timer_refused",
                {"id": timer["id"], "deadline": timer["deadline"], "reason": reason},
            )
        except RioError as exc:
            log(f"::warning::rio-ci: the model was not told: {exc}")
        refused.append(timer["id"])
    return refused


NOT_INSTALLED = (
    f"{SWEEP_WORKFLOW} is not installed: this Session's Timer fires only at its next event; "
    f"copy .github/workflows/{SWEEP_WORKFLOW} beside the workflow (docs/github.md)"
)


def sweep_installed(forge: Forge) -> bool:
    """Whether the sweep workflow exists: asked before the progress comment is written, which
    tells the maintainer whether anything will wake the Timer. Whether it is on is asked again
    after the comment (``wake_sweep``): a sweep may switch itself off in between."""
    return forge.workflow_state(SWEEP_WORKFLOW) is not None


def wake_sweep(forge: Forge) -> str:
    """Ask for the sweep to be switched on when it is installed and off; what was done
    (``NOT_INSTALLED`` when there is no sweep: the caller warns)."""
    state = forge.workflow_state(SWEEP_WORKFLOW)
    if state is None:
        return NOT_INSTALLED
    if state == "active":
        return f"{SWEEP_WORKFLOW} is on"
    forge.repository_dispatch(WAKE_EVENT)
    return f"{SWEEP_WORKFLOW} was {state}: sent repository_dispatch {WAKE_EVENT} to switch it on"


def clear_next_wake(forge: Forge, issue: int, run_url: str) -> bool:
    """A dispatched job found no Session: rewrite the progress comment without a wake-up,
    if it still announces one, so the sweep stops dispatching this issue. True if it did."""
    comment = forge.find_comment(issue, progress.MARKER)
    meta = progress.read_meta(comment.body) if comment else None
    if not meta or meta.get("next_wake") is None:
        return False
    forge.upsert_comment(
        issue,
        progress.MARKER,
        progress.render_problem(
            "the Session's saved generations are gone (artifacts expire after the repository's "
            "retention period), so there is nothing to resume; label the issue again to start "
            "over",
            run_url=run_url,
            operation=f"gone:{issue}",
        ),
    )
    return True
