"""The channel ``rio_ci.api`` reaches the Owner through (rio_ci/run/channel.py): closing it
leaves no bridge process it started running, however long that bridge would have taken.

The bridge is held at its start by a ``sitecustomize`` on its ``PYTHONPATH`` (the channel runs
it with the environment it was given): the hook tells the test its pid over a socket, then
waits on that socket for as long as the test holds it. No clock decides anything here."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rio_ci.run.channel import Channel
from rio_ci.session import Session
from tests.kit import cli_env
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


def test_close_stops_a_bridge_still_running(tmp_path: Path, short_dir: Path) -> None:
    db = tmp_path / "s.db"
    Session.create(db, "g", cwd=str(tmp_path)).close()
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(HOLD)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(short_dir / "hold.sock"))
    listener.listen(1)
    listener.settimeout(60)  # only a bound on a failure: the bridge connects at its start
    env = cli_env(RIO_TEST_HOLD=str(short_dir / "hold.sock"))
    env["PYTHONPATH"] = os.pathsep.join([str(hooks), env["PYTHONPATH"]])
    channel = Channel(db, os.geteuid(), os.getegid(), env, tmp_path)
    replies: list[bytes] = []
    client = threading.Thread(target=ask, args=(channel.path, replies), daemon=True)
    held = None
    try:
        client.start()
        held, _ = listener.accept()
        pid = int(held.recv(32))
        assert not gone(pid)  # the bridge is running, held by the hook
        channel.close()
        assert gone(pid)  # close() stopped it: nothing it started outlives it
    finally:
        channel.close()
        if held is not None:
            held.close()  # lets a bridge close() failed to stop go on to its end
        listener.close()
    client.join(timeout=60)
    assert not client.is_alive()


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
    Session.create(db, "goal", cwd=str(tmp_path), secrets=["DEPLOY_HOOK"]).close()
    owner = Owner(str(db))
    try:
        owner.cells.prepare(owner.session)
        channel = owner.cells.channel
        assert channel is not None
        env = channel.env
    finally:
        owner.close()
    assert not {"DEPLOY_HOOK", "HOOK_MIRROR", "GITHUB_TOKEN"} & set(env)
    assert env["PATH"] == os.environ["PATH"]  # the rest of the environment is kept
