"""The working tree on GitHub: the agent's files live on branch ``rio/issue-<n>``.

At the start of a job the branch is checked out (if it exists); at the end of every job —
also a cancelled one — the working tree is committed to it and pushed.

The checkout's files, ``.git/`` included, are writable by the Cells that ran in it, so the
harness never runs git on the checkout's own git directory: ``adopt`` copies its objects and
refs (before any Cell ran) into a git directory of the harness's own, and every later git
command uses that one, with the checkout as its working tree, under the rules of
``rio_ci/github/git.py``. The remote is the URL ``origin`` had before any Cell ran, kept in
that git directory's configuration, so neither a rewritten ``remote.origin.url`` nor a
rewritten ``job.json`` can redirect a push. ``lend`` copies the branch back into the
checkout's ``.git`` for the agent's own git commands; nothing of rio-ci reads it again, and
``reseal`` rebuilds it when a step of rio-ci's ends (``rio_ci.github.gitdirs``), so nothing a
Cell wrote there runs in a later step.

The checkpoint shows git only what ``rio_ci.github.survey`` found safe to open: nested
repositories, FIFOs, sockets, devices and files over the size cap are left out, and said.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from rio_ci.core.errors import ForgeError, RioError
from rio_ci.github import gitdirs
from rio_ci.github.contract import log
from rio_ci.github.git import Git
from rio_ci.github.survey import LeftOut, survey

GIT_DIR = "git"  # under the job's state directory ($RUNNER_TEMP/rio)
ORIGIN_KEY = "rio.origin"
# What a git directory's history is made of; its config, hooks, info/ and index stay behind.
_HISTORY = ("HEAD", "packed-refs", "shallow", "refs", "objects")
PATHSPECS = "rio-ci-pathspecs"  # in the harness's git directory, for one `git add`
MAX_LEFT_OUT = 1000  # more paths to leave out than this: not checkpointed


def harness_git(state_dir: Path, checkout: Path) -> Git:
    """The harness's git directory for ``checkout`` (made by ``adopt``)."""
    return Git(state_dir / GIT_DIR, checkout)


def adopt(state_dir: Path, checkout: Path) -> Git:
    """Make the harness's own git directory for ``checkout``: a copy of the history in the
    checkout's ``.git`` (objects, refs, ``HEAD``, ``shallow``; only regular files, no
    alternates), an index read from its ``HEAD``, and the ``origin`` URL read from the
    checkout's config file alone (no includes); and what ``reseal`` will restore
    (``gitdirs.keep``). Call it before any Cell runs."""
    dot = checkout / ".git"
    if dot.is_symlink() or not dot.is_dir():
        raise ForgeError(f"{checkout} is not a git checkout with a .git directory")
    repo = harness_git(state_dir, checkout)
    repo.git_dir.parent.mkdir(parents=True, exist_ok=True)
    Git(repo.git_dir).run("init", "--quiet", "--bare")
    for name in _HISTORY:
        _copy(dot / name, repo.git_dir / name, skip={dot / "objects" / "info" / "alternates"})
    config = dot / "config"
    url = ""
    if config.is_file() and not config.is_symlink():
        url = repo.run(
            "config", "--file", str(config), "--get", "remote.origin.url", check=False
        ).stdout.strip()
    if not url:
        raise ForgeError(f"{checkout} has no 'origin' remote")
    repo.run("config", ORIGIN_KEY, url)
    repo.run("reset", "--quiet")  # the index: HEAD's tree, the working tree as it is
    gitdirs.keep(state_dir, checkout)
    return repo


def reseal(state_dir: Path, checkout: Path) -> str | None:
    """The checkout's git directories as ``adopt`` kept them, with the harness's history and
    index (``gitdirs.restore``). Call it when a step of rio-ci's ends, after the tree is
    handed back. Returns None, or why it could not be done (also printed as an error line:
    the step goes on)."""
    try:
        removed = gitdirs.restore(state_dir, checkout, harness_git(state_dir, checkout).git_dir)
    except (RioError, OSError, ValueError) as exc:
        problem = f"the checkout's .git was not rebuilt: {exc}"
        log(f"::error::rio-ci: {problem}; a later step may run git configuration a Cell wrote")
        return problem
    if removed:
        log(f"rio-ci: removed the git metadata of repositories Cells made: {', '.join(removed)}")
    return None


def origin_url(repo: Git) -> str:
    """The URL of ``origin`` as the checkout step left it, as ``adopt`` kept it."""
    url = repo.run("config", "--get", ORIGIN_KEY, check=False).stdout.strip()
    if not url:
        raise ForgeError(f"the harness's git directory {repo.git_dir} names no origin")
    return url


def lend(repo: Git, branch: str) -> None:
    """Give the checkout's own ``.git`` the branch the harness checked out (its objects,
    the ref, ``HEAD`` and the index), so the agent's git commands see the branch's history
    and a clean status. Written before any Cell runs; rio-ci never reads it back."""
    dot = repo.tree() / ".git"
    _copy(repo.git_dir / "objects", dot / "objects", skip=set(), missing_only=True)
    for name in ("shallow", "index"):
        if (repo.git_dir / name).is_file():
            _copy(repo.git_dir / name, dot / name, skip=set())
    ref = dot / "refs" / "heads" / branch
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(head(repo) + "\n")
    (dot / "HEAD").write_text(f"ref: refs/heads/{branch}\n")


def _copy(source: Path, target: Path, skip: set[Path], missing_only: bool = False) -> None:
    """Copy regular files and directories from ``source`` to ``target``; links, devices and
    the paths in ``skip`` are left out."""
    if source in skip or source.is_symlink():
        return
    if source.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        for child in os.scandir(source):
            _copy(Path(child.path), target / child.name, skip, missing_only)
    elif source.is_file() and not (missing_only and target.exists()):
        shutil.copyfile(source, target, follow_symlinks=False)


def check_out(repo: Git, branch: str, remote: str, token: str | None) -> str | None:
    """Check out ``branch`` from ``remote`` if it exists there and return its commit, else
    start it from the current commit and return None. A remote that cannot be asked raises
    ``ForgeError``: starting afresh then would put the agent on a stale tree whose push is
    later refused."""
    listed = repo.run(
        "ls-remote", "--heads", remote, f"refs/heads/{branch}", remote=remote, token=token
    ).stdout
    if not listed.strip():
        repo.run("checkout", "--quiet", "-B", branch)
        return None
    repo.run(
        "fetch",
        "--quiet",
        "--no-tags",
        remote,
        f"+refs/heads/{branch}:refs/remotes/origin/{branch}",
        remote=remote,
        token=token,
    )
    repo.run("checkout", "--quiet", "-B", branch, f"refs/remotes/origin/{branch}")
    return head(repo)


def head(repo: Git) -> str:
    return repo.run("rev-parse", "HEAD").stdout.strip()


@dataclass(frozen=True)
class Checkpoint:
    """What ``checkpoint`` did: the commit it pushed (None when there was nothing new, and
    nothing was pushed), the paths GitHub refused, left out of the push (they stay in
    the working tree, uncommitted), with GitHub's words for why, and the paths the survey
    left out before git ran (they stay too)."""

    sha: str | None
    refused: tuple[str, ...] = ()
    reason: str = ""
    left_out: tuple[LeftOut, ...] = ()


def checkpoint(
    repo: Git,
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
    The files are committed as they are in the working tree (no filter runs: none is
    configured in the harness's git).

    A push GitHub refuses for named paths (workflow files without the ``workflows``
    permission, files over 100 MB) is made again as one commit on ``start`` holding
    everything but those paths; other refusals raise ``ForgeError``.

    git never sees what the survey leaves out (``exclude``, the runner's own folders, is
    skipped without a word), nor a repository a Cell made whose ``.git`` an earlier
    ``reseal`` of the job removed; a tree git cannot be run on at all raises ``ForgeError``."""
    tree = repo.tree()
    skipped = [p for p in (exclude or []) if _inside(p, tree)]
    state_dir = repo.git_dir.parent  # harness_git: the git directory is GIT_DIR in it
    found = survey(tree, skipped, nested=gitdirs.removed(state_dir))
    if found.blocked is not None:
        raise ForgeError(f"{found.blocked}: git is not run on the tree")
    if len(found.left_out) > MAX_LEFT_OUT:
        raise ForgeError(
            f"{len(found.left_out)} paths of the working tree would be left out (nested "
            f"repositories, special or large files), over {MAX_LEFT_OUT}"
        )
    if repo.run("rev-parse", "--abbrev-ref", "HEAD").stdout.strip() != branch:
        repo.run("checkout", "--quiet", "-B", branch)
    outside = [f":(exclude,literal){p.resolve().relative_to(tree.resolve())}" for p in skipped]
    _add_all(repo, [".", *found.exclusions(), *outside])
    if repo.run("diff", "--cached", "--quiet", check=False).returncode != 0:
        repo.run("commit", "--quiet", "--no-verify", "-m", message)
    sha = head(repo)
    if sha == start:
        return Checkpoint(None, left_out=found.left_out)
    refused: list[str] = []
    reasons: list[str] = []
    for _ in range(PUSH_ATTEMPTS):
        done = repo.run(
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
                repo.run("reset", "--quiet", sha)  # the refused files stay, uncommitted
            return Checkpoint(sha, tuple(refused), "; ".join(reasons), found.left_out)
        paths, why = refused_paths(done.stderr + done.stdout)
        if not paths or set(paths) <= set(refused):
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise ForgeError(f"git push failed: {lines[-1] if lines else done.returncode}")
        refused += [p for p in paths if p not in refused]
        reasons += [w for w in why if w not in reasons]
        sha = _without(repo, start, refused, message)
    raise ForgeError(f"git push was refused {PUSH_ATTEMPTS} times; refused so far: {refused}")


def _add_all(repo: Git, pathspecs: list[str]) -> None:
    """``git add --all`` of ``pathspecs``, given in a file (any number, any bytes)."""
    listed = repo.git_dir / PATHSPECS
    listed.write_bytes(b"".join(os.fsencode(p) + b"\0" for p in pathspecs))
    try:
        repo.run("add", "--all", f"--pathspec-from-file={listed}", "--pathspec-file-nul")
    finally:
        listed.unlink(missing_ok=True)


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


def _without(repo: Git, start: str, paths: list[str], message: str) -> str:
    """One commit on ``start`` whose tree is HEAD's with ``paths`` as ``start`` had them."""
    index = repo.git_dir / "rio-ci-index"
    scratch = {"GIT_INDEX_FILE": str(index)}
    try:
        repo.run("read-tree", "HEAD", extra_env=scratch)
        for path in paths:
            old = repo.run("ls-tree", start, "--", path).stdout.split()
            if old:
                repo.run(
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    f"{old[0]},{old[2]},{path}",
                    extra_env=scratch,
                )
            else:
                repo.run("update-index", "--force-remove", "--", path, extra_env=scratch)
        tree = repo.run("write-tree", extra_env=scratch).stdout.strip()
    finally:
        index.unlink(missing_ok=True)
    return repo.run(
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
