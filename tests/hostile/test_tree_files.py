"""Files the harness reads from the working tree (docs/tools.md, "Files the harness reads"):
AGENTS.md and its siblings, and the GitHub config, are read only as regular files inside the
checkout and only up to their limit. A link out of the tree, ``/dev/zero`` or a FIFO is
skipped with a warning, and the run goes on (and still stops on SIGTERM)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from rio_ci.core.errors import UsageError
from rio_ci.github.contract import CONFIG_MAX_BYTES, Config
from rio_ci.rounds.guidance import GUIDANCE_BYTES, read_guidance
from rio_ci.untrusted.treefile import read_tree_file
from tests.kit import spawn_cli
from tests.run_cli import interrupt, new_session, status, write_script


def plant(tree: Path, kind: str, name: str = "AGENTS.md") -> Path:
    """``tree/name`` made hostile: a link to /dev/zero, a device node of its own (needs
    root), a FIFO, or a link to a secret file outside the tree."""
    path = tree / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero's numbers
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        secret = tree.parent / f"outside-{tree.name}.txt"
        secret.write_text("OUTSIDE-SECRET")
        path.symlink_to(secret)
    return path


KINDS = ["dev-zero", "device", "fifo", "outside"]
REASONS = {
    "dev-zero": "leads out of the checkout",
    "device": "is a character device",
    "fifo": "is a FIFO",
    "outside": "leads out",
}


@pytest.mark.parametrize("kind", KINDS)
def test_hostile_guidance_is_skipped_with_a_warning(tmp_path: Path, kind: str) -> None:
    tree = tmp_path / "tree"
    plant(tree, kind)
    (tree / "CLAUDE.md").write_text("the real guidance")
    warnings: list[str] = []

    shown = read_guidance(tree, warnings.append)

    assert shown == "CLAUDE.md:\nthe real guidance"  # the next one still counts
    (warning,) = warnings
    assert "AGENTS.md" in warning and REASONS[kind] in warning


def test_a_link_inside_the_tree_is_followed_and_a_big_file_read_only_to_its_limit(
    tmp_path: Path,
) -> None:
    (tmp_path / "docs").mkdir()
    big = tmp_path / "docs" / "agents.md"
    big.write_bytes(b"x" * (GUIDANCE_BYTES * 50))
    (tmp_path / "AGENTS.md").symlink_to("docs/agents.md")

    found = read_tree_file(tmp_path, "AGENTS.md", GUIDANCE_BYTES)

    assert found.skipped is None and found.size == big.stat().st_size
    assert found.data is not None and len(found.data) == GUIDANCE_BYTES + 1
    assert read_guidance(tmp_path) is not None


@pytest.mark.parametrize("kind", KINDS)
def test_a_hostile_config_is_skipped_and_the_defaults_apply(tmp_path: Path, kind: str) -> None:
    plant(tmp_path, kind, ".github/rio.yml")
    config = Config.load(tmp_path, ".github/rio.yml")
    assert config.validators == [] and config.skipped is not None
    assert REASONS[kind] in config.skipped


def test_a_config_over_its_limit_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "rio.yml").write_text("# " + "x" * CONFIG_MAX_BYTES + "\nvalidators: []\n")
    with pytest.raises(UsageError, match=f"over {CONFIG_MAX_BYTES} bytes"):
        Config.load(tmp_path, "rio.yml")


def test_a_run_with_a_fifo_for_agents_md_goes_on_and_stops_on_sigterm(tmp_path: Path) -> None:
    plant(tmp_path, "fifo")
    started = tmp_path / "cell-started"
    cell = {
        "kind": "cmd",
        "argv": [
            sys.executable,
            "-c",
            f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(120)",
        ],
    }
    script = write_script(tmp_path, [[{"op": "add", "path": "/cells/-", "value": cell}]])
    db = new_session(tmp_path)

    proc = spawn_cli("run", str(db), "--model", f"scripted:{script}")
    out, err, seconds = interrupt(proc, started.exists, "the Cell to start past the FIFO")

    assert seconds < 5, err
    assert "AGENTS.md is a FIFO" in err
    # it went on past the FIFO and was then stopped by the signal, as a run is
    assert status(out)["status"] == "interrupted" and proc.returncode == 1, out
