"""The working environment on GitHub: the agent's files live on branch ``rio/issue-<n>``.

At the start of a job the branch is checked out (if it exists); at the end of every job —
also a cancelled one — the working tree is committed to it and pushed to ``origin``. The
token travels in git's environment (GIT_CONFIG_*), never on a command line or in
``.git/config``.
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

from rio_ci.errors import ForgeError

AUTHOR = ["-c", "user.name=rio-ci", "-c", "user.email=rio-ci@users.noreply.github.com"]


def _git(workspace: Path, *args: str, token: str | None = None,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_CONFIG_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="http.extraheader",
                   GIT_CONFIG_VALUE_0=f"AUTHORIZATION: basic {basic}")
    done = subprocess.run(["git", *args], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    if check and done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise ForgeError(f"git {args[0]} failed: {message[-1] if message else done.returncode}")
    return done


def check_out(workspace: Path, branch: str, token: str | None) -> bool:
    """Check out ``branch`` from origin if it exists there (True), else start it here."""
    fetched = _git(workspace, "fetch", "--quiet", "origin", f"+refs/heads/{branch}:"
                   f"refs/remotes/origin/{branch}", token=token, check=False)
    if fetched.returncode == 0:
        _git(workspace, "checkout", "--quiet", "-B", branch, f"refs/remotes/origin/{branch}")
        return True
    _git(workspace, "checkout", "--quiet", "-B", branch)
    return False


def checkpoint(workspace: Path, branch: str, message: str, token: str | None,
               exclude: list[Path] | None = None) -> str | None:
    """Commit every change of the working tree to ``branch`` and push it. Returns the new
    commit's sha, or None when there was nothing to commit (the branch is still pushed)."""
    current = _git(workspace, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip()
    if current != branch:
        _git(workspace, "checkout", "--quiet", "-B", branch)
    _git(workspace, "add", "--all", "--", ".",
         *[f":(exclude){p}" for p in (exclude or []) if _inside(p, workspace)])
    staged = _git(workspace, "diff", "--cached", "--quiet", check=False).returncode != 0
    sha = None
    if staged:
        _git(workspace, *AUTHOR, "commit", "--quiet", "--no-verify", "-m", message)
        sha = _git(workspace, "rev-parse", "HEAD").stdout.strip()
    _git(workspace, "push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", token=token)
    return sha


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True
