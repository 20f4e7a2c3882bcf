""".ci/run installs libfiu (and sudo, for the Cell-user tests) as root here and through ``sudo`` on
a GitHub-hosted runner (whose user is not root but has passwordless sudo). ``.ci/install-fiu``
runs for real under bash, with ``id``, ``sudo`` and ``apt-get`` replaced by recording stand-ins
on ``PATH``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".ci" / "install-fiu"


def stand_ins(bin_dir: Path, log: Path, uid: int, sudo: bool, fiu: bool) -> None:
    bin_dir.mkdir()
    programs = {
        "id": f'[ "$1" = -u ] && echo {uid}\n',
        "apt-get": f'echo "apt-get $* via=${{VIA_SUDO:-none}}" >> {log}\n',
    }
    if sudo:
        programs["sudo"] = (
            f'echo "sudo $*" >> {log}\n[ "$1" = -n ] && shift\nVIA_SUDO=1 exec "$@"\n'
        )
        programs["true"] = "exit 0\n"
    if fiu:
        programs["fiu-run"] = "exit 0\n"
    for name, body in programs.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/bash\n{body}")
        path.chmod(0o755)


def run(tmp_path: Path, uid: int, sudo: bool, fiu: bool = False) -> tuple[str, str]:
    log = tmp_path / "calls.log"
    stand_ins(tmp_path / "bin", log, uid, sudo, fiu)
    done = subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        env={"PATH": str(tmp_path / "bin")},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return (log.read_text() if log.exists() else ""), done.stderr


def test_ci_run_delegates_the_install_to_the_script() -> None:
    assert "bash .ci/install-fiu" in (ROOT / ".ci" / "run").read_text()


def test_as_root_apt_get_runs_directly(tmp_path: Path) -> None:
    calls, _ = run(tmp_path, uid=0, sudo=False)
    assert calls.splitlines() == [
        "apt-get update -qq via=none",
        "apt-get install -y -qq fiu-utils sudo via=none",
    ]


def test_as_a_user_with_sudo_apt_get_runs_through_sudo(tmp_path: Path) -> None:
    calls, _ = run(tmp_path, uid=1001, sudo=True)
    lines = calls.splitlines()
    assert "apt-get update -qq via=1" in lines
    assert "apt-get install -y -qq fiu-utils sudo via=1" in lines
    assert "sudo -n apt-get install -y -qq fiu-utils sudo" in lines
    assert not [line for line in lines if "via=none" in line]


def test_without_root_or_sudo_it_says_so_and_installs_nothing(tmp_path: Path) -> None:
    calls, stderr = run(tmp_path, uid=1001, sudo=False)
    assert calls == ""
    assert "no passwordless sudo" in stderr


@pytest.mark.parametrize("uid", [0, 1001])
def test_installed_fiu_run_and_sudo_are_left_alone(tmp_path: Path, uid: int) -> None:
    calls, _ = run(tmp_path, uid=uid, sudo=True, fiu=True)
    assert calls == ""
