"""Nothing a Cell wrote in the checkout's ``.git`` runs after rio-ci (docs/security.md, "After
rio-ci's steps").

A Cell plants, in the checkout's git directory and in repositories of its own, everything that
makes a later git run a program: ``core.fsmonitor``, hooks, a filter driver (``.gitattributes``
and ``.git/info/attributes`` name it), ``core.sshCommand``, an ``include.path``, a
``.git/modules/x`` with its own config behind a gitlink, and a nested repository ``sub`` with
a ``.gitmodules`` entry and a gitlink. Each planted program appends to a marker file. After
rio-ci's steps the test runs, with the system git, in the workspace, with a token in the
environment, the git commands the checkout action's post step runs (``git config --local
--name-only --get-regexp …``, ``git submodule foreach --recursive …``), then ``git status``
and a commit as a later step might: no marker may appear. A control runs the same commands on
a clone planted the same way without rio-ci, and the markers do appear there.
"""

from __future__ import annotations

import base64
import contextlib
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from action_job import WAIT, Repository, conclude, git, labeled, script
from fakes.github_api import FakeGitHub

from tests.kit import add, cmd_cell

pytestmark = [pytest.mark.people(alice="write")]
TOKEN = "ghs_canaryTokenOfTheCheckoutPostStep0001"

# What actions/checkout's post step runs in the workspace (src/git-auth-helper.ts, removeAuth:
# removeSsh and removeToken, each for the top repository and then every submodule).
POST_STEP = [
    ["git", "version"],
    ["git", "config", "--local", "--name-only", "--get-regexp", r"core\.sshCommand"],
    [
        "git",
        "submodule",
        "foreach",
        "--recursive",
        r"""sh -c "git config --local --name-only --get-regexp 'core\.sshCommand' """
        r"""&& git config --local --unset-all 'core.sshCommand' || :" """,
    ],
    [
        "git",
        "config",
        "--local",
        "--name-only",
        "--get-regexp",
        r"http\.https\:\/\/github\.com\/\.extraheader",
    ],
    [
        "git",
        "submodule",
        "foreach",
        "--recursive",
        r"""sh -c "git config --local --name-only --get-regexp """
        r"""'http\.https\:\/\/github\.com\/\.extraheader' """
        r"""&& git config --local --unset-all 'http.https://github.com/.extraheader' || :" """,
    ],
    ["git", "config", "--local", "--name-only", "--get-regexp", r"^includeIf\.gitdir:"],
    [
        "git",
        "submodule",
        "foreach",
        "--recursive",
        "git config --local --show-origin --name-only --get-regexp remote.origin.url",
    ],
]
# What a later step of the workflow might run.
LATER = [
    ["git", "status"],
    ["git", "add", "--all"],
    ["git", "-c", "user.name=later", "-c", "user.email=l@example.com", "commit", "-qm", "later"],
]
HOOKS = (
    "pre-commit",
    "post-commit",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "fsmonitor-watchman",
)


def planting(marks: Path) -> str:
    """A Cell's script (run in the checkout) that plants every program above; each program
    appends its own path to ``marks/ran``. git commands come first: once the checkout's
    config holds the fsmonitor, any git the planting ran itself would run it."""
    return f"""
import os, pathlib, subprocess
marks = pathlib.Path({str(marks)!r})
plant = pathlib.Path(".planted").resolve()
(plant / "hooks").mkdir(parents=True, exist_ok=True)
program = "#!/bin/sh\\necho \\"$0 $*\\" >> " + str(marks / "ran") + "\\n"
def make(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(program)
    path.chmod(0o755)
    return str(path)
def git(*args, cwd="."):
    subprocess.run(["git", "-c", "user.name=cell", "-c", "user.email=c@example.com", *args],
                   cwd=cwd, check=True, capture_output=True)
def append(path, text):
    with open(path, "a") as out:
        out.write(text)
# A nested repository of the Cell's, and a submodule whose git directory is .git/modules/x.
git("init", "-q", "sub")
git("commit", "-q", "--allow-empty", "-m", "sub", cwd="sub")
pathlib.Path(".git/modules").mkdir(exist_ok=True)
git("init", "-q", "--separate-git-dir", str(pathlib.Path(".git/modules/x").resolve()), "x")
git("commit", "-q", "--allow-empty", "-m", "x", cwd="x")
pathlib.Path(".gitmodules").write_text(
    '[submodule "sub"]\\n\\tpath = sub\\n\\turl = ./sub\\n'
    '[submodule "x"]\\n\\tpath = x\\n\\turl = ./x\\n')
for name in ("sub", "x"):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=name, check=True,
                          capture_output=True, text=True).stdout.strip()
    git("update-index", "--add", "--cacheinfo", f"160000,{{head}},{{name}}")
# Now the configuration: no git runs after this.
append("sub/.git/config", "[core]\\n\\tfsmonitor = " + make(plant / "fsmonitor-sub") + "\\n")
append(".git/modules/x/config", "[core]\\n\\tfsmonitor = " + make(plant / "fsmonitor-x") + "\\n")
(plant / "included.cfg").write_text("[core]\\n\\thooksPath = " + str(plant / "hooks") + "\\n")
append(".git/config",
    "[core]\\n\\tfsmonitor = " + make(plant / "fsmonitor-top") + "\\n"
    "\\tsshCommand = " + make(plant / "ssh") + "\\n"
    '[filter "x"]\\n\\tclean = ' + make(plant / "filter-clean") + "\\n"
    "\\tsmudge = " + make(plant / "filter-smudge") + "\\n"
    "\\tprocess = " + make(plant / "filter-process") + "\\n"
    "\\trequired = true\\n"
    "[include]\\n\\tpath = " + str(plant / "included.cfg") + "\\n")
for name in {list(HOOKS)!r}:
    make(pathlib.Path(".git/hooks") / name)
    make(plant / "hooks" / name)
    make(pathlib.Path("sub/.git/hooks") / name)
pathlib.Path(".git/info").mkdir(exist_ok=True)
pathlib.Path(".git/info/attributes").write_text("* filter=x\\n")
pathlib.Path(".gitattributes").write_text("* filter=x\\n")
pathlib.Path("notes.txt").write_text("changed by the Cell\\n")
print("planted")
"""


def later_steps(workspace: Path, commands: list[list[str]]) -> None:
    """``commands`` with the system git in ``workspace``, as a later step runs them: the
    step's token input in the environment, and an extra header carrying it."""
    header = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "INPUT_TOKEN": TOKEN,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.https://github.com/.extraheader",
        "GIT_CONFIG_VALUE_0": f"AUTHORIZATION: basic {header}",
    }
    for argv in commands:
        subprocess.run(
            argv,
            cwd=workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )


def ran(marks: Path) -> str:
    return (marks / "ran").read_text() if (marks / "ran").exists() else ""


@pytest.fixture
def marks() -> Iterator[Path]:
    """Where planted programs leave their mark: a folder every user may write."""
    folder = Path(tempfile.mkdtemp(prefix="rio-marks-", dir="/tmp"))
    folder.chmod(0o777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder every user may enter (tmp_path's parents are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="rio-handback-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_planted_programs_run_in_the_post_steps_commands_without_rio_ci(
    tmp_path: Path, marks: Path
) -> None:
    """The control: the plants are live with this git, so the test below can fail."""
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "--initial-branch=main")
    (origin / "README.md").write_text("# demo\n")
    git(origin, "add", "--all")
    git(origin, "commit", "-qm", "initial")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(origin), str(clone))
    subprocess.run([sys.executable, "-c", planting(marks)], cwd=clone, check=True, timeout=60)
    assert ran(marks) == ""  # planting ran nothing of its own

    later_steps(clone, POST_STEP + LATER)

    text = ran(marks)
    for program in ("fsmonitor-top", "fsmonitor-sub", "fsmonitor-x", "filter-process"):
        assert f".planted/{program}" in text, text
    assert ".git/hooks/post-index-change" in text, text  # the nested repository's hook


@pytest.mark.parametrize("mode", ["shared", "cell-user"])
def test_nothing_a_cell_planted_in_the_checkouts_git_runs_in_a_later_step(
    place: Path, gh: FakeGitHub, marks: Path, mode: str
) -> None:
    repo = Repository(place, gh)
    repo.set_script(
        script([add(cmd_cell("python3", "-c", planting(marks)))], WAIT),
    )
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    user = None
    if mode == "cell-user":
        if os.geteuid() != 0 or not shutil.which("useradd"):
            pytest.skip("a Cell user needs rio-ci to be root on Linux (as in CI)")
        user = f"rio-ct-{secrets.token_hex(4)}"
        job.env["RIO_CELL_USER"] = user
    try:
        run = repo.collect(job, repo.start(job))
        assert run.code == 0, job.logs
        assert (job.workspace / ".planted" / "fsmonitor-top").exists()  # the Cell planted
        # The run step's own end already leaves nothing (a finish killed by a cancel's
        # force-stop would never reach its own) ...
        later_steps(job.workspace, POST_STEP)
        assert ran(marks) == ""
        finish = repo.step(job, "finish")
        assert finish.code == 0, job.logs
    finally:
        if user is not None:
            _remove_user(user)
    printed = "".join(e.get("text", "") for e in repo.events(job) if e.get("cell_id") == 1)
    assert "planted" in printed, printed
    # ... and neither does finish's, which ran the checkpoint on the harness's own git.
    later_steps(job.workspace, POST_STEP + LATER)
    assert ran(marks) == ""
    assert (job.workspace / ".planted" / "fsmonitor-top").exists()  # the tree is untouched
    assert not (job.workspace / ".git" / "modules").exists()
    assert not (job.workspace / "sub" / ".git").exists()  # the Cell's repository: files only
    assert repo.branch_file(f"rio/issue-{issue}", "notes.txt") == "changed by the Cell"
    # The checkout's own configuration is back: its origin, the branch the job checked out.
    assert git(job.workspace, "remote", "get-url", "origin") == repo.url
    assert git(job.workspace, "rev-parse", "--abbrev-ref", "HEAD") == f"rio/issue-{issue}"


def _remove_user(name: str) -> None:
    """Stop this test's Cell user's processes (by their ids) and remove the user."""
    with contextlib.suppress(KeyError):
        uid = pwd.getpwnam(name).pw_uid
        for proc in psutil.process_iter(["uids"]):
            with contextlib.suppress(psutil.Error):
                if uid in proc.info["uids"]:
                    proc.kill()
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


def test_what_a_validator_plants_during_the_finish_step_does_not_run_later_either(
    place: Path, gh: FakeGitHub, marks: Path
) -> None:
    """The finish step runs the validators again (as Cells) before its pull request: a
    script the agent wrote that a validator runs plants the same, and finish's own end
    rebuilds the checkout's ``.git`` after it."""
    config = "validators: ['python3 check.py']\n"
    repo = Repository(place, gh, files={".github/rio.yml": config})
    write = f"import pathlib; pathlib.Path('check.py').write_text({planting(marks)!r})"
    repo.set_script(script([add(cmd_cell("python3", "-c", write))], [conclude()]))
    issue = gh.add_issue("Fix", labels=("rio",))

    job = repo.job("issues", labeled(issue))

    assert job.outputs["status"] == "succeeded", job.logs
    assert gh.pulls, job.logs  # the validators passed twice: they planted twice
    assert (job.workspace / ".planted" / "fsmonitor-top").exists()
    later_steps(job.workspace, POST_STEP + LATER)
    assert ran(marks) == ""
