"""Versions and releases (docs/releasing.md): the version is written once and ``rio-ci
--version``, the package's metadata, the CHANGELOG and the README's pin agree with it; the
release script (``.ci/release.py``) checks a tag, extracts a version's notes and writes the
README's pin; a version bump needs no new lock."""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import rio_ci
from tests.kit import ROOT, run_cli

SCRIPT = ROOT / ".ci" / "release.py"
SEMVER = r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
UV = shutil.which("uv", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def release(*args: str, root: Path | None = None) -> subprocess.CompletedProcess[str]:
    where = ["--root", str(root)] if root is not None else []
    return subprocess.run(
        [sys.executable, str(SCRIPT), *where, *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def tree(tmp_path: Path, version: str, changelog: str, readme: str | None = None) -> Path:
    """A checkout with just what the release script reads."""
    (tmp_path / "rio_ci").mkdir(parents=True)
    (tmp_path / "rio_ci" / "__init__.py").write_text(f'"""doc"""\n\n__version__ = "{version}"\n')
    (tmp_path / "CHANGELOG.md").write_text(changelog)
    (tmp_path / "README.md").write_text(readme or (ROOT / "README.md").read_text())
    return tmp_path


CHANGELOG = """# Changelog

## Unreleased

### Next
- not yet

## 0.3.0 — 2027-01-02

### Releases and upgrades
- a line
  on two lines

## 0.2.0 — 2026-12-20

- older
"""


# --- one version ------------------------------------------------------------------------------


def test_the_version_is_written_once_and_every_reader_agrees() -> None:
    version = rio_ci.__version__
    assert re.fullmatch(SEMVER, version)
    done = run_cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"rio-ci {version}"
    assert importlib.metadata.version("rio-ci") == version  # the installed metadata
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "rio_ci.__version__"}
    assert release("version").stdout.strip() == version
    written = [
        str(path.relative_to(ROOT))
        for path in [*(ROOT / "rio_ci").rglob("*.py"), ROOT / "pyproject.toml", ROOT / "uv.lock"]
        if f'"{version}"' in path.read_text()
    ]
    assert written == ["rio_ci/__init__.py"]


def test_the_changelog_keeps_unreleased_on_top_and_its_newest_release_is_this_version() -> None:
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "Unreleased"
    released = [h for h in headings[1:] if re.fullmatch(SEMVER, h)]
    assert released and released[0] == rio_ci.__version__
    assert headings[1:] == released  # nothing but releases below Unreleased
    done = release("check", f"v{rio_ci.__version__}")
    assert done.returncode == 0, done.stderr


def test_the_readme_pins_a_commit_of_this_version_with_the_version_named() -> None:
    text = (ROOT / "README.md").read_text()
    (pin,) = re.findall(r"^\s*- uses: OWNER/rio-ci@(\S+) # v(\S+)$", text, re.M)
    sha, named = pin
    assert named == rio_ci.__version__
    assert sha == "COMMIT_SHA" or re.fullmatch(r"[0-9a-f]{40}", sha)
    if sha != "COMMIT_SHA":  # a pinned release: that commit says the same version
        shown = subprocess.run(
            ["git", "show", f"{sha}:rio_ci/__init__.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        if shown.returncode != 0:
            pytest.skip(f"{sha} is not in this clone (a shallow checkout)")
        assert f'__version__ = "{named}"' in shown.stdout


# --- the release script ---------------------------------------------------------------------


def test_a_release_tag_must_be_the_version_with_its_changelog_section(tmp_path: Path) -> None:
    good = tree(tmp_path / "good", "0.3.0", CHANGELOG)
    assert release("check", "v0.3.0", root=good).stdout.strip() == "0.3.0"
    cases = {
        "v0.3.1": (good, "the tag v0.3.1 is not v0.3.0"),
        "0.3.0": (good, "the tag 0.3.0 is not v0.3.0"),
    }
    ahead = tree(tmp_path / "ahead", "0.4.0", CHANGELOG)  # bumped without its section
    cases["v0.4.0"] = (ahead, "newest release section is 0.3.0, not 0.4.0")
    top = tree(tmp_path / "top", "0.3.0", CHANGELOG.replace("## Unreleased\n", ""))
    cases["v0.3.0"] = (top, "must start with a ## Unreleased section")
    for tag, (root, reason) in cases.items():
        done = release("check", tag, root=root)
        assert done.returncode == 1 and done.stdout == "", (tag, done)
        assert done.stderr == f"release: {reason}\n" or reason in done.stderr, (tag, done.stderr)
        assert len(done.stderr.splitlines()) == 1
    odd = tree(tmp_path / "odd", "1.0", "# Changelog\n\n## Unreleased\n\n## 1.0\n\n- x\n")
    assert "not a semantic version" in release("check", "v1.0", root=odd).stderr


def test_the_notes_are_that_versions_section_without_its_heading(tmp_path: Path) -> None:
    root = tree(tmp_path, "0.3.0", CHANGELOG)
    done = release("notes", "v0.3.0", root=root)
    assert done.stdout == "### Releases and upgrades\n- a line\n  on two lines\n"
    assert release("notes", "0.2.0", root=root).stdout == "- older\n"
    missing = release("notes", "v9.9.9", root=root)
    assert missing.returncode == 1 and "no ## 9.9.9 section" in missing.stderr


def test_this_versions_notes_are_what_the_release_would_publish() -> None:
    done = release("notes", f"v{rio_ci.__version__}")
    assert done.returncode == 0 and done.stdout.strip()
    assert not re.search(r"^## ", done.stdout, re.M)  # one section, no other release's


def test_pin_writes_the_commit_and_the_version_into_the_readmes_workflow(tmp_path: Path) -> None:
    root = tree(tmp_path, "0.3.0", CHANGELOG)
    sha = "0123456789abcdef0123456789abcdef01234567"
    done = release("pin", sha, root=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"- uses: OWNER/rio-ci@{sha} # v0.3.0"
    assert f"OWNER/rio-ci@{sha} # v0.3.0\n" in (root / "README.md").read_text()
    before = (root / "README.md").read_text()
    assert release("pin", "v0.3.0", root=root).returncode == 1  # not a commit
    assert (root / "README.md").read_text() == before


@pytest.mark.skipif(UV is None, reason="uv is not installed (rio-ci depends on it)")
def test_a_version_bump_keeps_the_lock_current(tmp_path: Path) -> None:
    """The lock records no version for rio-ci (it is dynamic), so a release changes one line
    and the action's ``uv sync --locked`` still installs it."""
    for name in ("pyproject.toml", "uv.lock", "README.md"):
        shutil.copyfile(ROOT / name, tmp_path / name)
    (tmp_path / "rio_ci").mkdir()
    (tmp_path / "rio_ci" / "__init__.py").write_text('__version__ = "98.76.54"\n')
    done = subprocess.run(
        [UV or "uv", "lock", "--check", "--offline", "--project", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
