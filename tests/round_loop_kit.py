"""Shared tools for the round loop's tests: a ``FakeAnthropic`` that also notes when each request
came and what the Session had committed by then, ``rio-ci run`` against it as a real
subprocess, and complete patches written the way a real model must write them."""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from rio_ci.model.base import Price, Usage
from rio_ci.model.claude import table
from rio_ci.model.claude.client import AnthropicModel
from rio_ci.rounds.loop import Outcome, RoundLoop
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from tests.fakes.anthropic_api import FakeAnthropic, ReceivedRequest
from tests.kit import Patch, cli_env, events, run_cli

KEY = "sk-ant-harness-test-41c9"
MODEL = "claude-sonnet-5-5"  # the current default
UNPRICED = "rio-test-unpriced-model"  # the fake treats rio-test-* as the current family

ECHO = {"kind": "cmd", "argv": ["echo", "hi"]}
DONE = {"kind": "note", "role": "conclusion", "result": "success", "text": "done"}


def kinds(evs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in evs if e["kind"] == kind]


def usage(db: Path) -> dict[str, Any]:
    session = Session.open(db)
    try:
        return dict(session.proj.usage)
    finally:
        session.close()


def price_of(model: str = MODEL) -> Price:
    info = table.lookup(model)
    assert info is not None and info.price is not None
    return info.price


def cost(input_tokens: int, output_tokens: int, model: str = MODEL) -> float:
    """What the table says one reply of this size costs (no figure written by hand)."""
    return price_of(model).cost(Usage(input_tokens=input_tokens, output_tokens=output_tokens))


def patch(revision: int, cell_id: int, *values: dict[str, Any]) -> list[dict[str, Any]]:
    """A complete patch as a real model must write it: the revision test, then one add per
    value with ids from ``cell_id`` on."""
    return Patch.at(revision, cell_id).add(*values).build()


def timer_cell(deadline: float | str) -> dict[str, Any]:
    """A code Cell registering Timer ``ci-check``; ``deadline`` is a Unix time or a Python
    expression evaluated when the Cell runs (e.g. ``"time.time() + 1"``)."""
    source = (
        "# /// script\n# dependencies = []\n# ///\n"
        "import time\n\nfrom rio_ci.api import timer\n\n"
        f"timer('ci-check', {deadline if isinstance(deadline, str) else repr(deadline)}, "
        "{'why': 'look at CI again'})\n"
    )
    return {"kind": "code", "runtime": "python", "source": source}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status_file = Path(f"/proc/{pid}/status")
    return not (status_file.exists() and "zombie" in status_file.read_text())


def turn_text(request: ReceivedRequest) -> str:
    """The last block of the user message: the Turn header, delivered refs, feedback."""
    return str(request.body["messages"][-1]["content"][-1]["text"])


class WatchedFake(FakeAnthropic):
    """Records, for every request, its arrival time and how many ``model_attempt`` events
    the Session had committed by then (read through SQLite, as any process could)."""

    def __init__(self, db: Path) -> None:
        super().__init__()
        self.db = db
        self.arrivals: list[tuple[float, int]] = []

    def __enter__(self) -> WatchedFake:
        super().__enter__()
        return self

    def _take(self, request: ReceivedRequest) -> tuple[int, dict[str, str], Any, float]:
        self.arrivals.append((time.time(), self._committed_attempts()))
        return super()._take(request)

    def _committed_attempts(self) -> int:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            row = conn.execute("SELECT count(*) FROM events WHERE kind = 'model_attempt'")
            return int(row.fetchone()[0])
        finally:
            conn.close()

    def gaps(self) -> list[float]:
        """Seconds between consecutive requests."""
        times = [t for t, _ in self.arrivals]
        return [b - a for a, b in itertools.pairwise(times)]

    def env(self, **extra: str) -> dict[str, str]:
        return cli_env(ANTHROPIC_BASE_URL=self.base_url, ANTHROPIC_API_KEY=KEY, **extra)

    def run_here(self, model: str = MODEL) -> Outcome:
        """The round loop of ``rio-ci run DB --model anthropic:MODEL`` in this process (the
        SDK is imported once per test process, not once per run)."""
        owner = Owner(str(self.db))
        try:
            client = AnthropicModel(model, api_key=KEY, base_url=self.base_url)
            return RoundLoop(owner, client).run()
        finally:
            owner.close()

    def run(
        self,
        *args: str,
        model: str | None = MODEL,
        crash_at: str | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """``rio-ci run DB`` (with ``--model anthropic:MODEL`` unless ``model`` is None)."""
        argv = ["run", str(self.db), *args]
        if model is not None:
            argv += ["--model", f"anthropic:{model}"]
        extra = {"RIO_CRASH_AT": crash_at} if crash_at else {}
        return run_cli(*argv, env=self.env(**extra), timeout=timeout)

    def responses(self) -> list[dict[str, Any]]:
        return kinds(events(self.db), "model_response")
