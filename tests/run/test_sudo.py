"""Becoming root through whichever sudo the runner has (docs/design.md, "Becoming root";
rio_ci/run/confinement/sudo.py): the Owner's environment crosses sudo as data on standard input, and
the re-executed Owner takes it over first thing or ends at once with one line.

Here the crossing is played without sudo: a process puts the hand-over on its standard input
as ``become_root`` does, and starts the re-executed command with an environment reset the way
sudo-rs resets it. tests/run/test_runners.py does the same through real sudo and the sudo-rs
stand-in, as a runner user of each profile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rio_ci.run.confinement.sudo import MARK, SudoFound, identify, on_standard_input
from tests.hostile.support import one_error
from tests.kit import ROOT
from tests.runners import REAL_SUDO, STAND_IN

RS = SudoFound("/usr/bin/sudo", "sudo-rs", "0.2.13-0ubuntu1")
# What sudo-rs gives the command whatever it is asked (docs/man/sudoers.5.md): the target's
# HOME, SHELL, LOGNAME and USER, the SUDO_* of the invoking user, secure_path as PATH.
RESET = {
    "HOME": "/root",
    "SHELL": "/bin/bash",
    "LOGNAME": "root",
    "USER": "root",
    "SUDO_USER": "runner",
    "SUDO_UID": "1001",
    "SUDO_GID": "1001",
    "SUDO_HOME": "/home/runner",
    "SUDO_COMMAND": "/usr/bin/env",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "TERM": "unknown",
}
# A step's environment on a runner: the action's contract, credentials, the workflow's own.
STEP = {
    "HOME": "/home/runner",
    "USER": "runner",
    "LOGNAME": "runner",
    "PATH": "/opt/hostedtoolcache/Python/3.12/bin:/usr/bin:/bin",
    "PYTHONPATH": "/home/runner/work/demo/src",
    "RUNNER_TOOL_CACHE": "/opt/hostedtoolcache",
    "GITHUB_EVENT_NAME": "issues",
    "GITHUB_TOKEN": "ghs_the-job-token-value",
    "ANTHROPIC_API_KEY": "sk-ant-the-model-key",
    "MY_DEPLOY_SECRET": "a value with spaces, = and 'quotes'",
    "LATIN1": "caf\udce9",  # not UTF-8: sudo-rs drops such a --preserve-env value
    "LD_PRELOAD": "/home/runner/work/demo/evil.so",
    "BASH_FUNC_f%%": "() { echo planted; }",
}
ARRIVE = """
import json, os, sys
held = os.dup(0)
from rio_ci.run.confinement.sudo import arrive
arrive(sys.argv[1:])
print(json.dumps({
    "environ": {k: v for k, v in os.environ.items()},
    "stdin": os.read(0, 100).decode(),
    "left_in_hand_over": os.fstat(held).st_size,
}, ensure_ascii=False))
"""


def reexecute(given: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The re-executed command: ``given`` (a reset environment, plus the mark) and the
    interpreter's own PYTHONPATH, as become_root's command line sets it."""
    return subprocess.run(
        [sys.executable, "-c", ARRIVE],
        env={**given, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        errors="surrogateescape",
        timeout=60,
        check=False,
    )


def handed(env: dict[str, str], reset: dict[str, str]) -> subprocess.CompletedProcess[str]:
    with on_standard_input(env, RS) as mark:
        return reexecute({**reset, MARK: mark})


def test_the_arriving_owner_takes_over_the_environment_it_was_handed() -> None:
    done = handed(STEP, RESET)

    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)["environ"]
    for name in ("PATH", "RUNNER_TOOL_CACHE", "GITHUB_EVENT_NAME", "MY_DEPLOY_SECRET"):
        assert seen[name] == STEP[name], name
    assert seen["GITHUB_TOKEN"] == STEP["GITHUB_TOKEN"]
    assert seen["ANTHROPIC_API_KEY"] == STEP["ANTHROPIC_API_KEY"]
    assert seen["LATIN1"] == STEP["LATIN1"]  # byte for byte
    assert seen["HOME"] == "/home/runner"  # as sudo -E kept it on classic sudo
    assert MARK not in seen  # a later re-execution does not arrive again


def test_the_user_it_runs_as_stays_what_sudo_said_and_no_loaded_code_crosses() -> None:
    done = handed(STEP, RESET)

    seen = json.loads(done.stdout)["environ"]
    assert (seen["USER"], seen["LOGNAME"], seen["SUDO_USER"]) == ("root", "root", "runner")
    assert "LD_PRELOAD" not in seen and "BASH_FUNC_f%%" not in seen


def test_after_arriving_standard_input_is_empty_and_the_hand_over_emptied() -> None:
    done = handed(STEP, RESET)

    arrived = json.loads(done.stdout)
    assert arrived["stdin"] == ""  # /dev/null: nothing the Owner starts inherits it
    assert arrived["left_in_hand_over"] == 0  # sudo's own processes hold an empty file


def test_standard_input_is_what_it_was_when_the_exec_of_sudo_fails(tmp_path: Path) -> None:
    before = os.fstat(0)
    with pytest.raises(FileNotFoundError), on_standard_input(STEP, RS):
        os.execv(str(tmp_path / "no-such-sudo"), ["sudo"])
    after = os.fstat(0)
    assert (before.st_dev, before.st_ino) == (after.st_dev, after.st_ino)


@pytest.mark.parametrize(
    "stdin", [subprocess.DEVNULL, "other"], ids=["no-standard-input", "another-hand-over"]
)
def test_a_hand_over_that_did_not_arrive_ends_the_command_in_one_line(stdin: Any) -> None:
    """A sudo that gives the command another standard input (or none): the action ends at
    once, exit 2, one line naming that sudo and the contract's variables that are unset,
    also as an error annotation."""
    with on_standard_input({**STEP, "OTHER": "1"}, RS) as other_mark:
        mark = other_mark.replace(other_mark[:32], "0" * 32) if stdin == "other" else other_mark
        done = subprocess.run(
            [sys.executable, "-m", "rio_ci", "action"],
            env={**RESET, MARK: mark, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL if stdin != "other" else None,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    reason = one_error(done, 2)
    assert reason.startswith("rio-ci re-executed itself as root through sudo-rs 0.2.13-0ubuntu1")
    assert (
        "(GITHUB_EVENT_NAME, GITHUB_EVENT_PATH, GITHUB_REPOSITORY, GITHUB_TOKEN, "
        "GITHUB_WORKSPACE, RUNNER_TEMP are not set)" in reason
    )
    (annotation,) = [line for line in done.stderr.splitlines() if line.startswith("::error::")]
    assert annotation == f"::error::rio-ci: {reason}"


def test_sudo_is_told_apart_by_its_own_version_line(tmp_path: Path) -> None:
    config = tmp_path / "sudo-rs.json"
    config.write_text(json.dumps({"version": "0.2.13-0ubuntu1", "real_sudo": REAL_SUDO}))
    stand_in = tmp_path / "sudo"
    stand_in.write_text(f'#!/bin/sh\nexec {sys.executable} {STAND_IN} {config} "$@"\n')
    stand_in.chmod(0o755)
    other = tmp_path / "doas"
    other.write_text("#!/bin/sh\necho 'doas: usage'\n")
    other.chmod(0o755)

    assert identify(str(stand_in)) == SudoFound(str(stand_in), "sudo-rs", "0.2.13-0ubuntu1")
    assert identify(str(other)).kind == "unknown"
    if os.access(REAL_SUDO, os.X_OK):
        classic = identify(REAL_SUDO)
        first = subprocess.run([REAL_SUDO, "-V"], capture_output=True, text=True, check=True)
        assert classic.kind == "sudo"
        assert first.stdout.splitlines()[0] == f"Sudo version {classic.version}"
        assert classic.describe() == f"classic sudo {classic.version}"
