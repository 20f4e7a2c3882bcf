"""``rio-ci action``: the GitHub Actions entry points (SPEC §13).

    run     (job.py) restore the Session, merged with its launch record → check out its
            branch → take in the event and re-scan comments and checks → run rounds within
            the time budget, pushing a launch record before every Worker starts
    finish  (finish.py, ``if: always()``) recover → persist generation + 1 offline → then
            the branch, the pull request (gated) and the progress comment
    sweep   (``schedule``) dispatch a job for every Session whose Timer is due, reading only
            the progress comment's metadata

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
from typing import Any

from rio_ci.github import progress
from rio_ci.github.env import ActionEnv, log
from rio_ci.github.forge.base import Forge

JOB_FILE = "job.json"
FAILING = frozenset({"failed", "error", "interrupted"})
OUTPUTS = {"status": "status", "session": "session", "next-wake": "next_wake",
           "pull-request": "pull_request", "artifact-name": "artifact_name",
           "retention-days": "retention_days"}
RUN_OUTPUTS = ("status", "session", "next-wake", "pull-request", "artifact-name")


def action_command(phase: str, *, emit: Callable[[Any], None],
                   forge: Forge | None = None) -> int:
    env = ActionEnv.from_environ(os.environ)
    if phase == "finish" and not (env.state_dir / JOB_FILE).exists():
        # The run step ignored the event (or died before it had a Session): nothing to
        # persist, no outputs, so the composite's outputs stay the run step's.
        emit({"status": "ignored", "reason": "the run step left no Session"})
        return 0

    def connect() -> Forge:
        return forge if forge is not None else github_forge(env)

    if phase == "finish":
        from rio_ci.github.finish import finish

        # The API is reached only after the Session is persisted (SPEC §13.1).
        result = finish(env, connect)
    elif phase == "sweep" or env.event_name == "schedule":
        result = sweep(env, connect())
        write_outputs(env, result, RUN_OUTPUTS)
    else:
        from rio_ci.github.job import run

        result = run(env, connect())
        write_outputs(env, result, RUN_OUTPUTS)
    emit(result)
    return 1 if result.get("status") in FAILING else 0


def github_forge(env: ActionEnv) -> Forge:
    from rio_ci.github.forge.github import GitHubForge

    # PyGithub's spacing between requests is GitHub's advice against its secondary rate
    # limits; an API on this machine (a test fake, a local proxy) does not need it.
    host = urllib.parse.urlsplit(env.api_url).hostname or ""
    local = host == "localhost"
    with contextlib.suppress(ValueError):
        local = local or ipaddress.ip_address(host).is_loopback
    return GitHubForge(env.repository, env.token, env.api_url, throttle=not local)


def sweep(env: ActionEnv, forge: Forge) -> dict[str, Any]:
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
            forge.dispatch(env.workflow_file, env.ref_name or "main", {"issue": str(issue.number)})
            dispatched.append(issue.number)
    log(f"rio-ci: sweep dispatched {dispatched or 'nothing'}")
    return {"status": "swept", "dispatched": dispatched}


def write_outputs(env: ActionEnv, result: dict[str, Any], only: tuple[str, ...] = ()) -> None:
    """Append the step's outputs to ``GITHUB_OUTPUT`` (all of them, or the names in
    ``only``). Written twice in one step, a name takes its last value."""
    if env.output is None:
        return
    with env.output.open("a") as stream:
        for name, key in OUTPUTS.items():
            if only and name not in only:
                continue
            value = result.get(key)
            text = "" if value is None else str(value)
            stream.write(f"{name}={text.splitlines()[0] if text else ''}\n")


__all__ = ["action_command", "sweep", "write_outputs"]
