"""``rio-ci work`` and ``rio-ci run``: become the Owner, recover, and (run) drive model rounds.

Both print one JSON line on stdout at the end; ``run`` tells each round on stderr as it
happens (the live log). SIGINT/SIGTERM stop the running Worker group, commit what is known and
end within seconds.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from rio_ci.core.errors import RioError
from rio_ci.model.providers import parse_price, priced_models
from rio_ci.reports.live import LiveLog
from rio_ci.rounds.loop import RoundLoop
from rio_ci.run.confinement.settings import ConfinementSettings
from rio_ci.run.owner import Owner, handle_signals
from rio_ci.session.session import Session


def work_command(
    db: str,
    *,
    timeout: float | None,
    confinement: ConfinementSettings,
    emit: Callable[[Any], None],
) -> int:
    owner = Owner(db, confinement=confinement)
    restore = handle_signals(owner.interrupted)
    try:
        status = owner.work(timeout)
    finally:
        restore()
        with contextlib.suppress(RioError):
            owner.close()
    if owner.interrupted.is_set():
        status["interrupted"] = True
    emit(status)
    ended = status["ended"]
    return 1 if owner.interrupted.is_set() or (ended and ended["result"] == "failure") else 0


def run_command(
    db: str,
    spec: str,
    *,
    deadline: float | None,
    price: str | None,
    effort: str,
    confinement: ConfinementSettings,
    emit: Callable[[Any], None],
    fallback: str | None = None,
) -> int:
    given = parse_price(price) if price is not None else None
    session = Session.open(db)
    try:
        stored = dict(session.proj.prices)
    finally:
        session.close()
    model, other = priced_models(spec, fallback, effort=effort, price=given, stored=stored)
    owner = Owner(db, confinement=confinement)
    restore = handle_signals(owner.interrupted)
    live = LiveLog(owner.session, sys.stderr)
    limit = None if deadline is None else time.monotonic() + deadline
    try:
        if given is not None:
            owner.session.set_price(model.name, asdict(given))
        label = f"rio-ci run, pid {os.getpid()}, {time.strftime('%H:%M:%S', time.gmtime())} UTC"
        outcome = RoundLoop(owner, model, live=live, fallback=other, job_label=label).run(limit)
        if owner.running is not None:
            owner.stop_running(
                "owner_interrupted" if outcome.status == "interrupted" else "owner_deadline"
            )
        live.close()
    finally:
        restore()
        with contextlib.suppress(RioError):
            owner.close()
    result = outcome.to_dict()
    if os.environ.get("RIO_RUN_VERBOSE"):  # tests and debugging: which Cells this run ran
        result["ran"] = owner.ran
    emit(result)
    return 1 if outcome.status in ("failed", "interrupted") else 0
