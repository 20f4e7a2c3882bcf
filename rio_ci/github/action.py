"""``rio-ci action``: the GitHub Actions entry points (docs/github.md).

    run     (job.py) restore the Session, merged with its launch record → check out its
            branch → take in the event and re-scan comments and checks → run rounds within
            the time budget, pushing a launch record before every Worker starts
    finish  (finish.py, ``if: always()``) recover → persist generation + 1 offline → then
            the branch, the pull request (gated) and the progress comment
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
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rio_ci.forge.base import Forge
from rio_ci.github.contract import JOB_FILE, RUN_OUTPUTS, ActionInputs, write_outputs
from rio_ci.github.runner import report
from rio_ci.github.sweep import sweep
from rio_ci.github.triggers import is_setup_check

if TYPE_CHECKING:
    from rio_ci.forge.github import GitHubForge

FAILING = frozenset({"failed", "error", "interrupted"})


def action_command(phase: str, *, emit: Callable[[Any], None], forge: Forge | None = None) -> int:
    env = ActionInputs.from_environ(os.environ)
    if phase == "run":
        report(env, os.environ)  # before anything: a git too old ends the step here
    if phase == "finish" and not (env.state_dir / JOB_FILE).exists():
        # The run step ignored the event (or died before it had a Session): nothing to
        # persist, no outputs, so the composite's outputs stay the run step's.
        emit({"status": "ignored", "reason": "the run step left no Session"})
        return 0

    def connect() -> Forge:
        return forge if forge is not None else github_forge(env)

    if phase == "finish":
        from rio_ci.github.finish import finish

        # The API is reached only after the Session is persisted (docs/github.md).
        result = finish(env, connect)
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
    return 1 if result.get("status") in failing else 0


def asks_for_setup_check(env: ActionInputs) -> bool:
    """``rio.yml`` dispatched with ``check`` as its issue: the set-up check, in the rio job."""
    return env.event_name == "workflow_dispatch" and is_setup_check(env.event())


def github_forge(env: ActionInputs) -> GitHubForge:
    from rio_ci.forge.github import GitHubForge

    # PyGithub's spacing between requests is GitHub's advice against its secondary rate
    # limits; an API on this machine (a test fake, a local proxy) does not need it.
    host = urllib.parse.urlsplit(env.api_url).hostname or ""
    local = host == "localhost"
    with contextlib.suppress(ValueError):
        local = local or ipaddress.ip_address(host).is_loopback
    return GitHubForge(env.repository, env.token, env.api_url, throttle=not local)


__all__ = ["action_command"]
