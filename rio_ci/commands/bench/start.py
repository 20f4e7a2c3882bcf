"""The start of every job: ``rio-ci run`` from its start to its first request arriving at the
loopback provider, against a bare ``python -c "import anthropic"`` on the same interpreter,
timed from its start to the end of the import — the SDK import is the floor under any run
that talks to Claude. The run holds a credential, so it re-executes itself first, as every
job does (rio_ci.start).

Pairs are interleaved (run, import, run, import …); the figure is the median of each side
and their ratio. The scripted model concludes in its first patch, so each run ends at once.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rio_ci.commands.bench.provider import LoopbackProvider
from rio_ci.commands.bench.tokens import volatile_part
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings

__all__ = ["measure_start"]


def _conclude(body: dict[str, Any]) -> list[dict[str, Any]]:
    seen = volatile_part(body)
    cell = {
        "kind": "note",
        "role": "conclusion",
        "result": "success",
        "text": "Nothing to do.",
        "id": seen["runtime"]["next_cell_id"],
        "previous_id": None,
    }
    return [
        {"op": "test", "path": "/revision", "value": seen["revision"]},
        {"op": "add", "path": "/cells/-", "value": cell},
    ]


def _run_once(root: Path, number: int, provider: LoopbackProvider) -> float:
    db = root / f"start-{number}.sqlite3"
    Session.create(db, "bench: the start of a run", Settings(cwd=str(root))).close()
    env = {
        **os.environ,
        "ANTHROPIC_API_KEY": "bench-key",
        "ANTHROPIC_BASE_URL": provider.base_url,
    }
    seen = len(provider.arrivals)
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-I", "-m", "rio_ci", "run", str(db)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        if proc.wait(timeout=120) != 0:
            raise RuntimeError(f"bench: rio-ci run exited {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if len(provider.arrivals) <= seen:
        raise RuntimeError("bench: rio-ci run made no request")
    return provider.arrivals[seen] - started


def _import_once() -> float:
    """From the start of ``python -c "import anthropic"`` to the end of its import (a byte it
    writes then), not to its exit: the run is timed to its request, not to its exit either."""
    started = time.monotonic()
    code = "import anthropic, sys; sys.stdout.write('.'); sys.stdout.flush()"
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        if proc.stdout.read(1) != b".":
            raise RuntimeError("bench: python -c 'import anthropic' failed")
        elapsed = time.monotonic() - started
    return elapsed


def measure_start(root: Path, quick: bool) -> dict[str, Any]:
    (where := root / "start").mkdir()
    runs: list[float] = []
    imports: list[float] = []
    _import_once()  # warm the file cache for both sides
    with LoopbackProvider(_conclude) as provider:
        for number in range(3 if quick else 9):
            runs.append(_run_once(where, number, provider))
            imports.append(_import_once())
    run, bare = statistics.median(runs), statistics.median(imports)
    return {
        "start_to_first_request_seconds": round(run, 3),
        "import_anthropic_seconds": round(bare, 3),
        "ratio_start_vs_import_anthropic": round(run / bare, 3),
        "start_samples": len(runs),
    }
