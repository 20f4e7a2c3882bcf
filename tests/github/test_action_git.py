"""The harness's own git honours nothing a Cell can write (docs/security.md).

A Cell plants, in the checkout's ``.git/config``, in ``~/.gitconfig`` and ``~/.config/git``,
in ``.git/hooks/`` and in attributes files, everything that would make git run a program or
send the token elsewhere: a proxy, ``insteadOf`` / ``pushInsteadOf`` rewrites, hooks, a
filter driver, fsmonitor, a credential helper, ``askPass``, ``sshCommand``, a signing program,
an include, ``sslVerify=false``, an extra header. The launch records pushed after that Cell
and finish's checkpoint then run against a real origin served over HTTP by the fake: no
planted program runs (each would append to a marker file), the listener the rewrites and the
proxy point at receives no connection, the decoy repository receives nothing, and the token
reaches only the origin.
"""

from __future__ import annotations

import json
import os
import socketserver
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from action_job import WAIT, Job, Repository, commented, labeled, script
from fakes.github_api import FakeGitHub

from rio_ci.github.git import scheme
from tests.kit import add, cmd_cell, code_cell

pytestmark = [pytest.mark.slow, pytest.mark.people(alice="write")]


class Listener(socketserver.ThreadingTCPServer):
    """A loopback TCP listener that records the first bytes of every connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.received: list[bytes] = []
        super().__init__(("127.0.0.1", 0), _Record)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Record(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.settimeout(5)
        try:
            data = self.request.recv(65536)
        except OSError:
            data = b"(no data)"
        assert isinstance(self.server, Listener)
        self.server.received.append(data or b"(connected)")


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def hostile_config(origin: str, listener: str, decoy: Path, plant: Path) -> str:
    """Every git setting that would run a program from ``plant`` or reroute a push."""
    marker = f"{plant}/marker"
    return f"""
[http]
\tproxy = {listener}
\tsslVerify = false
\textraHeader = X-Planted: by-a-cell
\tfollowRedirects = true
[http "{origin}"]
\tproxy = {listener}
\textraHeader = X-Planted: for-the-origin
[url "{listener}/"]
\tinsteadOf = {origin}
[url "{decoy}"]
\tpushInsteadOf = {origin}
[core]
\thooksPath = {plant}/hooks
\tfsmonitor = {marker}
\taskPass = {marker}
\tsshCommand = {marker}
\tpager = {marker}
\teditor = {marker}
[credential]
\thelper = !{marker}
[filter "planted"]
\tclean = {marker}
\tsmudge = {marker}
\tprocess = {marker}
\trequired = true
[commit]
\tgpgSign = true
[push]
\tgpgSign = true
[gpg]
\tprogram = {marker}
[protocol]
\tallow = always
[include]
\tpath = {plant}/included.cfg
"""


HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-push",
    "post-checkout",
    "reference-transaction",
    "post-index-change",
    "push-to-checkout",
)


def planting_cell(origin: str, listener: str, decoy: Path, plant: Path, marks: Path) -> str:
    """A Cell's script that plants the configuration everywhere a Cell can write it."""
    config = hostile_config(origin, listener, decoy, plant)
    return f"""
import os, pathlib, stat
plant, marks = pathlib.Path({str(plant)!r}), pathlib.Path({str(marks)!r})
config = {config!r}
program = "#!/bin/sh\\necho \\"$0 $*\\" >> " + str(marks / "ran") + "\\ncat\\n"
(plant / "hooks").mkdir(parents=True, exist_ok=True)
marker = plant / "marker"
marker.write_text(program)
marker.chmod(0o755)
for name in {list(HOOKS)!r}:
    for hooks in (plant / "hooks", pathlib.Path(".git/hooks")):
        hooks.mkdir(parents=True, exist_ok=True)
        (hooks / name).write_text(program)
        (hooks / name).chmod(0o755)
(plant / "included.cfg").write_text("[core]\\n\\thooksPath = " + str(plant / "hooks") + "\\n")
home = pathlib.Path(os.environ["HOME"])
for path in (pathlib.Path(".git/config"), home / ".gitconfig", home / ".config/git/config"):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as out:
        out.write(config)
for path in (pathlib.Path(".gitattributes"), pathlib.Path(".git/info/attributes"),
             home / ".config/git/attributes"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("* filter=planted\\n")
pathlib.Path("notes.txt").write_text("plain content\\r\\n")
if "insteadOf" in pathlib.Path(".git/config").read_text():
    print("planted: insteadOf in .git/config")
"""


def test_git_config_hooks_filters_and_proxies_written_by_a_cell_are_not_honoured(
    tmp_path: Path, gh: FakeGitHub, listener: Listener
) -> None:
    repo = Repository(tmp_path, gh, http=True)
    plant, marks, decoy = tmp_path / "plant", tmp_path / "marks", tmp_path / "decoy.git"
    marks.mkdir()
    subprocess.run(["git", "init", "--quiet", "--bare", str(decoy)], check=True)
    planting = planting_cell(repo.url, listener.url, decoy, plant, marks)
    repo.set_script(
        script(
            [add(code_cell(planting))],
            [add(cmd_cell("python3", "-c", "print('after the planting')"))],
            WAIT,
        )
    )
    issue = gh.add_issue("Fix", labels=("rio",))
    # What a step's $GITHUB_ENV could hand the later steps: git variables of its own.
    planted_env = {
        "GIT_CONFIG_PARAMETERS": f"'http.proxy'='{listener.url}'",
        "GIT_TRACE": str(marks / "trace"),
        "GIT_SSL_NO_VERIFY": "1",
    }
    job = _job_without_proxy_exemptions(repo, tmp_path, labeled(issue), planted_env)

    assert job.run.code == 0 and job.finish.code == 0, job.logs
    assert job.outputs["status"] == "waiting", job.logs
    # The Cell did plant everything (so what follows is not vacuous) ...
    printed = "".join(
        e["text"] for e in repo.events(job) if e["kind"] == "output" and e["cell_id"] == 1
    )
    assert "planted: insteadOf in .git/config" in printed, printed
    assert "planted" in (job.workspace / ".gitattributes").read_text()
    assert (Path(job.env["HOME"]) / ".gitconfig").read_text().count("[filter") == 1
    # ... and none of it was honoured by the launch record of the next Cell or by finish.
    assert not (marks / "ran").exists(), (marks / "ran").read_text()
    assert not (marks / "trace").exists()  # no GIT_* variable of the job reached git
    assert listener.received == [], listener.received
    assert _refs(decoy) == []
    record = json.loads(_git(repo.origin, "show", f"refs/rio/sessions/{issue}:record.json"))
    assert record["cell_id"] == 2  # pushed after the planting Cell ran
    branch = f"rio/issue-{issue}"
    committed = subprocess.run(
        ["git", "cat-file", "blob", f"{branch}:notes.txt"],
        cwd=repo.origin,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    assert committed == b"plain content\r\n"  # as written: no filter, no line-end conversion
    # The token went to the origin's git endpoint only, and no planted header went anywhere.
    git_requests = [r for r in gh.requests if r.path.startswith(f"/{gh.repo}.git/")]
    assert any(r.path.endswith("git-receive-pack") for r in git_requests)
    assert not [r for r in gh.requests if "x-planted" in r.headers]


def test_the_agents_own_git_sees_the_branch_it_works_on(tmp_path: Path, gh: FakeGitHub) -> None:
    """The harness works in a git directory of its own, but lends the branch back to the
    checkout's ``.git`` before any Cell runs: the agent's ``git status`` is clean on it."""
    repo = Repository(tmp_path, gh, http=True)
    write = add(cmd_cell("python3", "-c", "open('notes.txt', 'w').write('first job')"))
    look = "git rev-parse --abbrev-ref HEAD; git status --porcelain; git log -1 --format=%s"
    issue, first = repo.labeled_issue(
        script([write], WAIT, [add(cmd_cell("sh", "-c", look))], WAIT)
    )
    assert first.outputs["status"] == "waiting", first.logs
    steer = gh.add_comment(issue, "go on", user="alice")
    second = repo.job("issue_comment", commented(gh, steer))
    assert second.outputs["status"] == "waiting", second.logs
    printed = "".join(
        e["text"] for e in repo.events(second) if e["kind"] == "output" and e["cell_id"] == 3
    )
    lines = printed.splitlines()
    assert lines[0] == f"rio/issue-{issue}", printed
    assert lines[1].startswith("rio-ci: checkpoint of"), printed  # nothing to report: clean


def test_a_checkout_owned_by_another_user_is_still_checkpointed(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """The Cell user may own the checkout: git's ownership check must not stop the harness
    (its git directory is its own; ``safe.directory`` is set on the command scope only)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to hand the checkout to another user")
    repo = Repository(tmp_path, gh)
    repo.set_script(
        script([add(cmd_cell("python3", "-c", "open('notes.txt', 'w').write('x')"))], WAIT)
    )
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    subprocess.run(["chown", "-R", "65534:65534", str(job.workspace)], check=True)
    repo.collect(job, repo.start(job))
    repo.step(job, "finish")
    assert job.finish.code == 0, job.logs
    assert _git(repo.origin, "cat-file", "blob", f"rio/issue-{issue}:notes.txt") == "x"


def test_finish_pushes_to_the_origin_recorded_before_any_cell_ran(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """A rewritten ``remote.origin.url`` in the checkout, or a ``remote`` put into
    ``job.json``, does not move finish's push: the origin is the one kept in the harness's
    git directory when the job began."""
    repo = Repository(tmp_path, gh)
    decoy = tmp_path / "decoy.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(decoy)], check=True)
    rewrite = (
        f"git remote set-url origin {decoy}; git remote set-url --push origin {decoy}; "
        "git remote get-url origin; echo changed > notes.txt"
    )
    repo.set_script(script([add(cmd_cell("sh", "-c", rewrite))], WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    repo.collect(job, repo.start(job))
    record = job.runner_temp / "rio" / "job.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "remote": str(decoy)}))
    repo.step(job, "finish")

    assert job.finish.code == 0, job.logs
    printed = "".join(e["text"] for e in repo.events(job) if e["kind"] == "output")
    assert str(decoy) in printed  # the Cell did change it ...
    assert _git(job.workspace, "remote", "get-url", "origin").strip() == repo.url  # undone since
    assert _refs(decoy) == []
    assert _git(repo.origin, "cat-file", "blob", f"rio/issue-{issue}:notes.txt") == "changed\n"


def test_a_checkout_without_an_origin_is_a_clear_error_that_pushes_nothing(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = Repository(tmp_path, gh)
    repo.set_script(script(WAIT))
    issue = gh.add_issue("Fix", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    _git(job.workspace, "remote", "remove", "origin")
    step = repo.step(job)
    assert step.code != 0
    assert "has no 'origin' remote" in step.stdout + step.stderr
    assert [r for r in _refs(repo.origin) if not r.startswith("refs/heads/main")] == []


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://github.com/o/r", "https"),
        ("http://127.0.0.1:8080/o/r.git", "http"),
        ("git@github.com:o/r.git", "ssh"),
        ("ssh://git@github.com/o/r.git", "ssh"),
        ("/tmp/origin.git", "file"),
        ("file:///tmp/origin.git", "file"),
    ],
)
def test_only_the_origins_transport_is_allowed(url: str, expected: str) -> None:
    assert scheme(url) == expected


# --- helpers -----------------------------------------------------------------------------


def _job_without_proxy_exemptions(
    repo: Repository, tmp: Path, payload: dict[str, object], extra: dict[str, str]
) -> Job:
    """One job whose HOME is the test's, with no NO_PROXY exemption for loopback (so a
    proxy git honoured would really be used) and ``extra`` in its environment."""
    job = repo.prepare("issues", payload)
    job.env.update(extra)
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        job.env.pop(name, None)
    job.env["HOME"] = str(home)
    repo.collect(job, repo.start(job))
    repo.step(job, "finish")
    repo.upload(job)
    return job


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    ).stdout


def _refs(bare: Path) -> list[str]:
    return _git(bare, "for-each-ref", "--format=%(refname)").split()
