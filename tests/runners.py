"""The runners rio-ci runs on, played as test fixtures, all in one place.

Each profile is a real runner user of the test's own: a non-root OS user with a random name
(``rio-rn-<hex>``, removed afterwards with every process it has), the ``sudo`` its runner has
(through a sudoers.d entry the test writes and removes), and the variables the runner's image
sets (``runners.json``, the facts rio-ci itself reads):

- ``ubuntu-24.04``: passwordless classic sudo (this machine's), the image's variables;
- ``ubuntu-26.04``: passwordless sudo-rs (``tests/sudo_rs.py``, a stand-in that implements
  sudo-rs's documented environment policy, first on the runner's PATH), the image's
  variables;
- ``self-hosted-sudo``: a self-hosted runner whose user has passwordless classic sudo, no
  image variables;
- ``self-hosted``: a self-hosted runner whose user may not sudo;
- ``lost-hand-over`` (not a runner anyone has: the case rio-ci must refuse in one line): the
  sudo-rs stand-in giving the command no standard input, so the environment rio-ci hands
  over on it never arrives.

``runner_user(PROFILES[name])`` makes one; the ``runner`` fixture (tests/conftest.py) takes
the profile's name as its parameter.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from rio_ci.github.runner import runners
from tests.hostile.support import everyone_python, unprivileged_env
from tests.kit import ROOT, cli_env

SYSTEM_PYTHON = "/usr/bin/python3"  # one every user can run (the venv's may sit in /root)
REAL_SUDO = "/usr/bin/sudo"
STAND_IN = ROOT / "tests" / "sudo_rs.py"
# A runner's PATH without this checkout's venv (its python links into /root).
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Profile:
    name: str
    image: str | None  # the ImageOS of a GitHub-hosted image (a key of runners.json)
    sudo: str | None  # "sudo" (classic), "sudo-rs" (the stand-in) or None: may not sudo
    stdin: str = "pass"  # the stand-in's: "null" gives the command no standard input

    @property
    def separates(self) -> bool:
        """Whether Cells get a user of their own here (the hand-over arrives)."""
        return self.sudo is not None and self.stdin == "pass"


PROFILES = {
    p.name: p
    for p in (
        Profile("ubuntu-24.04", "ubuntu24", "sudo"),
        Profile("ubuntu-26.04", "ubuntu26", "sudo-rs"),
        Profile("self-hosted-sudo", None, "sudo"),
        Profile("self-hosted", None, None),
        Profile("lost-hand-over", "ubuntu26", "sudo-rs", stdin="null"),
    )
}
RUNNERS = ("ubuntu-24.04", "ubuntu-26.04", "self-hosted-sudo", "self-hosted")  # real ones


@dataclass
class RunnerUser:
    """A runner's non-root user under one profile."""

    profile: Profile
    name: str
    uid: int
    gid: int
    home: Path
    bin: Path | None = None  # its sudo stand-in's folder, first on its PATH
    made: list[Path] = field(default_factory=list)

    def image_environment(self) -> dict[str, str]:
        """The variables the profile's image sets (none on a self-hosted runner)."""
        if self.profile.image is None:
            return {}
        data = runners()
        image = data["images"][self.profile.image]
        toolcache = data["environment"]["toolcache"]
        return {
            "ImageOS": self.profile.image,
            "ImageVersion": image["image_version"],
            "AGENT_TOOLSDIRECTORY": toolcache,
            "RUNNER_TOOL_CACHE": toolcache,
            "ACCEPT_EULA": "Y",
        }

    def environment(self, *, checkout: bool = True, **extra: str) -> dict[str, str]:
        """A step's environment on this runner: the user's own HOME, the image's variables,
        its PATH, and (``checkout``) this checkout's rio_ci importable by the system Python;
        without, nothing points at this checkout (a job that installs rio-ci itself)."""
        env = unprivileged_env() if checkout else cli_env(checkout=False)
        for name in [n for n in env if n.startswith("XDG_") or n in ("MAIL", "VIRTUAL_ENV")]:
            del env[name]
        path = os.pathsep.join(filter(None, [str(self.bin or ""), BASE_PATH]))
        env.update(HOME=str(self.home), USER=self.name, LOGNAME=self.name, PATH=path)
        env.update(self.image_environment())
        env.update(extra)
        return env

    def prefix(self) -> list[str]:
        """Run a command as this user (its own groups, no others)."""
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--init-groups"]

    def run(
        self, argv: Sequence[str], env: dict[str, str], cwd: Path, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.prefix(), *argv],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def rio(self, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
        """``python -m rio_ci ARGS`` as this user, with an interpreter that imports
        this checkout's rio_ci also when rio-ci re-executes it isolated (through sudo)."""
        return self.run([everyone_python(), "-m", "rio_ci", *args], env, cwd)

    def sudo_command_lines(self) -> list[list[str]]:
        """Every command line the sudo-rs stand-in was given (what sudo would log)."""
        assert self.bin is not None, "only the sudo-rs stand-in keeps them"
        text = (self.bin / "argv.log").read_text()
        return [json.loads(line) for line in text.splitlines()]

    def give(self, *paths: Path) -> None:
        """Make ``paths`` (recursively) this user's, as a runner's work folders are."""
        for top in paths:
            for folder, dirs, files in os.walk(top):
                for name in [".", *dirs, *files]:
                    os.lchown(os.path.join(folder, name), self.uid, self.gid)


def needs_root() -> None:
    tools = ("useradd", "userdel", "setpriv", "visudo")
    missing = [t for t in tools if shutil.which(t) is None]
    if os.geteuid() != 0 or missing or not os.access(REAL_SUDO, os.X_OK):
        pytest.skip(f"runner users need root, sudo and {', '.join(tools)} (as in CI)")
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip(f"{SYSTEM_PYTHON} is needed for a Python every user can run")


@contextlib.contextmanager
def runner_user(profile: Profile) -> Iterator[RunnerUser]:
    """A fresh runner user for ``profile``; everything it made is removed afterwards."""
    needs_root()
    name = f"rio-rn-{secrets.token_hex(4)}"
    subprocess.run(
        ["useradd", "--system", "--create-home", "--user-group", "--shell", "/bin/bash", name],
        check=True,
        capture_output=True,
    )
    entry = pwd.getpwnam(name)
    user = RunnerUser(profile, name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))
    try:
        if profile.sudo is not None:
            _grant_sudo(user)
        if profile.sudo == "sudo-rs":
            _install_stand_in(user)
        yield user
    finally:
        stop_user(user.uid)
        for path in reversed(user.made):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


def _grant_sudo(user: RunnerUser) -> None:
    """Passwordless sudo for anything, as GitHub's runner user has; the stand-in's second
    part also needs ``closefrom_override`` (it passes the environment on descriptor 3)."""
    rule = f"{user.name} ALL=(ALL) NOPASSWD:ALL\n"
    if user.profile.sudo == "sudo-rs":
        rule += f"Defaults:{user.name} closefrom_override\n"
    draft = Path(tempfile.mkdtemp(prefix="rio-sudoers-")) / user.name
    draft.write_text(rule)
    checked = subprocess.run(["visudo", "-cf", str(draft)], capture_output=True, check=False)
    assert checked.returncode == 0, checked
    target = Path("/etc/sudoers.d") / user.name
    draft.chmod(0o440)
    shutil.move(draft, target)
    shutil.rmtree(draft.parent, ignore_errors=True)
    user.made.append(target)


def _install_stand_in(user: RunnerUser) -> None:
    """``sudo`` in a root-owned folder first on the runner's PATH: the sudo-rs stand-in."""
    folder = Path(tempfile.mkdtemp(prefix="rio-sudo-rs-", dir="/tmp"))
    folder.chmod(0o755)
    user.made.append(folder)
    image = runners()["images"]["ubuntu26"]
    config: dict[str, Any] = {
        "version": image["sudo"]["version"],
        "real_sudo": REAL_SUDO,
        "secure_path": secure_path(),
        "stdin": user.profile.stdin,
        "argv_log": str(folder / "argv.log"),
    }
    (folder / "argv.log").touch(mode=0o600)
    os.chown(folder / "argv.log", user.uid, user.gid)
    (folder / "sudo-rs.json").write_text(json.dumps(config))
    sudo = folder / "sudo"
    sudo.write_text(
        f'#!/bin/sh\nexec {SYSTEM_PYTHON} -I {STAND_IN} {folder / "sudo-rs.json"} "$@"\n'
    )
    sudo.chmod(0o755)
    user.bin = folder


def secure_path() -> str | None:
    """This machine's ``Defaults secure_path``, which sudo-rs would read from /etc/sudoers."""
    from tests.sudo_rs import secure_path_of

    return secure_path_of(Path("/etc/sudoers").read_text())


def stop_user(uid: int) -> None:
    """Kill every process of ``uid`` (only the test that made the user runs any)."""
    for proc in psutil.process_iter(["uids"]):
        with contextlib.suppress(psutil.Error):
            if uid in proc.info["uids"]:
                proc.kill()


@contextlib.contextmanager
def fresh_cell_user() -> Iterator[str]:
    """A Cell user name of the test's own (rio-ci creates the user), removed afterwards."""
    name = f"rio-ct-{secrets.token_hex(4)}"
    try:
        yield name
    finally:
        with contextlib.suppress(KeyError):
            stop_user(pwd.getpwnam(name).pw_uid)
            subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)
