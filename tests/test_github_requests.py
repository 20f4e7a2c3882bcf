"""What a Session's jobs cost GitHub, counted as GitHub counts (docs/github.md "Requests,
rate limits and storage"): every REST request but a conditional one answered 304 and the
artifact's blob download.

The jobs are the bench's (``rio_ci/commands/bench/github_jobs.py``): the real run step,
finish step, upload and prune step, in this process, against the tests' strict fake. The
bench's own loopback GitHub is held to the same counts here, request for request."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fakes.github_api import FakeGitHub

from rio_ci.commands.bench.github_api import LoopbackGitHub
from rio_ci.commands.bench.github_jobs import Site
from rio_ci.commands.bench.rate_limit import Counted

pytestmark = pytest.mark.slow


def shape(counted: list[Counted], repo: str) -> list[str]:
    """The requests without what differs between two fakes: the repository's name and the
    ids they hand out."""
    return [
        re.sub(r"\b1\d{5}\b", "<id>", str(c).replace(f"/repos/{repo}", "/repos/<repo>"))
        for c in counted
    ]


def story(site: Site) -> list[list[Counted]]:
    """A label job, then three comments that wake the Session."""
    issue, label = site.label()
    return [label, *(site.comment(issue, f"also case {n}") for n in range(3))]


def test_the_bench_github_counts_a_sessions_jobs_as_the_tests_fake_does(tmp_path: Path) -> None:
    with FakeGitHub() as strict, LoopbackGitHub() as bench:
        expected = [shape(c, strict.repo) for c in story(Site(tmp_path / "strict", strict))]
        measured = [shape(c, bench.repo) for c in story(Site(tmp_path / "bench", bench))]
    assert measured == expected
