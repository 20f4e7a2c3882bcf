"""A workflow whose ``PYTHONPATH`` and ``PATH`` name folders of the checkout (docs/security.md,
"What the harness runs, and from where"): nothing from the checkout runs inside rio-ci.

rio-ci is installed as action.yml installs it, and each step runs that install's ``rio-ci``
command, as the composite does. The repository has a ``bin/`` of planted programs (``git``,
``sudo``, ``useradd``, ``uv``, ``env``, ``sh``) that the workflow puts first on ``PATH``; a
Cell writes ``src/sitecustomize.py``, an ``encodings`` package and a ``rio_ci`` package into
``src/``, which the workflow's ``PYTHONPATH`` names, then calls ``rio_ci.api`` (the Owner's
bridge). Every plant leaves a marker, with the environment it saw, when anything runs it.
After the run and the finish step no marker exists, the branch was pushed by the real git, and
the Cell saw ``PYTHONPATH`` and ``PATH`` as the workflow set them."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from action_install import action_copy, install_as_the_action_does
from action_job import Repository, conclude, git, labeled, script
from fakes.github_api import FakeGitHub

from tests.kit import ROOT, add, cli_env, cmd_cell, code_cell

pytestmark = [
    pytest.mark.people(alice="write"),
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("useradd"),
        reason="the Cell user needs rio-ci to be root on Linux (as in CI)",
    ),
]
PROGRAMS = ("git", "sudo", "useradd", "uv", "env", "sh")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Python that leaves a marker named MARK-<pid> holding the environment it runs in. Only the
# ``posix`` module: an ``encodings`` package runs before ``open`` exists.
PYTHON_MARK = (
    "import posix\n"
    "fd = posix.open({mark!r} + '-' + str(posix.getpid()), posix.O_CREAT | posix.O_WRONLY, 0o666)\n"
    "posix.write(fd, repr(posix.environ).encode())\n"
    "posix.close(fd)\n"
)
# The Cell: what it sees, what it plants, a change to push, and a question to the Owner.
CELL = """\
import encodings, json, os, shutil
from pathlib import Path
print(json.dumps({{"PATH": os.environ["PATH"], "PYTHONPATH": os.environ["PYTHONPATH"]}}))
mark = {mark!r}
src = Path("src")
(src / "rio_ci").mkdir(parents=True)
(src / "sitecustomize.py").write_text(mark.format(mark={markers!r} + "/sitecustomize"))
(src / "rio_ci" / "__init__.py").write_text(mark.format(mark={markers!r} + "/rio_ci"))
for name in ("cli.py", "__main__.py"):
    (src / "rio_ci" / name).write_text(mark.format(mark={markers!r} + "/rio_ci." + name))
shutil.copytree(
    Path(encodings.__file__).parent, src / "encodings", ignore=shutil.ignore_patterns("*.pyc")
)
first = src / "encodings" / "__init__.py"
first.write_text(mark.format(mark={markers!r} + "/encodings") + first.read_text())
Path("fixed.txt").write_text("fixed\\n")
from rio_ci.api import records
print("records", len(records()) > 0)
"""


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder every user may enter (tmp_path's parents are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="rio-isolation-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def plant_programs(repo: Repository, markers: Path) -> None:
    """Commit ``bin/`` with the planted programs to the repository's main branch."""
    clone = repo.tmp / "planting"
    git(repo.tmp, "clone", "--quiet", str(repo.origin), str(clone))
    (clone / "bin").mkdir()
    for name in PROGRAMS:
        program = clone / "bin" / name
        program.write_text(f'#!/bin/sh\n/usr/bin/env > "{markers}/{name}-$$"\nexit 1\n')
        program.chmod(0o755)
    git(clone, "add", "--all")
    git(clone, "commit", "--quiet", "-m", "a bin/ the workflow puts on PATH")
    git(clone, "push", "--quiet", "origin", "main")


@pytest.mark.slow
def test_a_pythonpath_and_a_path_into_the_checkout_run_nothing_inside_rio_ci(
    place: Path, gh: FakeGitHub, cell_user: str
) -> None:
    installed = install_as_the_action_does(place / "install", action_copy(place / "action"))
    assert installed.returncode == 0, installed.stderr[-3000:]
    command = place / "install" / "rio-ci-venv" / "bin" / "rio-ci"
    markers = place / "markers"
    markers.mkdir()
    markers.chmod(0o777)  # whoever runs a plant can leave its marker
    repo = Repository(place, gh)
    repo.command = [str(command)]
    plant_programs(repo, markers)
    cell = CELL.format(mark=PYTHON_MARK, markers=str(markers))
    repo.set_script(script([add(code_cell(cell))], [add(cmd_cell("/bin/true"))], [conclude()]))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    workspace = job.workspace
    workflow_path = f"{workspace}/bin:{SYSTEM_PATH}"
    job.env.update(PYTHONPATH=f"{workspace}/src", PATH=workflow_path, RIO_CELL_USER=cell_user)
    assert (workspace / "bin" / "git").exists()  # the checkout holds the plants

    run = repo.collect(job, repo.start(job))
    finish = repo.step(job, "finish")

    assert run.code == 0 and finish.code == 0, (run.stderr[-3000:], finish.stderr[-3000:])
    assert run.result["status"] == "succeeded", run.stdout
    ran = {p.name: p.read_text()[:300] for p in markers.iterdir()}
    assert ran == {}  # no planted program, module or package ran, in either step
    assert (workspace / "src" / "sitecustomize.py").exists()  # the Cell did plant them
    assert git(repo.origin, "show", f"rio/issue-{issue}:fixed.txt") == "fixed"
    assert len(gh.pulls) == 1
    job.env.update(cli_env())  # the test's own rio-ci reads the events, not the checkout's
    lines = [
        e["text"]
        for e in repo.events(job)
        if e["kind"] == "output" and e["cell_id"] == 1 and e["stream"] == "stdout" and "text" in e
    ]
    seen = json.loads("".join(lines).splitlines()[0])
    assert seen["PATH"].endswith(os.pathsep + workflow_path)  # after uv's own for the script
    shim, *given = seen["PYTHONPATH"].split(os.pathsep)
    assert given == [f"{workspace}/src"] and shim != str(ROOT)
    assert "records True" in "".join(lines)  # the Owner's bridge answered, isolated
