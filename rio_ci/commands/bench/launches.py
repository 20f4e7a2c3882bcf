"""What every launch adds on GitHub, network aside: one launch record pushed to a git
remote (``rio_ci.github.record``), here a local bare repository."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from rio_ci.github.git import Git
from rio_ci.github.record import LaunchRecord
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings


def push_samples(root: Path, launches: int) -> list[float]:
    """Seconds per launch record: ``launches`` records pushed to a local bare repository,
    the Session growing between them by about what a round commits (an observation of
    ordinary size), so each push carries a longer tail than the last."""
    remote = root / "launch-remote.git"
    Git(remote).run("init", "--quiet", "--bare")
    session = Session.create(
        root / "launch.sqlite3", "measure launch records", Settings(cwd=str(root))
    )
    record = LaunchRecord(root / "launch-record.git", str(remote), None, 1, "bench")
    samples = []
    try:
        record.fetch()
        for number in range(1, launches + 1):
            session.receive(f"bench:{number}", "comment", {"body": "an observation " * 40})
            started = time.perf_counter()
            record.push(session, number)
            samples.append(time.perf_counter() - started)
    finally:
        session.close()
    return samples


def measure_launch_record(root: Path, quick: bool) -> dict[str, float]:
    """``launch_record_ms``: the median cost of one launch record pushed to a local bare
    repository (docs/github.md, "A lost runner never causes a rerun")."""
    samples = push_samples(root, 5 if quick else 25)
    return {"launch_record_ms": round(statistics.median(samples) * 1000, 3)}
