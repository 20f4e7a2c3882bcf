"""The progress comment's first line: who acts next, and how (docs/github.md, "Next").

A maintainer opening the issue reads this before anything else: whether rio-ci is at work,
what will wake the Session (a Timer and the sweep that fires it, the CI run on its branch), or
that nothing runs until a person acts — and then what they can do.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from rio_ci.core.projection import Projection
from rio_ci.core.timeline import Timeline
from rio_ci.reports import markdown as md

SWEEP_WORKFLOW = "rio-sweep.yml"  # the scheduled workflow that fires Timers (docs/github.md)
CONTINUE = "Comment here to continue, `/rio stop` to end."
MODEL_ERROR_TODO = (
    "The provider refused the request: check the key (the action's `anthropic-api-key`), "
    "the `model` input and the account's limits. "
)
_PULL_NUMBER = re.compile(r"/pull/([0-9]+)(?:\.html)?\Z")


@dataclass(frozen=True)
class Waiting:
    """What the job that wrote the comment knows about what comes after it.

    ``outcome``: how its rounds ended (``waiting``, ``deadline``, ``interrupted``; None while
    they run); ``sweep``: whether the sweep workflow is installed (None: not looked up);
    ``ci``: the CI workflow dispatched on the Session's branch in this job, if any;
    ``problem`` and ``todo``: the error that stopped the job before or between rounds
    (outcome ``error``) and what to do about it."""

    outcome: str | None = None
    sweep: bool | None = None
    ci: str | None = None
    problem: str | None = None
    todo: str | None = None


def next_line(
    proj: Projection,
    timeline: Timeline,
    waiting: Waiting,
    *,
    pull_request: str | None,
    branch: str | None,
) -> str:
    """``**Next:** …``: one paragraph saying who acts next and how."""
    if proj.ended:
        return "**Next: you.** " + _ended(proj, pull_request)
    outcome = waiting.outcome
    if waiting.problem:
        return problem_line(waiting.problem, waiting.todo)
    if outcome is None:
        rounds = len(timeline.rounds)
        return (
            f"**Next: rio-ci** is at work (job {max(timeline.job, 1)}, "
            f"{rounds} round{'s' if rounds != 1 else ''} so far). "
            "A comment here steers it; `/rio stop` ends the run."
        )
    if outcome == "waiting" and proj.timers:
        return _timer(proj, waiting.sweep)
    if outcome == "waiting" and waiting.ci:
        on = f" on {md.code(branch)}" if branch else ""
        return (
            f"**Next: CI.** {md.code(waiting.ci)} runs{on}; its result wakes the Session. "
            "To go on sooner, comment here; `/rio stop` ends the run."
        )
    why = {
        "waiting": "the model waits for a comment or a check",
        "deadline": "this job's time budget ran out with work left",
        "interrupted": "this job was cut off (cancelled, timed out or lost)",
    }.get(outcome, "this job has ended")
    return f"**Next: you.** Nothing is running: {why}. {CONTINUE}"


def _ended(proj: Projection, pull_request: str | None) -> str:
    assert proj.ended is not None
    if proj.ended["result"] != "success":
        reason = str(proj.ended["reason"])
        check = MODEL_ERROR_TODO if reason.startswith("model error") else ""
        return (
            f"The run failed: {md.plain(reason, 300)}. {check}Comment here to start a "
            "follow-up Session from where it stopped, or label the issue again to start over."
        )
    if pull_request:
        number = _PULL_NUMBER.search(pull_request)
        name = f"#{number.group(1)}" if number else "the pull request"
        return (
            f"Review [{name}]({pull_request}); comment here or review the pull request to "
            "ask for changes."
        )
    return (
        "The run succeeded, but no pull request is open (the note below says why). Comment "
        "here to ask for more."
    )


def _timer(proj: Projection, sweep: bool | None) -> str:
    wake = min(t["deadline"] for t in proj.timers.values())
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(wake))
    if sweep is False:
        return (
            f"**Next: you.** A Timer is due at {when}, **but nothing will wake it: "
            f"`{SWEEP_WORKFLOW}` is not installed** (copy `.github/workflows/{SWEEP_WORKFLOW}` "
            f"beside the rio workflow; docs/github.md). {CONTINUE}"
        )
    sweep_says = (
        f"the sweep (`{SWEEP_WORKFLOW}`, installed) starts the job that goes on"
        if sweep
        else f"the sweep (`{SWEEP_WORKFLOW}`) starts the job that goes on, if it is installed"
    )
    return (
        f"**Next: a Timer** at {when}: {sweep_says}. To go on sooner, comment here; "
        "`/rio stop` ends the run."
    )


def problem_line(problem: str, what_to_do: str | None = None) -> str:
    """``**Next: you.**`` after an error that stopped the job before or between rounds."""
    todo = f" {what_to_do}" if what_to_do else ""
    return f"**Next: you.** rio-ci stopped: {md.plain(problem, 600)}.{todo}"
