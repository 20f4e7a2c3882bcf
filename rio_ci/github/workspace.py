"""The working environment on GitHub: the agent's files live on branch ``rio/issue-<n>``.

At the start of a job the branch is checked out (if it exists); at the end of every job —
also a cancelled one — the working tree is committed to it and pushed.

The checkout's files, ``.git/config`` included, are writable by the Cells that ran in it, so
git is run as if that configuration were hostile:

- the remote is the URL read *before* any Cell ran (``origin_url``), passed explicitly, so a
  rewritten ``remote.origin.url`` cannot redirect a push;
- the token travels only to fetch and push, in git's environment (``GIT_CONFIG_*``) as an
  ``http.<that URL>.extraheader`` — never on a command line, never in ``.git/config``, never
  sent to another URL (an ``insteadOf`` rewrite no longer matches);
- hooks and fsmonitor are off and credential helpers are cleared for every git command, and
  git's environment carries none of the job's secrets.

This narrows what a Cell can make git do; it is not a sandbox (see docs/github.md).
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

from rio_ci.errors import ForgeError
from rio_ci.run.environment import SECRET_NAME

AUTHOR = ["-c", "user.name=rio-ci", "-c", "user.email=rio-ci@users.noreply.github.com"]
# Settings that would let the checkout's own configuration run a program or reroute the token.
SAFE_CONFIG = (("core.hooksPath", os.devnull), ("core.fsmonitor", "false"),
               ("credential.helper", ""), ("protocol.ext.allow", "never"))


def _git(workspace: Path, *args: str, remote: str | None = None, token: str | None = None,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_CONFIG_") and not SECRET_NAME.search(k)}
    settings = list(SAFE_CONFIG)
    if token and remote:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        settings.append((f"http.{remote}.extraheader", f"AUTHORIZATION: basic {basic}"))
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    for index, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    env["GIT_TERMINAL_PROMPT"] = "0"
    done = subprocess.run(["git", *args], cwd=workspace, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    if check and done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise ForgeError(f"git {args[0]} failed: {message[-1] if message else done.returncode}")
    return done


def origin_url(workspace: Path) -> str:
    """The URL of ``origin`` as the checkout step left it (read before any Cell runs)."""
    url = _git(workspace, "remote", "get-url", "origin").stdout.strip()
    if not url:
        raise ForgeError(f"{workspace} has no 'origin' remote")
    return url


def check_out(workspace: Path, branch: str, remote: str, token: str | None) -> bool:
    """Check out ``branch`` from ``remote`` if it exists there (True), else start it from the
    current commit (False). A remote that cannot be asked raises ``ForgeError``: starting
    afresh then would put the agent on a stale tree whose push is later refused."""
    listed = _git(workspace, "ls-remote", "--heads", remote, f"refs/heads/{branch}",
                  remote=remote, token=token).stdout
    if not listed.strip():
        _git(workspace, "checkout", "--quiet", "-B", branch)
        return False
    _git(workspace, "fetch", "--quiet", "--no-tags", remote,
         f"+refs/heads/{branch}:refs/remotes/origin/{branch}", remote=remote, token=token)
    _git(workspace, "checkout", "--quiet", "-B", branch, f"refs/remotes/origin/{branch}")
    return True


def checkpoint(workspace: Path, branch: str, message: str, remote: str, token: str | None,
               exclude: list[Path] | None = None) -> str | None:
    """Commit every change of the working tree to ``branch`` and push it to ``remote``.
    Returns the new commit's sha, or None when there was nothing to commit (the branch is
    still pushed)."""
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
    _git(workspace, "push", "--quiet", "--no-verify", remote, f"HEAD:refs/heads/{branch}",
         remote=remote, token=token)
    return sha


def pin(recorded: Path, workspace: Path) -> tuple[str | None, str | None]:
    """Make a Session's working directory, fixed when the Session was created, lead to this
    job's checkout. Hosted runners reuse one path, so usually nothing is done; a runner whose
    work folder moved gets a symlink at the old path (replacing a link an earlier job left).
    Returns ``(problem, note)``: why that is impossible, and what was done."""
    real = workspace.resolve()
    if recorded.exists() and recorded.resolve() == real:
        return None, None
    if recorded.is_symlink():
        recorded.unlink()
    elif recorded.exists():
        return (f"the Session's working directory {recorded} is another directory on this "
                f"runner, not this job's checkout {workspace}; nothing was run"), None
    try:
        recorded.parent.mkdir(parents=True, exist_ok=True)
        recorded.symlink_to(real, target_is_directory=True)
    except OSError as exc:
        return f"cannot link the Session's working directory {recorded} to {workspace}: " \
            f"{exc}", None
    return None, f"the Session's working directory {recorded} now leads to {workspace}"


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True
