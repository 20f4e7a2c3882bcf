"""The channel ``rio_ci.api`` reaches the Owner through (rio_ci/run/confinement/channel.py):
closing it leaves no bridge process it started running, however long that bridge would have
taken.

The bridge is held at its start by a hook of its interpreter's: the channel runs
``python -I`` (no ``PYTHONPATH``, so no ``sitecustomize`` of a Cell's), so the channel runs in a
driver process whose interpreter is a virtual environment with a ``.pth`` file that runs the
hook (``tests.kit.python_with``). The hook acts only where the channel's environment names the
test's socket: it tells the test its pid, then waits on that socket for as long as the test
holds it. No clock decides anything here."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rio_ci.run.confinement.channel import Channel
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests.kit import cli_env, python_with
from tests.session_cli import gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_PEERCRED")

HOLD = """\
import os, socket
if os.environ.get("RIO_TEST_HOLD"):
    held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    held.connect(os.environ["RIO_TEST_HOLD"])
    held.sendall(str(os.getpid()).encode())
    held.recv(1)  # until the test lets go, or the process is stopped
"""


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path: a Unix socket's path is at most 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="rio-hold-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def ask(path: Path, replies: list[bytes]) -> None:
    """One request through the channel, as ``rio_ci.api`` makes it; the reply, if any."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(path))
        conn.sendall(json.dumps({"args": ["records", "0"]}).encode())
        conn.shutdown(socket.SHUT_WR)
        replies.append(conn.makefile("rb").read())


# Serves a channel for the test: prints its socket's path, closes it when told, says so.
DRIVER = """\
import os, sys
from pathlib import Path
from rio_ci.run.confinement.channel import Channel
db, cwd, hold = sys.argv[1:]
env = {**os.environ, "RIO_TEST_HOLD": hold}
channel = Channel(Path(db), os.geteuid(), os.getegid(), env, Path(cwd))
print(channel.path, flush=True)
sys.stdin.readline()
channel.close()
print("closed", flush=True)
sys.stdin.readline()
"""


def test_close_stops_a_bridge_still_running(tmp_path: Path, short_dir: Path) -> None:
    db = tmp_path / "s.db"
    Session.create(db, "g", Settings(cwd=str(tmp_path))).close()
    python = python_with(tmp_path / "venv", start=HOLD)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(short_dir / "hold.sock"))
    listener.listen(1)
    listener.settimeout(60)  # only a bound on a failure: the bridge connects at its start
    driver = subprocess.Popen(
        [str(python), "-I", "-c", DRIVER, str(db), str(tmp_path), str(short_dir / "hold.sock")],
        env=cli_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert driver.stdin is not None and driver.stdout is not None
    replies: list[bytes] = []
    held = None
    try:
        path = Path(driver.stdout.readline().strip())
        client = threading.Thread(target=ask, args=(path, replies), daemon=True)
        client.start()
        held, _ = listener.accept()
        pid = int(held.recv(32))
        assert not gone(pid)  # the bridge is running, held by the hook
        driver.stdin.write("close\n")
        driver.stdin.flush()
        assert driver.stdout.readline().strip() == "closed"
        assert gone(pid)  # close() stopped it: nothing it started outlives it
        client.join(timeout=60)
        assert not client.is_alive()
    finally:
        if held is not None:
            held.close()  # lets a bridge close() failed to stop go on to its end
        listener.close()
        driver.communicate("go\n", timeout=60)


def test_a_bridge_is_started_isolated_from_the_pythonpath_it_is_given(
    tmp_path: Path, short_dir: Path
) -> None:
    """The bridge gets the Cells' environment, ``PYTHONPATH`` included, whose folders a Cell
    may write: a ``sitecustomize`` there never runs (``-I``), and the answer still comes."""
    db = tmp_path / "s.db"
    Session.create(db, "g", Settings(cwd=str(tmp_path))).close()
    planted = tmp_path / "planted"
    planted.mkdir()
    marker = tmp_path / "sitecustomize-ran"
    (planted / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join([str(planted), env["PYTHONPATH"]])
    channel = Channel(db, os.geteuid(), os.getegid(), env, tmp_path)
    replies: list[bytes] = []
    try:
        ask(channel.path, replies)
    finally:
        channel.close()
    (reply,) = replies
    assert json.loads(reply)["code"] == 0, reply
    assert not marker.exists()


def test_the_bridge_gets_no_credential_and_no_secret_the_session_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bridge runs as the Cells' user and can be read by a Cell while it answers
    (``/proc/<pid>/environ``): it starts without credential-named variables and without the
    Session's ``--secret`` ones, or any value holding theirs."""
    from rio_ci.run.owner import Owner

    hook = "https://hooks.example.test/T0/B1/abcdef123456"
    monkeypatch.setenv("DEPLOY_HOOK", hook)
    monkeypatch.setenv("HOOK_MIRROR", f"copy of {hook}")
    monkeypatch.setenv("GITHUB_TOKEN", "canary-github-9c2d")
    db = tmp_path / "s.db"
    Session.create(db, "goal", Settings(cwd=str(tmp_path), secrets=("DEPLOY_HOOK",))).close()
    owner = Owner(str(db))
    try:
        owner.confinement.prepare(owner.session)
        channel = owner.confinement.channel
        assert channel is not None
        env = channel.env
    finally:
        owner.close()
    assert not {"DEPLOY_HOOK", "HOOK_MIRROR", "GITHUB_TOKEN"} & set(env)
    assert env["PATH"] == os.environ["PATH"]  # the rest of the environment is kept
