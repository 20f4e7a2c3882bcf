"""Publishing a Session on its code host (any Forge): the progress comment, and — only once
the pull-request gate lets it (``rio_ci.run.gate``) — the pull request. The GitHub job's finish
step and ``rio-ci demo`` (on the local forge) publish through these same functions; what is
GitHub's alone (the run's link, the step summary, the branch push) stays with their callers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rio_ci.forge.base import Forge
from rio_ci.forge.issues import branch_for
from rio_ci.reports import progress
from rio_ci.reports.egress import refused_section
from rio_ci.reports.next_step import Waiting
from rio_ci.reports.pull_request import pull_request_body
from rio_ci.reports.timeline import read_timeline
from rio_ci.session.session import Session

# What a pull request's URL ends with on each forge (the local one writes a page).
_PULL_NUMBER = re.compile(r"/pull/([0-9]+)(?:\.html)?\Z")


def progress_body(
    session: Session,
    *,
    generation: int,
    outcome: str | None,
    run_url: str | None,
    note: str | None = None,
    pull_request: str | None = None,
    sweep: bool | None = None,
    ci: str | None = None,
    problem: tuple[str, str | None] | None = None,
) -> str:
    """The progress comment as it stands now, from committed facts (the caller writes it
    with ``Forge.upsert_comment(issue, progress.MARKER, body)``). ``outcome``, ``sweep`` and
    ``ci``: what comes next; ``problem``: the error that stopped the job and what to do
    (``rio_ci.reports.next_step.Waiting``)."""
    proj = session.refresh()
    return progress.render(
        proj,
        status=progress.status_of(proj, outcome),
        run_url=run_url,
        generation=generation,
        operation=f"{proj.session['id']}:{proj.last_seq}",
        note=note,
        pull_request=pull_request,
        timeline=read_timeline(session, proj.last_seq),
        waiting=Waiting(outcome, sweep, ci, *(problem or (None, None))),
    )


def open_pull_request(
    forge: Forge,
    session: Session,
    issue: int,
    base: str,
    *,
    diffstat: str | None,
    diff: str | None = None,
    not_on_branch: Sequence[str] = (),
) -> str:
    """Open the Session's pull request from its branch into ``base`` (or update the one it
    has), described from its timeline and ``not_on_branch`` (paths of the working tree the
    branch does not have, each with why); returns its URL, which the caller then commits with
    ``remember_pull_request`` (outside whatever handles the Forge's refusal: a pull request
    that was opened is never reported as not opened). A Forge that refuses raises
    ``RioError``. Call it only after ``rio_ci.run.gate.pull_request_gate`` let it."""
    found = forge.find_comment(issue, progress.MARKER)
    body = pull_request_body(
        issue,
        session.proj.session["id"],
        read_timeline(session),
        diffstat=diffstat,
        comment_url=found.url if found is not None else None,
        diff=diff,
        not_on_branch=not_on_branch,
        refused=refused_section(session.proj),
    )
    title = f"Fixes #{issue}: {forge.issue(issue).title}"[:250]
    return forge.open_pull_request(branch_for(issue), base, title, body)


def remember_pull_request(session: Session, url: str) -> None:
    """Commit the pull request's number (watermark ``pull_request``), so comments on it steer
    the Session and its follow-ups."""
    number = _PULL_NUMBER.search(url)
    if number:
        session.set_watermark("pull_request", int(number.group(1)))
