"""CI on the agent's branch with the default job token (docs/github.md, "CI on the agent's
branch").

Pushes made with the job token start no workflow run, ``workflow_dispatch`` and
``repository_dispatch`` excepted. So when ``.github/rio.yml`` names the repository's CI
workflow (``ci_workflow:``), the finish step dispatches it on ``rio/issue-<n>`` after each
push: its run tests the commit just pushed (a dispatched run's commit is the last one of the
branch it was dispatched on), its checks show on the agent's pull request, and its end wakes
the Session (``workflow_run``). GitHub refuses the dispatch when that branch's copy of the
workflow has no ``workflow_dispatch`` trigger, and when the token lacks ``actions: write``;
either is a warning saying what to change, never a failed job.
"""

from __future__ import annotations

from rio_ci.core.errors import ForgeError
from rio_ci.forge.base import Forge
from rio_ci.github.contract import ActionInputs, log, warn

NO_TRIGGER = 422  # GitHub: "Workflow does not have 'workflow_dispatch' trigger"
FORBIDDEN = 403
MISSING = 404


def dispatch_ci(env: ActionInputs, forge: Forge, workflow: str | None, branch: str) -> bool:
    """Dispatch ``workflow`` on ``branch`` (just pushed); whether it was. Nothing to do when
    no CI workflow is configured."""
    if workflow is None:
        return False
    try:
        forge.dispatch(workflow, branch, {})
    except ForgeError as exc:
        warn(env, f"{workflow} was not dispatched on {branch}: {_why(workflow, exc)}")
        return False
    log(f"rio-ci: dispatched {workflow} on {branch} (ci_workflow in {env.config})")
    return True


def _why(workflow: str, exc: ForgeError) -> str:
    if exc.status == NO_TRIGGER and "workflow_dispatch" in str(exc):
        return (
            f"it has no workflow_dispatch trigger; add `workflow_dispatch:` under the `on:` "
            f"of .github/workflows/{workflow} so the agent's pull request gets its checks"
        )
    if exc.status == FORBIDDEN:
        return (
            "the token may not dispatch workflows; give the rio job `actions: write` "
            "(docs/github.md, CI on the agent's branch)"
        )
    if exc.status == MISSING:
        return f"this repository has no workflow .github/workflows/{workflow}; fix ci_workflow"
    return str(exc)
