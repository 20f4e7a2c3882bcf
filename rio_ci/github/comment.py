"""The progress comment on GitHub: written from committed facts (``rio_ci.reports.publish``)
with the job's run link, copied into the step summary at the end, and paced between rounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rio_ci.core.errors import RioError
from rio_ci.forge.base import Forge
from rio_ci.github.contract import ActionInputs, log, log_error
from rio_ci.reports import progress
from rio_ci.reports.publish import progress_body
from rio_ci.session.session import Session


def publish_progress(
    env: ActionInputs,
    forge: Forge,
    session: Session,
    issue: int,
    generation: int,
    outcome: str | None,
    *,
    note: str | None = None,
    pull_request: str | None = None,
    final: bool = False,
    sweep: bool | None = None,
    ci: str | None = None,
    problem: tuple[str, str | None] | None = None,
) -> bool:
    """Rewrite the progress comment from committed facts; whether it was written. A failed
    write is logged, never fatal: the work and the Session matter more than the report.
    ``final``: the step summary gets the same text, whether or not the comment was written."""
    body = progress_body(
        session,
        generation=generation,
        outcome=outcome,
        run_url=env.run_url,
        note=note,
        pull_request=pull_request,
        sweep=sweep,
        ci=ci,
        problem=problem,
    )
    written = True
    try:
        forge.upsert_comment(issue, progress.MARKER, body)
    except RioError as exc:
        log(
            f"::warning::rio-ci: the progress comment was not written: {exc}; the next job "
            "for the issue writes it"
        )
        written = False
    if final and env.summary is not None:
        with env.summary.open("a") as stream:
            stream.write(body.replace(progress.MARKER, "") + "\n")
    return written


def publish_problem(
    env: ActionInputs, forge: Forge, issue: int, problem: str, todo: str, exit_code: int = 1
) -> dict[str, Any]:
    """An error that stops the job before a Session is open (a bad configuration): an
    ``::error::`` annotation, the step summary and the issue's progress comment, each with
    what to do; the job's result (``exit_code``: the step's). The comment replaced keeps its wake-up
    (``progress.render_problem``)."""
    log_error(f"{problem}. {todo}")
    body = ""
    try:
        found = forge.find_comment(issue, progress.MARKER)
        body = progress.render_problem(
            problem,
            run_url=env.run_url,
            operation=f"problem:{issue}:{env.run_id}",
            what_to_do=todo,
            kept=progress.read_meta(found.body) if found is not None else None,
        )
        forge.upsert_comment(issue, progress.MARKER, body)
    except RioError as exc:
        log(f"::warning::rio-ci: the problem was not written on the issue: {exc}")
    if env.summary is not None:
        with env.summary.open("a") as stream:
            stream.write((body or problem).replace(progress.MARKER, "") + "\n")
    return {"status": "error", "reason": problem, "issue": issue, "exit_code": exit_code}


class Pacer:
    """Rewrites the progress comment between rounds, at most once every ``every`` seconds
    (GitHub limits how fast content may be written, and a comment edited on every round of a
    fast model would spend that for nothing); ``clock`` is injectable so tests need no sleep.
    The final state is written by the finish step whatever the pace (``publish_progress``
    with ``final=True``)."""

    def __init__(
        self,
        publish: Callable[[], object],
        *,
        every: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.publish = publish
        self.every = every
        self.clock = clock
        self.last = clock()  # made right after the job's first write

    def __call__(self) -> bool:
        """Publish if the last write is at least ``every`` seconds old; whether it did."""
        now = self.clock()
        if now - self.last < self.every:
            return False
        self.last = now
        self.publish()
        return True
