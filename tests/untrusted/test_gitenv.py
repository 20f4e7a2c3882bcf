"""Every git rio-ci runs takes nothing from places a runner image may leave writable by every
user (rio_ci/gitenv.py; docs/security.md, "rio-ci's own interpreter, sealed"): no template
directory for ``git init``, no translated message catalogue."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rio_ci.github.git import Git


def test_a_git_directory_of_the_harness_gets_nothing_from_a_template(tmp_path: Path) -> None:
    """The system's template (``/usr/share/git-core/templates`` on Debian and Ubuntu) gives a
    new git directory its sample hooks, ``info/exclude`` and ``description``; a hook or a
    ``config`` planted there would be copied into every repository ``git init`` makes."""
    Git(tmp_path / "made.git").run("init", "--quiet", "--bare")
    made = sorted(p.name for p in (tmp_path / "made.git").iterdir())
    assert "hooks" not in made and "info" not in made and "description" not in made, made


def test_git_speaks_the_c_locale_whatever_the_job_sets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LANGUAGE", "de")
    monkeypatch.setenv("LC_ALL", "de_DE.UTF-8")
    monkeypatch.setenv("LC_MESSAGES", "de_DE.UTF-8")
    env = Git(tmp_path / "x.git").environment(None, None)
    assert (env["LC_ALL"], env["LANGUAGE"]) == ("C", "")
    assert os.environ["LC_ALL"] == "de_DE.UTF-8"  # the process's own is untouched
