"""The tree cannot hang or blow up the checkpoint (docs/github.md, "The tree cannot hang the
checkpoint"), and the checkout's git directories are rebuilt when rio-ci's steps end
(docs/security.md, "After rio-ci's steps").

Real files, real FIFOs and sockets, a sparse file as large as the file system allows (1 TiB
on ext4 and most others), real git; ``workspace.checkpoint`` and ``gitdirs`` called as the
action calls them, on a checkout of a local origin.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from action_job import git

from rio_ci.core.errors import ForgeError
from rio_ci.github import gitdirs, workspace
from rio_ci.github.git import Git
from rio_ci.github.survey import SIZE_CAP, Bounds, survey

TERABYTE = 1 << 40


def sparse(path: Path) -> int:
    """A sparse file of 1 TiB, or the largest the file system allows (halving until it
    takes it); returns its size."""
    size = TERABYTE
    while True:
        try:
            with path.open("wb") as out:
                out.truncate(size)
            return size
        except OSError:
            size //= 2
            if size <= SIZE_CAP:
                pytest.skip("the file system allows no sparse file over the size cap")


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def unix_socket(path: Path) -> Path:
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
    return path


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[Path]:
    """A clone of a local origin (branch ``main``, ``README.md`` and ``tracked.txt``)."""
    origin = tmp_path / "origin.git"
    seed = tmp_path / "seed"
    seed.mkdir()
    git(tmp_path, "init", "-q", "--bare", "--initial-branch=main", str(origin))
    git(seed, "init", "-q", "--initial-branch=main")
    (seed / "README.md").write_text("# demo\n")
    (seed / "tracked.txt").write_text("tracked\n")
    git(seed, "add", "--all")
    git(seed, "commit", "-qm", "initial")
    git(seed, "push", "-q", str(origin), "main")
    clone = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    yield clone


def adopted(tmp_path: Path, checkout: Path, timeout: float = 60) -> Git:
    """``adopt`` and the branch checked out, as the run step does; git limited to
    ``timeout`` seconds, so a hang fails the test instead of holding it."""
    repo = workspace.adopt(tmp_path / "state", checkout)
    repo = Git(repo.git_dir, repo.work_tree, timeout=timeout)
    workspace.check_out(repo, "rio/issue-1", workspace.origin_url(repo), None)
    workspace.lend(repo, "rio/issue-1")
    return repo


# --- the survey ------------------------------------------------------------------------------


def test_the_survey_leaves_out_special_files_nested_repositories_and_large_files(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    (tree / ".git").mkdir(parents=True)
    fifo(tree / ".git" / "HEAD")  # the top .git is never entered
    fifo(tree / "top.fifo")
    unix_socket(tree / "sock")
    size = sparse(tree / "huge.bin")
    fifo(tree / "sub" / ".git" / "HEAD")
    (tree / "deep" / "a" / "b").mkdir(parents=True)
    (tree / "deep" / "a" / "b" / ".git").write_text("gitdir: /elsewhere\n")
    (tree / "inside-sub").mkdir()
    fifo(tree / "ignored" / ".gitignore")
    (tree / "ignored" / "kept.txt").write_text("x")
    (tree / "away").mkdir()
    fifo(tree / "away" / "fifo")
    (tree / "link").symlink_to(tree / "away", target_is_directory=True)
    (tree / "fine.txt").write_text("fine")

    found = survey(tree)

    left = {item.path: item.why for item in found.left_out}
    assert set(left) == {"top.fifo", "sock", "huge.bin", "sub", "deep/a/b", "ignored", "away/fifo"}
    assert "FIFO" in left["top.fifo"] and "socket" in left["sock"]
    assert "over the 100.0 MiB cap" in left["huge.bin"] and size > SIZE_CAP
    assert "nested repository" in left["sub"] and ".gitignore is a FIFO" in left["ignored"]
    assert sorted(found.repositories) == ["deep/a/b/.git", "sub/.git"]
    assert found.blocked is None
    assert ":(exclude,literal)sub" in found.exclusions()


def test_a_fifo_gitattributes_at_the_top_blocks_the_checkpoint(tmp_path: Path) -> None:
    fifo(tmp_path / "tree" / ".gitattributes")
    found = survey(tmp_path / "tree")
    assert found.blocked is not None and ".gitattributes is a FIFO" in found.blocked


def test_the_walk_is_bounded(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for n in range(20):
        (tree / f"f{n}").write_text("x")
    with pytest.raises(ForgeError, match="more than 10 entries"):
        survey(tree, bounds=Bounds(entries=10))
    for n in range(10):
        (tree / f"d{n}").mkdir()
    ticks = iter(range(10**6))  # one second per look at the clock
    with pytest.raises(ForgeError, match="took over 5 s"):
        survey(tree, bounds=Bounds(seconds=5), clock=lambda: float(next(ticks)))


def test_paths_to_skip_are_never_entered(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    fifo(tree / "runner-temp" / "fifo")
    assert survey(tree, [tree / "runner-temp"]).left_out == ()


# --- git's time limit ----------------------------------------------------------------------


@pytest.mark.slow  # a second of git's time limit, and two repositories
def test_a_git_that_does_not_finish_is_stopped_with_its_children_and_is_a_forge_error(
    tmp_path: Path,
) -> None:
    """A real hang: a push whose receiving side (a local origin's pre-receive hook, a
    grandchild of the harness's git) waits on a FIFO nobody writes."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    gate = fifo(tmp_path / "gate")
    pid_file = tmp_path / "hook.pid"
    hook = origin / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nread line < {gate}\n")
    hook.chmod(0o755)
    clone = tmp_path / "clone"
    git(tmp_path, "init", "-q", str(clone))
    (clone / "a").write_text("a")
    git(clone, "add", "a")
    git(clone, "commit", "-qm", "a")
    repo = Git(clone / ".git", clone, timeout=1)

    started = time.monotonic()
    with pytest.raises(ForgeError, match="git push did not finish within 1 s and was stopped"):
        repo.run("push", str(origin), "HEAD:refs/heads/x", remote=str(origin), check=False)

    assert time.monotonic() - started < 30
    hook = int(pid_file.read_text())  # it had started, and would have waited forever
    with contextlib.suppress(psutil.NoSuchProcess):
        _, alive = psutil.wait_procs([psutil.Process(hook)], timeout=10)  # SIGKILL lands soon
        assert alive == [] or alive[0].status() == psutil.STATUS_ZOMBIE


# --- the checkpoint ----------------------------------------------------------------------


def test_a_checkpoint_leaves_out_what_would_hang_or_blow_up_git_and_commits_the_rest(
    tmp_path: Path, checkout: Path
) -> None:
    repo = adopted(tmp_path, checkout)
    start = workspace.head(repo)
    fifo(checkout / "top.fifo")
    unix_socket(checkout / "sock")
    sparse(checkout / "huge.bin")
    fifo(checkout / "sub" / ".git" / "HEAD")
    (checkout / "sub" / "lib.py").write_text("x = 1\n")
    (checkout / "tracked.txt").unlink()
    fifo(checkout / "tracked.txt")  # a tracked file that is now a FIFO: the old one stays
    (checkout / "fix.py").write_text("fixed = True\n")

    started = time.monotonic()
    done = workspace.checkpoint(
        repo, "rio/issue-1", "checkpoint", workspace.origin_url(repo), None, start
    )

    assert time.monotonic() - started < 30
    assert {item.path for item in done.left_out} == {
        "top.fifo",
        "sock",
        "huge.bin",
        "sub",
        "tracked.txt",
    }
    committed = git(checkout.parent / "origin.git", "ls-tree", "-r", "--name-only", "rio/issue-1")
    assert committed.split() == ["README.md", "fix.py", "tracked.txt"]
    assert git(checkout.parent / "origin.git", "show", "rio/issue-1:tracked.txt") == "tracked"


def test_a_tree_git_cannot_walk_is_a_forge_error_not_a_hang(tmp_path: Path, checkout: Path) -> None:
    repo = adopted(tmp_path, checkout)
    start = workspace.head(repo)
    fifo(checkout / ".gitignore")
    with pytest.raises(ForgeError, match=r"\.gitignore is a FIFO, which git must not open"):
        workspace.checkpoint(repo, "rio/issue-1", "c", workspace.origin_url(repo), None, start)


# --- the checkout's git directories, rebuilt ---------------------------------------------------


def test_the_rebuild_restores_what_adopt_kept_and_removes_what_cells_made(
    tmp_path: Path, checkout: Path
) -> None:
    # Before any Cell: a submodule's pointer (its git directory in .git/modules) and a
    # repository checked out inside the tree by an earlier step.
    vendor = checkout / "vendor"
    git(checkout, "init", "-q", str(vendor))
    git(vendor, "config", "user.name", "earlier step")
    (checkout / ".git" / "modules" / "mod").mkdir(parents=True)
    git(checkout / ".git" / "modules" / "mod", "init", "-q", "--bare")
    (checkout / "mod").mkdir()
    (checkout / "mod" / ".git").write_text("gitdir: ../.git/modules/mod\n")
    config = (checkout / ".git" / "config").read_bytes()
    vendor_config = (vendor / ".git" / "config").read_bytes()
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "65534:65534", str(checkout)], check=True)
    repo = adopted(tmp_path, checkout)

    # What Cells do.
    dot = checkout / ".git"
    with (dot / "config").open("a") as out:
        out.write("[core]\n\tfsmonitor = /planted\n")
    (dot / "hooks" / "pre-commit").write_text("#!/bin/sh\n")
    (dot / "commondir").write_text("/elsewhere\n")
    (dot / "HEAD").unlink()
    fifo(dot / "HEAD")
    (dot / "objects" / "info" / "alternates").write_text("/elsewhere/objects\n")
    fifo(dot / "objects" / "pack" / "fifo.idx")
    (dot / "objects" / "linked").symlink_to("/etc")
    (dot / "modules" / "planted").mkdir()
    with (vendor / ".git" / "config").open("a") as out:
        out.write("[core]\n\tfsmonitor = /planted\n")
    (checkout / "mod" / ".git").write_text("gitdir: /elsewhere\n")
    git(checkout, "init", "-q", str(checkout / "new"))
    (checkout / "pointer").mkdir()
    (checkout / "pointer" / ".git").write_text("gitdir: /elsewhere\n")
    fifo(checkout / "hang" / ".git")

    removed = workspace.reseal(tmp_path / "state", checkout)

    assert removed is None  # no problem
    assert (dot / "config").read_bytes() == config
    assert not (dot / "hooks" / "pre-commit").exists()
    assert not (dot / "commondir").exists() and not (dot / "modules" / "planted").exists()
    assert (dot / "HEAD").read_text() == "ref: refs/heads/rio/issue-1\n"
    assert not (dot / "objects" / "info" / "alternates").exists()
    assert not (dot / "objects" / "pack" / "fifo.idx").exists()
    assert not os.path.lexists(dot / "objects" / "linked")
    assert (vendor / ".git" / "config").read_bytes() == vendor_config
    assert (checkout / "mod" / ".git").read_text() == "gitdir: ../.git/modules/mod\n"
    assert (dot / "modules" / "mod" / "HEAD").is_file()
    for made in ("new", "pointer", "hang"):
        assert not os.path.lexists(checkout / made / ".git"), made
    if os.geteuid() == 0:  # everything written is the checkout's owner's, as adopt found it
        # (looked at before the git below, which may write an index of its own)
        owners = {os.lstat(Path(d) / n).st_uid for d, ds, fs in os.walk(dot) for n in ds + fs}
        assert owners == {65534}
    status = subprocess.run(
        ["git", "-c", "safe.directory=*", "status", "--porcelain"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert status.returncode == 0, status.stderr
    assert git(checkout, "-c", "safe.directory=*", "rev-parse", "HEAD") == workspace.head(repo)


def test_a_dot_git_replaced_by_a_link_is_made_again_and_the_link_target_untouched(
    tmp_path: Path, checkout: Path
) -> None:
    repo = adopted(tmp_path, checkout)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "config").write_text("[core]\n\tfsmonitor = /planted\n")
    os.rename(checkout / ".git", tmp_path / "moved")
    (checkout / ".git").symlink_to(target, target_is_directory=True)

    assert workspace.reseal(tmp_path / "state", checkout) is None

    info = os.lstat(checkout / ".git")
    assert stat.S_ISDIR(info.st_mode)
    assert (target / "config").read_text() == "[core]\n\tfsmonitor = /planted\n"
    assert git(checkout, "rev-parse", "HEAD") == workspace.head(repo)
    assert "fsmonitor" not in (checkout / ".git" / "config").read_text()


def test_nothing_is_rebuilt_where_adopt_never_ran(tmp_path: Path, checkout: Path) -> None:
    before = (checkout / ".git" / "config").read_bytes()
    assert gitdirs.restore(tmp_path / "state", checkout, tmp_path / "state" / "git") == []
    assert (checkout / ".git" / "config").read_bytes() == before


def test_a_repository_whose_git_a_rebuild_removed_is_still_left_out_of_later_checkpoints(
    tmp_path: Path, checkout: Path
) -> None:
    """The run step's end removes the ``.git`` of a repository a Cell made; finish's
    checkpoint still leaves its files out, as it would have with its ``.git``."""
    repo = adopted(tmp_path, checkout)
    start = workspace.head(repo)
    git(checkout, "init", "-q", str(checkout / "cloned"))
    (checkout / "cloned" / "big.py").write_text("vendored = True\n")
    (checkout / "fix.py").write_text("fixed = True\n")
    assert workspace.reseal(tmp_path / "state", checkout) is None
    assert not (checkout / "cloned" / ".git").exists()

    done = workspace.checkpoint(repo, "rio/issue-1", "c", workspace.origin_url(repo), None, start)

    assert [(item.path, item.why) for item in done.left_out] == [
        ("cloned", "a nested repository (its .git removed)")
    ]
    committed = git(checkout.parent / "origin.git", "ls-tree", "-r", "--name-only", "rio/issue-1")
    assert "fix.py" in committed.split() and "cloned/big.py" not in committed
