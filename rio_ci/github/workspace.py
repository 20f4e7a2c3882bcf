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
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rio_ci.errors import ForgeError
from rio_ci.run.environment import SECRET_NAME

AUTHOR = ["-c", "user.name=rio-ci", "-c", "user.email=rio-ci@users.noreply.github.com"]
# Settings that would let the checkout's own configuration run a program or reroute the token.
SAFE_CONFIG = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("credential.helper", ""),
    ("protocol.ext.allow", "never"),
)


def git(
    workspace: Path,
    *args: str,
    remote: str | None = None,
    token: str | None = None,
    check: bool = True,
    stdin: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run git in ``workspace`` under the rules above; ``remote`` and ``token`` give the token
    to that URL only. ``check``: a failure raises ``ForgeError`` with git's last line."""
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith("GIT_CONFIG_") and not SECRET_NAME.search(k)
        },
        **(extra_env or {}),
    }
    settings = list(SAFE_CONFIG)
    if token and remote:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        settings.append((f"http.{remote}.extraheader", f"AUTHORIZATION: basic {basic}"))
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    for index, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    env["GIT_TERMINAL_PROMPT"] = "0"
    done = subprocess.run(
        ["git", *args],
        cwd=workspace,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        input=stdin,
    )
    if check and done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        raise ForgeError(f"git {args[0]} failed: {message[-1] if message else done.returncode}")
    return done


def origin_url(workspace: Path) -> str:
    """The URL of ``origin`` as the checkout step left it (read before any Cell runs)."""
    url = git(workspace, "remote", "get-url", "origin").stdout.strip()
    if not url:
        raise ForgeError(f"{workspace} has no 'origin' remote")
    return url


def check_out(workspace: Path, branch: str, remote: str, token: str | None) -> str | None:
    """Check out ``branch`` from ``remote`` if it exists there and return its commit, else
    start it from the current commit and return None. A remote that cannot be asked raises
    ``ForgeError``: starting afresh then would put the agent on a stale tree whose push is
    later refused."""
    listed = git(
        workspace,
        "ls-remote",
        "--heads",
        remote,
        f"refs/heads/{branch}",
        remote=remote,
        token=token,
    ).stdout
    if not listed.strip():
        git(workspace, "checkout", "--quiet", "-B", branch)
        return None
    git(
        workspace,
        "fetch",
        "--quiet",
        "--no-tags",
        remote,
        f"+refs/heads/{branch}:refs/remotes/origin/{branch}",
        remote=remote,
        token=token,
    )
    git(workspace, "checkout", "--quiet", "-B", branch, f"refs/remotes/origin/{branch}")
    return head(workspace)


def head(workspace: Path) -> str:
    return git(workspace, "rev-parse", "HEAD").stdout.strip()


@dataclass(frozen=True)
class Checkpoint:
    """What ``checkpoint`` did: the commit it pushed (None when there was nothing new, and
    nothing was pushed), and the paths GitHub refused, left out of the push (they stay in
    the working tree, uncommitted), with GitHub's words for why."""

    sha: str | None
    refused: tuple[str, ...] = ()
    reason: str = ""


def checkpoint(
    workspace: Path,
    branch: str,
    message: str,
    remote: str,
    token: str | None,
    start: str,
    exclude: list[Path] | None = None,
) -> Checkpoint:
    """Commit every change of the working tree to ``branch`` and push it to ``remote`` —
    only when there is something new since ``start`` (the commit the job began from), so a
    job that changed nothing pushes nothing and never re-creates a branch a merge deleted.

    A push GitHub refuses for named paths (workflow files without the ``workflows``
    permission, files over 100 MB) is made again as one commit on ``start`` holding
    everything but those paths; other refusals raise ``ForgeError``."""
    if git(workspace, "rev-parse", "--abbrev-ref", "HEAD").stdout.strip() != branch:
        git(workspace, "checkout", "--quiet", "-B", branch)
    git(
        workspace,
        "add",
        "--all",
        "--",
        ".",
        *[f":(exclude){p}" for p in (exclude or []) if _inside(p, workspace)],
    )
    if git(workspace, "diff", "--cached", "--quiet", check=False).returncode != 0:
        git(workspace, *AUTHOR, "commit", "--quiet", "--no-verify", "-m", message)
    sha = head(workspace)
    if sha == start:
        return Checkpoint(None)
    refused: list[str] = []
    reasons: list[str] = []
    for _ in range(PUSH_ATTEMPTS):
        done = git(
            workspace,
            "push",
            "--porcelain",
            "--no-verify",
            remote,
            f"{sha}:refs/heads/{branch}",
            remote=remote,
            token=token,
            check=False,
        )
        if done.returncode == 0:
            if refused:
                git(workspace, "reset", "--quiet", sha)  # the refused files stay, uncommitted
            return Checkpoint(sha, tuple(refused), "; ".join(reasons))
        paths, why = refused_paths(done.stderr + done.stdout)
        if not paths or set(paths) <= set(refused):
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise ForgeError(f"git push failed: {lines[-1] if lines else done.returncode}")
        refused += [p for p in paths if p not in refused]
        reasons += [w for w in why if w not in reasons]
        sha = _without(workspace, start, refused, message)
    raise ForgeError(f"git push was refused {PUSH_ATTEMPTS} times; refused so far: {refused}")


PUSH_ATTEMPTS = 3
# GitHub's refusals that name a path (read from all of git's output: the workflow refusal
# comes inside "[remote rejected] (...)", the size refusal as "remote: error:" lines).
_WORKFLOW = re.compile(
    r"refusing to allow an? [^\n]*? to create or update workflow `([^`]+)`"
    r" without `?[a-z]+`? (?:permission|scope)"
)
_LARGE = re.compile(
    r"File (\S.*?) is [0-9.]+ MB; this exceeds GitHub's file size limit of "
    r"[0-9.]+ MB"
)


def refused_paths(output: str) -> tuple[list[str], list[str]]:
    """The paths a refused push names, and why (one line per kind of refusal)."""
    paths: list[str] = []
    reasons: list[str] = []
    for pattern, why in (
        (_WORKFLOW, "workflow files need the `workflows` permission"),
        (_LARGE, "GitHub refuses files over 100 MB"),
    ):
        found = list(pattern.finditer(output))
        if found:
            reasons.append(f"{why} (GitHub: {found[0].group(0)})")
        paths += dict.fromkeys(m.group(1) for m in found if m.group(1) not in paths)
    return paths, reasons


def _without(workspace: Path, start: str, paths: list[str], message: str) -> str:
    """One commit on ``start`` whose tree is HEAD's with ``paths`` as ``start`` had them."""
    index = workspace / ".git" / "rio-ci-index"
    scratch = {"GIT_INDEX_FILE": str(index)}
    try:
        git(workspace, "read-tree", "HEAD", extra_env=scratch)
        for path in paths:
            old = git(workspace, "ls-tree", start, "--", path).stdout.split()
            if old:
                git(
                    workspace,
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    f"{old[0]},{old[2]},{path}",
                    extra_env=scratch,
                )
            else:
                git(workspace, "update-index", "--force-remove", "--", path, extra_env=scratch)
        tree = git(workspace, "write-tree", extra_env=scratch).stdout.strip()
    finally:
        index.unlink(missing_ok=True)
    return git(
        workspace,
        *AUTHOR,
        "commit-tree",
        tree,
        "-p",
        start,
        "-m",
        f"{message} (without {len(paths)} path(s) GitHub refused)",
    ).stdout.strip()


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
        return (
            f"the Session's working directory {recorded} is another directory on this "
            f"runner, not this job's checkout {workspace}; nothing was run"
        ), None
    try:
        recorded.parent.mkdir(parents=True, exist_ok=True)
        recorded.symlink_to(real, target_is_directory=True)
    except OSError as exc:
        return f"cannot link the Session's working directory {recorded} to {workspace}: {exc}", None
    return None, f"the Session's working directory {recorded} now leads to {workspace}"


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True
