"""The Cell user is the container (docs/design.md, "The Cell user is the container"): with
``--cell-user`` and rio-ci running as root, every Cell runs as that unprivileged user. It can
write the working tree and nothing the harness runs or trusts; it cannot read the Owner's
environment, become root, or open the Session file, yet ``rio_ci.api`` works; and however it
forks, every process of it is stopped on cancel, timeout, the Execution's end and recovery.

These need root (tests run as root here and in CI) and skip elsewhere. Each test has a Cell
user of its own, so tests running side by side never stop each other's Cells.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import rio_ci
from rio_ci.commands.bench.cells import measure_cells
from rio_ci.run.confinement.channel import Channel, prefix_of
from rio_ci.run.confinement.folder import prefix_of as prefix_of_folder
from rio_ci.run.environment import uv_binary
from rio_ci.session.session import Session
from tests.hostile.support import (
    NOBODY,
    shared_folder,
    unprivileged_env,
    unprivileged_python,
    unprivileged_rio,
)
from tests.kit import PEP723, cli_env, cmd_cell, note_cell, until
from tests.session_cli import CliSession, gone

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("useradd"),
    reason="Cells run as a user of their own only when rio-ci is root on Linux (as in CI)",
)
SYSTEM_PYTHON = "/usr/bin/python3"  # one every user can run (the venv's may sit in /root)

# A Cell that escapes its Worker every way a process can: a grandchild in a session of its
# own, re-executed without the Worker's token, closed off from the pipes and not dumpable
# (its /proc entries are root's). It writes its pid to ``daemon.pid`` and sleeps forever;
# the Cell itself then stays (``stay``) or exits 0 (``leave``).
ESCAPE = """\
import ctypes, os, sys, time
marker, then = "daemon.pid", sys.argv[1]
if len(sys.argv) > 2:
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    with open(marker + ".tmp", "w") as out:
        out.write(str(os.getpid()))
    os.rename(marker + ".tmp", marker)
    while True:
        time.sleep(1)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        env = {k: v for k, v in os.environ.items() if k != "RIO_WORKER_TOKEN"}
        os.execve(sys.executable, [sys.executable, sys.argv[0], then, "daemon"], env)
    os._exit(0)
os.wait()
while not os.path.exists(marker):
    time.sleep(0.01)
print("escaped", flush=True)
while then == "stay":
    time.sleep(1)
"""


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder everyone may enter, on a disk (tmp_path's parents are root's alone, and
    opening them for one test's Cell user would race with the next test's closing them)."""
    folder = Path(tempfile.mkdtemp(prefix="rio-cell-test-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def system_python() -> str:
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} is needed for a Python Cell every user can run")
    return SYSTEM_PYTHON


def session_in(root: Path, *limits: str) -> CliSession:
    return CliSession.create(root, limits=limits)


def work(sess: CliSession, user: str, **options: Any) -> dict[str, Any]:
    return sess.work(args=["--cell-user", user], **options)


def output(sess: CliSession, cell_id: int, stream: str = "stdout") -> str:
    text: str = sess.json("output", str(sess.db), str(cell_id), "--stream", stream)["text"]
    return text


def show(sess: CliSession) -> dict[str, Any]:
    shown: dict[str, Any] = sess.json("show", str(sess.db), "--json")
    return shown


# --- what a Cell can reach --------------------------------------------------------------------


def test_a_cell_runs_as_the_cell_user_and_reaches_only_the_working_tree(
    place: Path, cell_user: str
) -> None:
    private = place / "private"  # a folder the Cell user may not enter before the run
    private.mkdir(mode=0o700)
    sess = session_in(private / "s")
    record = private / "job.json"  # stands for the job's records: the harness's files
    record.write_text("{}")
    package = Path(rio_ci.__file__).parent
    probe = f"""
        id -u
        grep NoNewPrivs /proc/self/status
        echo "home=$HOME"
        touch made-by-the-cell && echo tree=written
        (echo x >> {sess.db}) 2>/dev/null && echo session=written || echo session=refused
        cat {sess.db} > /dev/null 2>&1 && echo session-read=yes || echo session-read=no
        (echo x >> {record}) 2>/dev/null && echo record=written || echo record=refused
        touch {package}/planted.pth 2>/dev/null && echo install=written || echo install=refused
        cat /proc/$PPID/environ > /dev/null 2>&1 && echo environ=read || echo environ=refused
        if command -v sudo > /dev/null; then
            sudo -n true > /dev/null 2>&1 && echo sudo=root || echo sudo=refused
        else
            echo sudo=refused
        fi
    """
    sess.propose(cmd_cell("sh", "-c", probe))

    out = work(sess, cell_user, env=cli_env(ANTHROPIC_API_KEY="sk-ant-not-for-cells"))

    assert out["ran"] == [1] and sess.result(1)["type"] == "success"
    user = pwd.getpwnam(cell_user)
    lines = output(sess, 1).split()
    assert lines[0] == str(user.pw_uid)
    assert "NoNewPrivs:" in lines and lines[lines.index("NoNewPrivs:") + 1] == "1"
    assert f"home={user.pw_dir}" in lines
    for seen in (
        "tree=written",
        "session=refused",
        "session-read=no",
        "record=refused",
        "install=refused",
        "environ=refused",
        "sudo=refused",
    ):
        assert seen in lines, (seen, lines)
    assert not (package / "planted.pth").exists()
    assert record.read_text() == "{}"
    # Handed back: the tree is its owner's again, the folder closed as it was.
    made = sess.cwd / "made-by-the-cell"
    assert made.stat().st_uid == 0 and sess.cwd.stat().st_uid == 0
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert stat.S_IMODE(sess.db.stat().st_mode) == 0o600
    shown = show(sess)["cell_user"]
    assert shown == {"mode": "separate", "user": cell_user, "uid": user.pw_uid, "reason": None}
    text = sess.run("show", str(sess.db)).stdout
    assert f"cells run as: {cell_user} (uid {user.pw_uid})" in text


def test_rio_ci_api_works_from_a_code_cell_that_cannot_open_the_session(
    place: Path, cell_user: str
) -> None:
    sess = session_in(place / "s")
    body = f"""\
import os
from rio_ci.api import records, timer
try:
    open({str(sess.db)!r}, "rb")
    print("opened")
except PermissionError:
    print("refused")
print(timer("wake", 4_000_000_000, {{"n": 1}})["id"])
print(len(records()))
print(os.getuid())
"""
    sess.propose({"kind": "code", "runtime": "python", "source": PEP723 + body})

    out = work(sess, cell_user)

    assert out["ran"] == [1], output(sess, 1, "stderr")
    refused, timer_id, count, uid = output(sess, 1).split()
    assert refused == "refused" and timer_id == "wake"
    assert int(uid) == pwd.getpwnam(cell_user).pw_uid
    (timer,) = sess.events("timer_set")
    (finished,) = sess.events("execution_finished")
    # records() returned every event committed so far: from the first through the Timer the
    # Cell had just set, and none of what came after the Cell
    assert timer["seq"] <= int(count) < finished["seq"]
    assert timer["id"] == "wake" and timer["payload"] == {"n": 1} and timer["cell_id"] == 1


def test_the_channel_answers_only_the_cell_user(place: Path, cell_user: str) -> None:
    sess = session_in(place / "s")
    sess.propose(cmd_cell("true"))
    work(sess, cell_user)  # creates the user
    user = pwd.getpwnam(cell_user)
    channel = Channel(sess.db, user.pw_uid, user.pw_gid, cli_env(), place)
    try:
        assert channel.dir.stat().st_uid == user.pw_uid
        assert stat.S_IMODE(channel.dir.stat().st_mode) == 0o700
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:  # we are root
            conn.connect(str(channel.path))
            conn.sendall(json.dumps({"args": ["records", "0"]}).encode())
            conn.shutdown(socket.SHUT_WR)
            reply = json.loads(conn.makefile("rb").read())
        assert reply["code"] == 1 and reply["stdout"] == ""
        assert "user 0 may not use this channel" in reply["stderr"]
    finally:
        channel.close()
    assert not channel.dir.exists()


def test_a_session_inside_the_working_tree_is_refused_before_anything_runs(
    place: Path, cell_user: str
) -> None:
    tree = place / "tree"
    tree.mkdir()
    sess = CliSession(tree)  # s.db inside the tree the Cell user would be given
    sess.session_id = sess.json("new", str(sess.db), "--goal", "g", "--cwd", str(tree))["session"]
    sess.propose(cmd_cell("touch", "ran"))

    done = sess.run("work", str(sess.db), "--cell-user", cell_user, code=1)

    assert "inside the working directory" in done.stdout
    assert sess.events("execution_started") == [] and not (tree / "ran").exists()
    assert sess.db.stat().st_uid == 0


def test_cells_read_rio_ci_from_a_folder_of_their_own_and_the_sessions_folder_stays_closed(
    place: Path, cell_user: str
) -> None:
    """The in-Cell modules, the code Cell's script and uv come from a Cell folder that only
    the Owner writes: the Session's folder (a job's records) gets no door for the Cell
    user, and the Cell folder is gone when the Owner closes."""
    records = place / "records"
    records.mkdir()
    records.chmod(0o700)
    tree = place / "tree"
    tree.mkdir()
    sess = CliSession(records)
    sess.cwd = tree
    sess.session_id = sess.json("new", str(sess.db), "--goal", "g", "--cwd", str(tree))["session"]
    body = f"""\
import json, os
from rio_ci.api import records
folder = os.path.dirname(os.environ["PYTHONPATH"].split(os.pathsep)[0])
print("folder", json.dumps(sorted(os.listdir(folder))))
for name, reach in (
    ("scratch", lambda: os.stat({str(records / "s.db.d")!r})),
    ("planted", lambda: open(os.path.join(folder, "planted"), "x")),
    ("module", lambda: open(os.path.join(folder, "pylib", "rio_ci", "api.py"), "a")),
):
    try:
        reach()
        print(name, "reached")
    except PermissionError:
        print(name, "refused")
print("api", len(records()) > 0)
print("uv", os.readlink(f"/proc/{{os.getppid()}}/exe") == os.path.join(folder, "uv"))
"""
    sess.propose({"kind": "code", "runtime": "python", "source": PEP723 + body})

    out = work(sess, cell_user)

    assert out["ran"] == [1], output(sess, 1, "stderr")
    lines = output(sess, 1).splitlines()
    assert lines == [
        'folder ["cells", "pylib", "uv"]',
        "scratch refused",
        "planted refused",
        "module refused",
        "api True",
        "uv True",  # the Cell folder's
    ]
    assert stat.S_IMODE(records.stat().st_mode) == 0o700
    assert list(Path("/tmp").glob(prefix_of_folder(sess.db) + "*")) == []


@pytest.mark.skipif(not shutil.which("unshare"), reason="unshare makes the mount namespace")
def test_where_no_temporary_folder_may_hold_programs_cells_run_rio_cis_own_uv(
    cell_user: str,
) -> None:
    """A hardened machine mounts /tmp and /var/tmp ``noexec``: the Cell folder's copy of uv
    could not run there, so Cells run rio-ci's own (its folders let through, as before)."""
    place = Path(tempfile.mkdtemp(prefix="rio-cell-test-", dir="/dev/shm"))
    place.chmod(0o755)
    try:
        sess = session_in(place / "s")
        sess.propose(
            {
                "kind": "code",
                "runtime": "python",
                "source": PEP723 + 'import os\nprint(os.readlink(f"/proc/{os.getppid()}/exe"))\n',
            }
        )
        noexec = "mount -t tmpfs -o noexec tmpfs /tmp && mount -t tmpfs -o noexec tmpfs /var/tmp"
        shell = f'{noexec} && exec "$0" -m rio_ci "$@"'
        argv = [sys.executable, "work", str(sess.db), "--cell-user", cell_user]
        done = subprocess.run(
            ["unshare", "--mount", "sh", "-c", shell, *argv],
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

        assert done.returncode == 0, done
        assert sess.result(1)["type"] == "success", output(sess, 1, "stderr")
        assert output(sess, 1).strip() == os.path.realpath(uv_binary())
    finally:
        shutil.rmtree(place, ignore_errors=True)


# --- a fresh Cell home for every Owner --------------------------------------------------------


def test_the_next_owner_starts_its_cells_with_an_empty_home(
    place: Path, cell_user: str, mark: str
) -> None:
    """Locally an Owner's start is a job's: the HOME one Session's Cells filled (and what they
    left in /tmp) is there until the next Owner with that Cell user starts — any Session's
    — which empties it before its first Cell."""
    first = session_in(place / "first")
    first.propose(
        cmd_cell(
            "sh",
            "-c",
            'printf "[core]\\n\\tfsmonitor = /bin/false\\n" > "$HOME/.gitconfig" && '
            f'mkdir -p "$UV_CACHE_DIR" && touch "$UV_CACHE_DIR/{mark}" /tmp/{mark}',
        )
    )
    work(first, cell_user)
    home = Path(pwd.getpwnam(cell_user).pw_dir)
    assert first.result(1)["type"] == "success", output(first, 1, "stderr")
    assert (home / ".gitconfig").exists() and Path("/tmp", mark).exists()
    second = session_in(place / "second")
    second.propose(
        cmd_cell("sh", "-c", f'find "$HOME" -mindepth 1 | wc -l; test -e /tmp/{mark} || echo gone')
    )

    work(second, cell_user)

    assert output(second, 1).split() == ["0", "gone"]
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert home.stat().st_uid == pwd.getpwnam(cell_user).pw_uid


def test_a_user_rio_ci_did_not_create_is_refused_and_its_home_left_as_it_is(
    place: Path, cell_user: str
) -> None:
    """rio-ci empties a Cell user's HOME, so it runs Cells only as a user it created (its
    comment says so): never as someone whose HOME holds anything else."""
    subprocess.run(["useradd", "--system", "--create-home", cell_user], check=True)
    home = Path(pwd.getpwnam(cell_user).pw_dir)
    (home / "theirs.txt").write_text("theirs")
    sess = session_in(place / "s")
    sess.propose(cmd_cell("touch", "ran"))

    done = sess.run("work", str(sess.db), "--cell-user", cell_user, code=1)

    assert "was not created by rio-ci" in json.loads(done.stdout.splitlines()[-1])["error"]
    assert (home / "theirs.txt").read_text() == "theirs"
    assert sess.events("execution_started") == [] and not (sess.cwd / "ran").exists()


def test_a_working_directory_that_holds_the_cell_folder_is_refused(cell_user: str) -> None:
    """A tree that holds /tmp would be given to the Cell user, the Cell folder with it."""
    place = Path(tempfile.mkdtemp(prefix="rio-cell-test-", dir="/dev/shm"))
    place.chmod(0o755)
    try:
        sess = CliSession(place)
        sess.session_id = sess.json("new", str(sess.db), "--goal", "g", "--cwd", "/tmp")["session"]
        sess.propose(cmd_cell("touch", "ran"))

        done = sess.run("work", str(sess.db), "--cell-user", cell_user, code=1)

        assert "where Cells read rio-ci from" in done.stdout
        assert sess.events("execution_started") == [] and Path("/tmp").stat().st_uid == 0
    finally:
        shutil.rmtree(place, ignore_errors=True)


# --- stopping every process of the Cell user --------------------------------------------------


def escaping(sess: CliSession, then: str) -> None:
    script = sess.root / "escape.py"
    script.write_text(ESCAPE)
    sess.propose(cmd_cell(SYSTEM_PYTHON, str(script), then))


def daemon_pid(sess: CliSession) -> int:
    marker = sess.cwd / "daemon.pid"
    until(marker.exists, 60, "the escaped daemon to write its pid")
    pid = int(marker.read_text())
    assert not gone(pid)
    return pid


def test_an_escaped_cell_is_stopped_on_cancel(
    place: Path, cell_user: str, system_python: str
) -> None:
    sess = session_in(place / "s")
    escaping(sess, "stay")
    owner = sess.start("work", str(sess.db), "--cell-user", cell_user)
    pid = daemon_pid(sess)

    sess.propose(note_cell("cancel 1", role="cancel", target_cell_id=1))
    owner.communicate(timeout=60)

    result = sess.result(1)
    assert result["type"] == "UnknownExecution" and result["reason"] == "cancelled_after_launch"
    assert result["worker_stopped"] is True and gone(pid)


def test_an_escaped_cell_is_stopped_on_timeout(
    place: Path, cell_user: str, system_python: str
) -> None:
    sess = session_in(place / "s", "execution_seconds=3")
    escaping(sess, "stay")
    owner = sess.start("work", str(sess.db), "--cell-user", cell_user)
    pid = daemon_pid(sess)

    owner.communicate(timeout=60)

    result = sess.result(1)
    assert result["type"] == "UnknownExecution" and result["reason"] == "timeout"
    assert result["worker_stopped"] is True and gone(pid)


def test_an_escaped_cell_is_stopped_when_its_execution_ends(
    place: Path, cell_user: str, system_python: str
) -> None:
    sess = session_in(place / "s")
    escaping(sess, "leave")

    out = work(sess, cell_user)

    assert out["ran"] == [1] and sess.result(1)["type"] == "success"
    assert "escaped" in output(sess, 1)
    assert gone(int((sess.cwd / "daemon.pid").read_text()))


def test_an_escaped_cell_is_stopped_by_recovery_after_the_owner_was_killed(
    place: Path, cell_user: str, system_python: str
) -> None:
    sess = session_in(place / "s")
    escaping(sess, "stay")
    sess.propose(cmd_cell("echo", "second"))
    owner = sess.start("work", str(sess.db), "--cell-user", cell_user)
    pid = daemon_pid(sess)
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=30)
    assert not gone(pid), "the daemon outlives its Owner"
    channels = f"{prefix_of(sess.db)}*"
    assert len(list(Path("/tmp").glob(channels))) == 1  # the killed Owner's, left behind

    out = work(sess, cell_user)

    assert gone(pid)
    assert list(Path("/tmp").glob(channels)) == []  # swept, and the new one closed
    assert out["ran"] == [] and out["paused_by"] == "execution:1" and out["pending"] == [2]
    result = sess.result(1)
    assert result["type"] == "UnknownExecution" and result["worker_stopped"] is True
    uid = pwd.getpwnam(cell_user).pw_uid
    assert [
        p.pid for p in psutil.process_iter(["uids"]) if uid in p.info["uids"] and not gone(p.pid)
    ] == []


def test_a_cell_user_process_the_owner_cannot_stop_fails_recovery_closed(
    cell_user: str,
) -> None:
    """An Owner that may not signal the Cell user a Session recorded (here: one that is not
    root) and finds a process of that user fails recovery closed: exit 4 after the 5 s
    deadline, nothing committed, nothing launched, the process left as it was."""
    with shared_folder() as folder:
        env = unprivileged_env()
        db, tree = folder / "s.db", folder / "tree"
        tree.mkdir()
        os.chown(tree, NOBODY, NOBODY)
        done = unprivileged_rio(
            "new", str(db), "--goal", "g", "--cwd", str(tree), env=env, cwd=folder
        )
        assert done.returncode == 0, done
        session = Session.open(db)
        try:
            user = subprocess.run(["useradd", "--system", cell_user], check=True)
            assert user.returncode == 0
            entry = pwd.getpwnam(cell_user)
            session.record_cell_user(
                {
                    "mode": "separate",
                    "user": cell_user,
                    "uid": entry.pw_uid,
                    "gid": entry.pw_gid,
                    "reason": None,
                    "tree": None,
                    "opened": [],
                }
            )
        finally:
            session.close()
        for path in folder.iterdir():
            os.chown(path, NOBODY, NOBODY)
        sess = CliSession(folder)
        sess.propose(cmd_cell("touch", "ran"), env=env)
        count = len(sess.events())
        survivor = subprocess.Popen(
            ["sleep", "600"], user=entry.pw_uid, group=entry.pw_gid, extra_groups=[]
        )
        try:
            failed = unprivileged_rio("work", str(db), env=env, cwd=folder)

            assert failed.returncode == 4, failed
            assert b"still alive" in failed.stdout and str(survivor.pid).encode() in failed.stdout
            assert survivor.poll() is None  # not ours to stop: left as it was
            assert len(sess.events()) == count and not (tree / "ran").exists()
        finally:
            survivor.kill()
            survivor.wait()


# --- where no Cell user is possible -----------------------------------------------------------


def test_without_root_the_cells_share_the_harness_user_and_it_is_said() -> None:
    with shared_folder() as folder:
        env = unprivileged_env()
        db = folder / "s.db"
        args = ("new", str(db), "--goal", "g", "--cwd", str(folder))
        assert unprivileged_rio(*args, env=env, cwd=folder).returncode == 0
        sess = CliSession(folder)
        sess.propose(cmd_cell("id", "-u"), env=env)

        done = unprivileged_rio("work", str(db), "--cell-user", "rio-cell", env=env, cwd=folder)

        assert done.returncode == 0, done
        assert b"Cells share the harness's user" in done.stderr
        assert output(sess, 1).strip() == str(NOBODY)
        (mode,) = sess.events("cell_user")
        assert mode["mode"] == "shared" and mode["user"] == "rio-cell"
        assert "not root" in mode["reason"]
        assert show(sess)["cell_user"]["mode"] == "shared"
        assert "share the harness's user" in sess.run("show", str(db)).stdout
        # Nor do they get a network of their own: said in the log, recorded, shown.
        assert b"Cells use the host's network (" in done.stderr
        assert mode["network"] == {"isolated": False, "reason": mode["reason"]}
        network = show(sess)["network"]
        assert (network["mode"], network["isolated"]) == ("open", False)
        assert "but Cells use the host's network" in sess.run("show", str(db)).stdout


# --- a harness user with passwordless sudo (a GitHub-hosted runner's) ------------------------


@pytest.fixture
def sudoer() -> Iterator[pwd.struct_passwd]:
    """A user who may run anything as root without a password, as a hosted runner's user."""
    if not shutil.which("sudo") or not shutil.which("setpriv"):
        pytest.skip("sudo and setpriv are needed to play a runner user with passwordless sudo")
    name = f"rio-su-{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--system", "--create-home", name], check=True)
    rule = Path(f"/etc/sudoers.d/{name}")
    rule.write_text(f"{name} ALL=(ALL) NOPASSWD:ALL\n")
    rule.chmod(0o440)
    try:
        yield pwd.getpwnam(name)
    finally:
        rule.unlink()
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


def test_an_owner_with_passwordless_sudo_becomes_root_for_its_cell_user(
    place: Path, cell_user: str, sudoer: pwd.struct_passwd
) -> None:
    tree = place / "tree"
    tree.mkdir()
    for path in (place, tree):
        os.chown(path, sudoer.pw_uid, sudoer.pw_gid)
    env = unprivileged_env(HOME=sudoer.pw_dir, ANTHROPIC_API_KEY="sk-ant-kept-from-cells")
    as_sudoer = [
        "setpriv",
        f"--reuid={sudoer.pw_uid}",
        f"--regid={sudoer.pw_gid}",
        "--init-groups",
        unprivileged_python(),  # a venv: the re-execution through sudo is `python -I`
        "-m",
        "rio_ci",
    ]

    def rio(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*as_sudoer, *args], env=env, cwd=place, capture_output=True, text=True, check=False
        )

    db = place / "s.db"
    assert rio("new", str(db), "--goal", "g", "--cwd", str(tree)).returncode == 0
    sess = CliSession(place)
    sess.propose(cmd_cell("sh", "-c", "id -u; cat /proc/$PPID/environ > /dev/null || echo refused"))

    done = rio("work", str(db), "--cell-user", cell_user)

    assert done.returncode == 0, done
    assert "share the harness's user" not in done.stderr
    uid, refused = output(sess, 1).split()
    assert int(uid) == pwd.getpwnam(cell_user).pw_uid and refused == "refused"
    assert tree.stat().st_uid == sudoer.pw_uid  # handed back to the runner's user
    assert sess.events("cell_user")[0]["mode"] == "separate"


# --- what a Cell user makes unnecessary -------------------------------------------------------


@pytest.mark.parametrize("separate", [True, False], ids=["cell-user", "shared"])
def test_the_launch_is_checkpointed_into_the_file_only_where_cells_could_reach_the_wal(
    place: Path, cell_user: str, separate: bool
) -> None:
    """Sharing the harness's user, a Cell could destroy the WAL, so its launch record is
    copied into the database file before it starts; under a Cell user it cannot, and that
    WAL checkpoint (a FULL one per launch) is left out."""
    sess = session_in(place / "s")
    sess.propose(cmd_cell("sh", "-c", "touch started; sleep 60"))
    args = ["--cell-user", cell_user] if separate else []
    owner = sess.start("work", str(sess.db), *args)
    until((sess.cwd / "started").exists, 60, "the Cell to start")
    copy = place / "file-alone.sqlite3"  # the database file without its WAL
    shutil.copyfile(sess.db, copy)
    with contextlib.closing(sqlite3.connect(f"file:{copy}?immutable=1", uri=True)) as db:
        ((started,),) = db.execute(
            "SELECT count(*) FROM events WHERE kind = 'execution_started'"
        ).fetchall()

    assert started == (0 if separate else 1)
    owner.send_signal(signal.SIGTERM)
    owner.communicate(timeout=30)


def test_the_bench_measures_cells_under_a_cell_user(place: Path, cell_user: str) -> None:
    root = place / "bench"
    root.mkdir()

    figures = measure_cells(root, True, cell_user)

    assert figures["cell_user"] == cell_user
    session = Session.open(root / "cells.sqlite3")
    try:
        assert session.proj.cell_user is not None
        assert session.proj.cell_user["mode"] == "separate"
        assert session.proj.cell_user["uid"] == pwd.getpwnam(cell_user).pw_uid
    finally:
        session.close()
