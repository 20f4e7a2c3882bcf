"""The pull request's description (docs/github.md): what changed, how it was verified, and
where the Session's progress comment is."""

from __future__ import annotations

from collections.abc import Sequence

from rio_ci.core.timeline import CONCLUSION, Timeline
from rio_ci.reports import markdown as md
from rio_ci.reports.live import describe
from rio_ci.reports.timeline import result_text

STEPS = 15  # the last Executions listed under "What the agent ran"


def pull_request_body(
    issue: int,
    session_id: str,
    timeline: Timeline,
    *,
    diffstat: str | None,
    comment_url: str | None,
    diff: str | None = None,
    not_on_branch: Sequence[str] = (),
    refused: Sequence[str] = (),
) -> str:
    """The pull request's description: what changed (the diffstat), what of the working tree
    the branch does not have (``not_on_branch``: left out by the checkpoint or refused by
    the code host, each with why), how it was verified (the validators and their results,
    the model's conclusion), the hosts Cells were refused (``refused``: the lines of
    ``rio_ci.reports.egress.refused_section``) and where the Session's progress comment is.
    Text the agent or a Cell wrote is fenced or quoted, as in the comment."""
    lines = [f"Fixes #{issue}", "", "### What changed", ""]
    if diffstat and diffstat.strip():
        lines += [md.fence("text", diffstat.strip())]
    else:
        lines.append("The diffstat is not available.")
    if not_on_branch:
        lines += [
            "",
            "Not on the branch (they stayed in the job's working tree):",
            "",
            md.fence("text", "\n".join(not_on_branch)),
        ]
    lines += ["", "### How it was verified", ""]
    lines += _verified(timeline)
    lines += _steps(timeline)
    if timeline.conclusion and timeline.conclusion["text"]:
        lines += ["", "The model's conclusion:", "", md.quoted(timeline.conclusion["text"])]
    unknown = timeline.unknown()
    if unknown:
        lines += [
            "",
            f"{len(unknown)} UnknownExecution(s) along the way, "
            f"{sum(1 for r in unknown if r.resolution)} resolved with evidence.",
        ]
    lines.append("")
    if refused:
        lines += [*refused]
    if comment_url:
        lines.append(f"The Session's progress: {md.link(comment_url)} (Session {session_id}).")
    else:
        lines.append(f"Opened by rio-ci (Session {session_id}).")
    if diff:
        lines += ["", md.fence("diff", diff.rstrip("\n"))]
    lines.append(f"<!-- rio-ci:op {session_id}:pull -->")
    return "\n".join(lines) + "\n"


def _verified(timeline: Timeline) -> list[str]:
    """Each validator once, with its result in each place it ran: at the latest success
    conclusion and at the pull-request gate."""
    if not timeline.validations:
        return ["- no validator is configured (`.github/rio.yml`)"]
    latest: dict[tuple[str, str], str] = {}
    for v in timeline.validations:
        where = "at the conclusion" if v.where == CONCLUSION else f"at the {v.where}"
        latest[(" ".join(v.argv), where)] = result_text(v.result)
    argvs = dict.fromkeys(argv for argv, _ in latest)
    return [
        f"- {md.code(argv)}: "
        + "; ".join(
            f"{md.cell_text(result)} {where}" for (a, where), result in latest.items() if a == argv
        )
        for argv in argvs
    ]


def _steps(timeline: Timeline) -> list[str]:
    """What the agent ran, by each Cell's description (or its command), latest last."""
    runs = [r for r in timeline.runs.values() if r.started_at is not None][-STEPS:]
    if not runs:
        return []
    lines = ["", "<details><summary>What the agent ran</summary>", ""]
    for run in runs:
        result = md.cell_text(result_text(run.result))
        lines.append(f"- cell {run.cell_id}: {md.plain(describe(run.cell), 120)} ({result})")
    return [*lines, "", "</details>"]
