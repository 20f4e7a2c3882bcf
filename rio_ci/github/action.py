"""``rio-ci action``: the GitHub Actions entry points (docs/github.md).

    run     (job.py) restore the Session, merged with its launch record → check out its
            branch → take in the event and re-scan comments and checks → run rounds within
            the time budget, pushing a launch record before every Worker starts
    finish  (finish.py, ``if: always()``) recover → persist generation + 1 offline → then
            the branch, the pull request (gated) and the progress comment
    prune   (prune.py, after the upload) verify the generation uploaded, delete the ones it
            supersedes beyond the newest ``keep_generations``
    sweep   (``schedule``) dispatch a job for every Session whose Timer is due, reading only
            the progress comment's metadata
    check   (``workflow_dispatch`` with ``check`` as the issue) the set-up check
            (setup_check.py): the key, the token, the label, the sweep, the workflows, the
            configuration, each with what to fix, in the step summary

Every write to GitHub is idempotent: the progress comment is found by its marker and
edited, the pull request is found by its head branch, and each observation enters the
Inbox under a stable id, so a replayed or re-scanned event is taken in once. ``run`` hands
``finish`` what it needs in ``$RUNNER_TEMP/rio/job.json``; ``finish`` without that file had
nothing to persist and writes no outputs.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rio_ci.forge.base import Forge
from rio_ci.github.contract import (
    JOB_FILE,
    KEPT_FILE,
    RUN_OUTPUTS,
    ActionInputs,
    log,
    write_outputs,
)
from rio_ci.github.runner import report
from rio_ci.github.sweep import sweep
from rio_ci.github.triggers import is_setup_check

if TYPE_CHECKING:
    from rio_ci.forge.github import GitHubForge

FAILING = frozenset({"failed", "error", "interrupted"})
# How long a step after the time budget (finish, prune; and the sweep, the set-up check) may
# wait for GitHub's rate limits in all: the example workflows leave ten minutes between
# time-budget-minutes and timeout-minutes for them.
STEP_WAIT_SECONDS = 120.0


def action_command(phase: str, *, emit: Callable[[Any], None], forge: Forge | None = None) -> int:
    env = ActionInputs.from_environ(os.environ)
    if phase == "run":
        report(env, os.environ)  # before anything: a git too old ends the step here
        (env.state_dir / KEPT_FILE).unlink(missing_ok=True)  # no other job's answers
    if phase in ("finish", "prune") and not (env.state_dir / JOB_FILE).exists():
        # The run step ignored the event (or died before it had a Session): nothing to
        # persist, no outputs, so the composite's outputs stay the run step's.
        emit({"status": "ignored", "reason": "the run step left no Session"})
        return 0

    def connect() -> Forge:
        return forge if forge is not None else step_forge(env, phase)

    if phase == "finish":
        from rio_ci.github.finish import finish

        # The API is reached only after the Session is persisted (docs/github.md).
        result = finish(env, connect)
    elif phase == "prune":
        from rio_ci.github.prune import prune

        result = prune(env, connect())
    elif phase == "check" or asks_for_setup_check(env):
        from rio_ci.github.setup_check import check_setup

        result = check_setup(env, lambda: github_forge(env))
        write_outputs(env, result, RUN_OUTPUTS)
    elif phase == "sweep" or env.event_name == "schedule":
        result = sweep(env, connect())
        write_outputs(env, result, RUN_OUTPUTS)
    else:
        from rio_ci.github.job import run

        result = run(env, connect())
        write_outputs(env, result, RUN_OUTPUTS)
    emit(result)
    # finish did its work when it reports a run that was cut off: only run says "interrupted"
    failing = FAILING - {"interrupted"} if phase == "finish" else FAILING
    if result.get("status") not in failing:
        return 0
    code = result.get("exit_code")  # a usage error's own (2), written on the issue first
    return code if isinstance(code, int) and code > 0 else 1


def asks_for_setup_check(env: ActionInputs) -> bool:
    """``rio.yml`` dispatched with ``check`` as its issue: the set-up check, in the rio job."""
    return env.event_name == "workflow_dispatch" and is_setup_check(env.event())


def step_forge(
    env: ActionInputs, phase: str, *, sleep: Callable[[float], None] = time.sleep
) -> GitHubForge:
    """The GitHub of the step ``phase``: the run step waits out rate limits within its time
    budget, the others (after it) within ``STEP_WAIT_SECONDS``; ``sleep`` is how it waits."""
    seconds = env.budget_minutes * 60 if phase == "run" else STEP_WAIT_SECONDS
    return github_forge(env, seconds, sleep=sleep)


def github_forge(
    env: ActionInputs,
    wait_seconds: float = STEP_WAIT_SECONDS,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> GitHubForge:
    """The job's GitHub: told the repository's id (``GITHUB_REPOSITORY_ID``, so it need not
    read the repository), sharing its answers with the job's other steps (``KEPT_FILE``),
    and waiting out rate limits for at most ``wait_seconds`` from now (the run step: its
    time budget)."""
    from rio_ci.forge.github import GitHubForge
    from rio_ci.forge.github_limits import Patience

    # PyGithub's spacing between requests is GitHub's advice against its secondary rate
    # limits; an API on this machine (a test fake, a local proxy) does not need it.
    host = urllib.parse.urlsplit(env.api_url).hostname or ""
    local = host == "localhost"
    with contextlib.suppress(ValueError):
        local = local or ipaddress.ip_address(host).is_loopback
    return GitHubForge(
        env.repository,
        env.token,
        env.api_url,
        throttle=not local,
        repository_id=env.repository_id,
        patience=Patience(wait_seconds, sleep=sleep, log=log),
        kept=env.state_dir / KEPT_FILE,
    )


__all__ = ["action_command"]
