"""``rio-ci action`` as root with the action's ``cell-user`` (``RIO_CELL_USER=rio-cell``, the
composite's default): the Cell runs as ``rio-cell`` and cannot write rio-ci's install, the
Session file or the job's records, nor read the Owner's environment; the working tree it
wrote is handed back, so finish's git checkpoints it (docs/github.md, docs/design.md)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from action_job import WAIT, Job, Repository, conclude, labeled, script
from fakes.github_api import FakeGitHub

import rio_ci
from rio_ci.run.confinement.home import SHARED_PLACES
from tests.hostile.support import NOBODY, shared_folder, unprivileged_command, unprivileged_env
from tests.kit import add, cli_env, cmd_cell, code_cell

pytestmark = [
    pytest.mark.people(alice="write"),
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("useradd"),
        reason="the Cell user needs rio-ci to be root on Linux (as in CI)",
    ),
]


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder every user may enter (tmp_path's parents are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="rio-cell-action-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_under_the_action_the_cell_runs_as_rio_cell_and_reaches_only_the_tree(
    place: Path, gh: FakeGitHub
) -> None:
    repo = Repository(place, gh)
    package = Path(rio_ci.__file__).parent
    probe = f"""
        id -un
        echo cell-was-here > cell-was-here.txt && echo tree=written
        state="$RUNNER_TEMP/rio"
        (echo x >> "$state/job.json") 2>/dev/null && echo record=written || echo record=refused
        (echo x >> "$state/session.sqlite3") 2>/dev/null && echo session=written \
            || echo session=refused
        touch {package}/planted.pth 2>/dev/null && echo install=written || echo install=refused
        mkdir "$RUNNER_TEMP/rio-artifact-planted" 2>/dev/null && echo temp=written \
            || echo temp=refused
        cat /proc/$PPID/environ > /dev/null 2>&1 && echo environ=read || echo environ=refused
        if command -v sudo > /dev/null; then
            sudo -n true > /dev/null 2>&1 && echo sudo=root || echo sudo=refused
        else
            echo sudo=absent
        fi
        python3 -c "from rio_ci.api import records; print('api', len(records()) > 0)"
    """
    repo.set_script(script([add(cmd_cell("sh", "-c", probe))], WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    job.env["RIO_CELL_USER"] = "rio-cell"

    run = repo.collect(job, repo.start(job))
    finish = repo.step(job, "finish")

    assert run.code == 0 and finish.code == 0, (run.stderr, finish.stderr)
    text = "".join(
        e["text"]
        for e in repo.events(job)
        if e["kind"] == "output" and e["cell_id"] == 1 and e["stream"] == "stdout" and "text" in e
    )
    lines = text.split()
    assert lines[0] == "rio-cell"
    for seen in (
        "tree=written",
        "record=refused",
        "session=refused",
        "install=refused",
        "temp=refused",  # the artifact directory cannot be planted or replaced
    ):
        assert seen in lines, (seen, lines)
    assert "environ=refused" in lines
    # sudo fails for the Cell (.ci/install-fiu installs it, so it is tried in CI)
    assert "sudo=refused" in lines or (shutil.which("sudo") is None and "sudo=absent" in lines)
    assert "api" in lines and lines[lines.index("api") + 1] == "True"  # rio_ci.api works
    assert not (package / "planted.pth").exists()
    modes = [e for e in repo.events(job) if e["kind"] == "cell_user"]
    assert modes and modes[-1]["mode"] == "separate" and modes[-1]["user"] == "rio-cell"
    assert modes[-1]["uid"] == pwd.getpwnam("rio-cell").pw_uid
    # handed back before finish's git: the file the Cell wrote is on the Session's branch
    assert (job.workspace / "cell-was-here.txt").stat().st_uid == 0
    assert repo.branch_file(f"rio/issue-{issue}", "cell-was-here.txt") == "cell-was-here"


def test_where_no_cell_user_is_possible_the_job_goes_on_and_says_so(gh: FakeGitHub) -> None:
    """The run step as a user who is not root and has no sudo (a self-hosted runner): the
    Cell runs as that user, and the log and the step summary say Cells share its user."""
    with shared_folder() as place:
        repo = Repository(place, gh)
        repo.set_script(script([add(cmd_cell("id", "-u"))], WAIT))
        issue = gh.add_issue("Fix", labels=("rio",))
        job = repo.prepare("issues", labeled(issue))
        job.env.update(unprivileged_env(), RIO_CELL_USER="rio-cell")
        for folder, dirs, files in os.walk(place):
            for name in [".", *dirs, *files]:
                os.lchown(os.path.join(folder, name), NOBODY, NOBODY)
        prefix, python = unprivileged_command()

        run = subprocess.run(
            [*prefix, python, "-m", "rio_ci", "action"],
            cwd=job.workspace,
            env=job.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

        assert run.returncode == 0, run.stderr
        assert "Cells share the harness's user" in run.stderr
        assert "Cells share the harness's user" in job.summary
        events = subprocess.run(
            [
                sys.executable,
                "-m",
                "rio_ci",
                "events",
                str(job.runner_temp / "rio" / "session.sqlite3"),
            ],
            env=cli_env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        modes = [json.loads(line) for line in events.splitlines() if '"cell_user"' in line]
        assert [m["mode"] for m in modes] == ["shared"]
        outputs = [json.loads(line) for line in events.splitlines() if '"kind": "output"' in line]
        assert any(o.get("text", "").strip() == str(NOBODY) for o in outputs)


# --- the job's records are the harness's alone -----------------------------------------------

# Run by a Cell (and a validator) as the Cell user: how far it gets with each of the job's
# records, rio-ci's and the runner's. ``sys.argv[1]``: the harness's HOME.
REACH = """
import json, os, sys
temp = os.environ["RUNNER_TEMP"]
state = os.path.join(temp, "rio")
targets = {
    "runner-temp": temp,
    "state": state,
    "job": f"{state}/job.json",
    "session": f"{state}/session.sqlite3",
    "scratch": f"{state}/session.sqlite3.d",
    "git": f"{state}/git",
    "git-head": f"{state}/git/HEAD",
    "git-home": f"{state}/git-home",
    "record": f"{state}/record.git",
    "record-head": f"{state}/record.git/HEAD",
    "artifact": f"{temp}/rio-artifact",
    "harness-home": sys.argv[1],
}


def reach(path):
    try:
        os.listdir(path)
        return "listed"
    except NotADirectoryError:
        pass
    except OSError as exc:
        return type(exc).__name__
    try:
        with open(path, "rb") as stream:
            stream.read(1)
        return "read"
    except OSError as exc:
        return type(exc).__name__


print("reach=" + json.dumps({name: reach(path) for name, path in targets.items()}))
"""


def reached(text: str) -> dict[str, str]:
    (line,) = [line for line in text.splitlines() if line.startswith("reach=")]
    found: dict[str, str] = json.loads(line.removeprefix("reach="))
    return found


def test_a_cell_can_neither_list_nor_read_the_jobs_records(
    place: Path, gh: FakeGitHub, cell_user: str
) -> None:
    """Every record of the job — ``$RUNNER_TEMP`` itself, the state directory and all it holds
    (``job.json``, the Session, the scratch folder, the harness's git directory and its home,
    the launch-record repository), the artifact directory, the harness's HOME — is closed to
    a Cell, in the run step and in finish (a validator runs there, as the Cell user, after the
    artifact directory is written); ``rio_ci.api`` still works."""
    harness_home = pwd.getpwuid(0).pw_dir  # what the Owner has once it became root
    validator = ["/usr/bin/python3", "-c", REACH, harness_home]
    repo = Repository(
        place, gh, files={".github/rio.yml": f"validators: [{json.dumps(validator)}]\n"}
    )
    body = REACH.replace("sys.argv[1]", repr(harness_home)) + (
        "from rio_ci.api import records\nprint('api', len(records()) > 0)\n"
    )
    repo.set_script(script([add(code_cell(body))], [conclude()]))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    job.env.update(RIO_CELL_USER=cell_user, HOME=harness_home)

    run = repo.collect(job, repo.start(job))
    finish = repo.step(job, "finish")

    assert run.code == 0 and finish.code == 0, (run.stderr, finish.stderr)
    events = repo.events(job)
    text = "".join(
        e["text"]
        for e in events
        if e["kind"] == "output" and e["cell_id"] == 1 and e["stream"] == "stdout" and "text" in e
    )
    assert "api True" in text, text  # rio_ci.api works from the Cell
    in_the_cell = reached(text)
    validators = [e for e in events if e["kind"] == "validator_result"]
    assert [v["result"]["type"] for v in validators] == ["success", "success"]
    in_finish = reached(validators[-1]["stdout"])  # the pull-request gate's run
    assert set(in_the_cell.values()) == {"PermissionError"}, in_the_cell
    assert set(in_finish.values()) == {"PermissionError"}, in_finish
    # each of them was there to be refused
    state = job.runner_temp / "rio"
    for path in (
        state / "job.json",
        state / "session.sqlite3",
        state / "session.sqlite3.d",
        state / "git" / "HEAD",
        state / "git-home",
        state / "record.git" / "HEAD",
        job.artifact_dir / "session.sqlite3",
        Path(harness_home),
    ):
        assert path.exists(), path
    assert gh.pulls, "the gate passed: the validator ran as the Cell user in finish"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700


# --- a fresh Cell home in every job ----------------------------------------------------------

SHARED = SHARED_PLACES


def planting(mark: str) -> str:
    """A Cell that leaves, as the Cell user, what would run in the next Session's Cells."""
    return f"""
        set -e
        py=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
        site="$HOME/.local/lib/python$py/site-packages"
        mkdir -p "$HOME/.config/pip" "$site" "$UV_CACHE_DIR"
        printf '[core]\\n\\tfsmonitor = /tmp/{mark}-fsmonitor\\n' > "$HOME/.gitconfig"
        printf '[commit]\\n\\tgpgSign = true\\n[gpg]\\n\\tprogram = /tmp/{mark}-gpg\\n' \
            >> "$HOME/.gitconfig"
        echo 'echo {mark}' > "$HOME/.bashrc"
        printf '[global]\\nindex-url = http://127.0.0.1:9/{mark}\\n' \
            > "$HOME/.config/pip/pip.conf"
        echo 'print("{mark}")' > "$site/sitecustomize.py"
        echo {mark} > "$UV_CACHE_DIR/{mark}"
        for place in {" ".join(SHARED)}; do echo {mark} > "$place/{mark}"; done
        mkdir /tmp/{mark}-dir && echo {mark} > /tmp/{mark}-dir/inside
        git config --global --get core.fsmonitor
        echo planted
    """


def looking(mark: str) -> str:
    """A Cell that reports what it finds of an earlier Cell's leftovers."""
    return f"""
        echo "home=$(find "$HOME" -mindepth 1 | wc -l)"
        git config --global --get core.fsmonitor || echo no-fsmonitor
        for place in {" ".join(SHARED)}; do
            test -e "$place/{mark}" && echo "left=$place" || true
        done
        test -e /tmp/{mark}-dir && echo left=/tmp/{mark}-dir || true
        echo looked
    """


def cell_text(repo: Repository, job: Job) -> str:
    return "".join(
        e.get("text", "")
        for e in repo.events(job)
        if e["kind"] == "output" and e["cell_id"] == 1 and e["stream"] == "stdout"
    )


def test_every_job_starts_its_cells_with_an_empty_home_and_finish_removes_it(
    place: Path, gh: FakeGitHub, cell_user: str, mark: str
) -> None:
    """One Session's Cells plant a ``~/.gitconfig`` (an fsmonitor, commit signing), a
    ``~/.bashrc``, a ``pip.conf``, a user-site ``sitecustomize.py``, a file in uv's cache and
    files in the machine's world-writable folders: finish removes all of it. Another
    Session's job plants them again and is lost after its run step (no finish); the next
    job, a third Session's with the same Cell user, still starts with an empty HOME."""
    repo = Repository(place, gh)

    def job_for(cell: str, *, finish: bool = True) -> Job:
        repo.set_script(script([add(cmd_cell("sh", "-c", cell))], WAIT))
        issue = gh.add_issue("Fix", labels=("rio",))
        job = repo.prepare("issues", labeled(issue))
        job.env["RIO_CELL_USER"] = cell_user
        assert repo.collect(job, repo.start(job)).code == 0, job.logs
        if finish:  # else the runner is lost after the run step
            assert repo.step(job, "finish").code == 0, job.logs
        return job

    first = job_for(planting(mark))

    home = Path(pwd.getpwnam(cell_user).pw_dir)
    assert "planted" in cell_text(repo, first)
    assert f"/tmp/{mark}-fsmonitor" in cell_text(repo, first)  # git honoured it, as a Cell
    assert not home.exists()
    assert [p for p in SHARED if Path(p, mark).exists()] == []
    assert not Path(f"/tmp/{mark}-dir").exists()

    job_for(planting(mark), finish=False)
    assert (home / ".gitconfig").exists() and Path("/tmp", mark).exists()  # lost: left

    third = job_for(looking(mark))

    lines = cell_text(repo, third).split()
    assert "looked" in lines and "home=0" in lines, lines
    assert "no-fsmonitor" in lines and not [w for w in lines if w.startswith("left=")]
