"""Secrets never reach a Worker: not through its environment, not through the Owner's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rio_ci.run.environment import worker_environment
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests.kit import RIO, Patch, cli_env, run_cli

CANARIES = {"ANTHROPIC_API_KEY": "canary-anthropic-5f1e", "GITHUB_TOKEN": "canary-github-9c2d"}


def rio(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    done = run_cli(*args, input=stdin, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_cell_cannot_read_secrets_from_the_owners_proc_environ(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    rio("new", db, "--goal", "try to read the Owner's environment", "--cwd", str(tmp_path))
    turn = json.loads(rio("turn", db))
    script = (
        "cat /proc/$PPID/environ | tr '\\0' '\\n'; echo ---; env; echo ---; "
        "cat /proc/$PPID/cmdline | tr '\\0' ' '"
    )
    patch = Patch(turn["state"]).add({"kind": "cmd", "argv": ["sh", "-c", script]}).build()
    rio("step", db, turn["turn_id"], "-", stdin=json.dumps(patch))
    out = rio("work", db, env=cli_env(**CANARIES))
    assert json.loads(out)["ran"] == [1]
    state = json.loads(rio("state", db))
    stdout = state["runtime"]["cells"]["1"]["stdout"]
    assert "PATH=" in stdout  # the Cell did read the Owner's initial environment
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    for secret in CANARIES.values():
        assert secret not in stdout + out
        assert all(secret.encode() not in p.read_bytes() for p in files)


def test_worker_environment_drops_credentials_and_values_that_embed_them() -> None:
    environ = {
        "PATH": "/bin",
        "GITHUB_TOKEN": "ghs_abcdef123",
        "NPM_TOKEN": "npm-secret-1",
        "REMOTE": "https://x-access-token:ghs_abcdef123@github.com/o/r",
        "RIO_CRASH_AT": "script_running",
        "HOME": "/root",
    }
    env = worker_environment(environ, keep=["NPM_TOKEN"])
    assert env == {"PATH": "/bin", "NPM_TOKEN": "npm-secret-1", "HOME": "/root"}


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="a Cell reads the non-dumpable Owner's /proc/<pid>/environ only as root",
)
def test_a_credential_left_in_a_re_executed_owners_environment_is_moved_out_too(
    tmp_path: Path,
) -> None:
    """An Owner started with the mark of a re-executed one and the credentials' descriptor,
    but still holding credentials in its environment (a credential-named variable and the
    Session's ``--secret``), re-executes once more without them: a Cell reading the Owner's
    initial environment finds the mark and none of them."""
    db = tmp_path / "s.db"
    session = Session.create(db, "goal", Settings(cwd=str(tmp_path), secrets=("DEPLOY_HOOK",)))
    turn = session.prepare_turn()
    listing = "tr '\\0' '\\n' < /proc/$PPID/environ | cut -d= -f1"
    session.step(
        turn["turn_id"],
        Patch(turn["state"]).add({"kind": "cmd", "argv": ["sh", "-c", listing]}).build(),
    )
    session.close()
    fd = os.memfd_create("test-secrets", 0)
    os.write(fd, json.dumps({"ANTHROPIC_API_KEY": CANARIES["ANTHROPIC_API_KEY"]}).encode())
    os.lseek(fd, 0, os.SEEK_SET)
    env = cli_env(
        RIO_SECRETS_FD=str(fd),
        RIO_SCRUBBED="1",
        GITHUB_TOKEN=CANARIES["GITHUB_TOKEN"],
        DEPLOY_HOOK="https://hooks.example.test/T0/B1/abcdef123456",
    )
    try:
        done = subprocess.run(
            [*RIO, "work", str(db)],
            capture_output=True,
            text=True,
            env=env,
            pass_fds=(fd,),
            timeout=120,
            check=False,
        )
    finally:
        os.close(fd)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ran"] == [1]
    names = set(json.loads(rio("state", str(db)))["runtime"]["cells"]["1"]["stdout"].split())
    assert "RIO_SCRUBBED" in names  # the re-executed Owner's initial environment, read
    assert not {"GITHUB_TOKEN", "DEPLOY_HOOK", "ANTHROPIC_API_KEY", "RIO_WORKER_TOKEN"} & names


@pytest.mark.parametrize("how", ["script", "module"])
def test_a_rio_ci_planted_in_the_working_directory_never_gets_the_credentials(
    tmp_path: Path, how: str
) -> None:
    """A Cell can write a ``rio_ci/`` package into the checkout the finish step runs in. The
    Owner that re-executes itself to carry its credentials in a memfd imports rio-ci's own,
    never that one (``python -P``), whether it was started as the ``rio-ci`` script or with
    ``python -P -m rio_ci``."""
    checkout, marker = tmp_path / "checkout", tmp_path / "the-planted-code-ran"
    (checkout / "rio_ci").mkdir(parents=True)
    plant = f"open({str(marker)!r}, 'a').write(repr(__import__('os').environ) + '\\n')\n"
    for name in ("__init__.py", "__main__.py", "cli.py"):
        (checkout / "rio_ci" / name).write_text(plant)
    db = tmp_path / "s.db"
    Session.create(db, "goal", Settings(cwd=str(tmp_path))).close()
    start = (
        [str(Path(sys.executable).with_name("rio-ci"))]
        if how == "script"
        else [sys.executable, "-P", "-m", "rio_ci"]
    )
    env = cli_env(GITHUB_TOKEN=CANARIES["GITHUB_TOKEN"])
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])  # this checkout's rio_ci
    done = subprocess.run(
        [*start, "work", str(db)],
        cwd=checkout,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["ended"] is None
    assert not marker.exists(), marker.read_text()
