"""CI on the agent's branch with the default token (docs/github.md): pushes made with the job
token start no workflow, so when ``.github/rio.yml`` names the CI workflow (``ci_workflow:``)
the finish step dispatches it on ``rio/issue-<n>`` after a push — and only then; a workflow
GitHub will not dispatch (no ``workflow_dispatch`` trigger, a token without ``actions:
write``) is a warning saying what to change."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from action_job import WAIT, Repository, git, script
from fakes.github.base import Recorded
from fakes.github_api import FakeGitHub

from tests.kit import add, cmd_cell

pytestmark = pytest.mark.people(alice="write")

CONFIGURED = "ci_workflow: ci.yml\n"
WRITE = [add(cmd_cell("python3", "-c", "open('fix.txt', 'w').write('fixed\\n')"))]
# The rio job's permissions as rio.yml ships them: actions read only.
SHIPPED = {
    "contents": "write",
    "issues": "write",
    "pull-requests": "write",
    "actions": "read",
    "checks": "read",
}
CASES = {  # config, the script's rounds, ci.yml has workflow_dispatch, token, dispatched, warning
    "pushed": (CONFIGURED, [WRITE, WAIT], True, None, True, None),
    "nothing pushed": (CONFIGURED, [WAIT], True, None, False, None),
    "not configured": ("", [WRITE, WAIT], True, None, False, None),
    "no workflow_dispatch trigger": (
        CONFIGURED,
        [WRITE, WAIT],
        False,
        None,
        False,
        "ci.yml was not dispatched on rio/issue-1: it has no workflow_dispatch trigger; add "
        "`workflow_dispatch:` under the `on:` of .github/workflows/ci.yml",
    ),
    "token without actions: write": (
        CONFIGURED,
        [WRITE, WAIT],
        True,
        SHIPPED,
        False,
        "ci.yml was not dispatched on rio/issue-1: the token may not dispatch workflows; give "
        "the rio job `actions: write`",
    ),
}


def branch_head(origin: Path, branch: str) -> str | None:
    try:
        return git(origin, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
    except subprocess.CalledProcessError:
        return None


@pytest.mark.parametrize("case", sorted(CASES))
def test_finish_dispatches_the_ci_workflow_on_the_agents_branch_after_a_push(
    tmp_path: Path, gh: FakeGitHub, case: str
) -> None:
    config, rounds, accepts, permissions, dispatched, warning = CASES[case]
    files = {".github/rio.yml": config} if config else {}
    repo = Repository(tmp_path, gh, files=files)
    gh.add_workflow("ci.yml", dispatch=accepts)
    if permissions is not None:
        gh.tokens[gh.token].permissions = permissions
    pushed_then: list[str | None] = []

    def at_dispatch(req: Recorded) -> None:  # what the origin holds when CI is asked for
        if req.method == "POST" and req.path.endswith("/actions/workflows/ci.yml/dispatches"):
            pushed_then.append(branch_head(repo.origin, "rio/issue-1"))

    gh.observers.append(at_dispatch)

    issue, job = repo.labeled_issue(script(*rounds))

    assert issue == 1 and job.finish.code == 0, job.logs
    head = branch_head(repo.origin, "rio/issue-1")
    if dispatched:
        assert gh.dispatches == [{"workflow": "ci.yml", "ref": "rio/issue-1", "inputs": {}}]
        assert head is not None and pushed_then == [head]  # after the push, of that commit
        assert repo.branch_file("rio/issue-1", "fix.txt") == "fixed"
        assert "rio-ci: dispatched ci.yml on rio/issue-1" in job.logs
    else:
        assert gh.dispatches == []
    # The comment says first what the Session waits for: that CI run, or a person.
    (comment,) = repo.progress_comments(issue)
    (said,) = [line for line in comment["body"].splitlines() if line.startswith("**Next")]
    if dispatched:
        assert said.startswith("**Next: CI.** `ci.yml` runs on `rio/issue-1`; its result wakes")
    else:
        assert said.startswith("**Next: you.** Nothing is running: the model waits for a comment")
    if warning is None:
        assert "was not dispatched" not in job.logs + job.summary
    else:
        assert warning in job.summary and warning in job.logs
        assert head is not None  # the push itself went through
    if case == "nothing pushed":
        assert head is None and pushed_then == []
