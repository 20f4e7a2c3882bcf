"""The progress comment: one per Session, edited in place, built from committed facts only.

Its first line is a marker that finds the comment again; a second hidden line carries the
small metadata the scheduled sweep reads (status, next wake, generation) so the sweep never
downloads a journal that has nothing due.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from rio_ci.core.entities import Cell, ShortCell
from rio_ci.core.projection import Projection
from rio_ci.core.text import clip
from rio_ci.core.timeline import CONCLUSION, Run, Timeline
from rio_ci.forge.issues import branch_for, issue_of_goal
from rio_ci.reports import diagram, egress
from rio_ci.reports import markdown as md
from rio_ci.reports.live import describe, what_it_runs
from rio_ci.reports.next_step import Waiting, next_line, problem_line
from rio_ci.reports.timeline import descriptions, result_text, took

MARKER = "<!-- rio-ci:progress -->"
# The watermark an ended Session gets once its last progress comment (and, on success, its
# pull request, or the reason there is none) reached the code host; until then every job that
# restores it publishes it again (an outage during finish must not leave it unpublished).
PUBLISHED = "published"
CELL_ROWS = 50  # Executions listed: GitHub refuses a comment body over its size limit
UNKNOWN_ROWS = 20  # resolved UnknownExecutions listed (every unresolved one is)
HEARD_ROWS = 20  # comments and reviews received listed (the latest)
LAST_LINES = 5  # an interrupted Cell's last output lines shown
_META = re.compile(r"<!-- rio-ci:meta (\{.*?\}) -->")


def status_of(proj: Projection, outcome: str | None) -> str:
    """The comment's status word: what the Session is doing, after the job that writes it.
    A job that stopped (its time budget, a cut-off) says so even when the queue was paused:
    nothing runs until someone comments."""
    if proj.ended:
        return "succeeded" if proj.ended["result"] == "success" else "failed"
    if outcome == "waiting" and proj.timers:
        wake = min(t["deadline"] for t in proj.timers.values())
        return "waiting until " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(wake))
    if outcome == "waiting":
        return "waiting for a comment or a check"
    if outcome == "deadline":
        return "stopped (the job's time budget ran out)"
    if outcome == "interrupted":
        return "stopped (the job was cut off)"
    if outcome == "error":
        return "error"
    if proj.pause:
        return "paused"
    return "running"


def render(
    proj: Projection,
    *,
    status: str,
    run_url: str | None,
    generation: int,
    operation: str,
    note: str | None = None,
    pull_request: str | None = None,
    timeline: Timeline | None = None,
    waiting: Waiting | None = None,
) -> str:
    """The comment: a maintainer's dashboard of the Session, from committed facts only.
    ``timeline`` (``rio_ci.reports.timeline.read_timeline``) gives every Execution, round and
    job; without it only what the Projection holds is shown. ``waiting``: what the job that
    writes it knows of what comes next (``rio_ci.reports.next_step``). It reads top down as a
    maintainer asks: who acts next, what the model is doing, then the detail."""
    meta = {
        "status": status,
        "generation": generation,
        "operation": operation,
        "next_wake": min((t["deadline"] for t in proj.timers.values()), default=None),
        "ended": bool(proj.ended),
    }
    timeline = timeline or Timeline()
    issue = issue_of_goal(proj.session["goal"])
    lines = [
        MARKER,
        f"<!-- rio-ci:meta {json.dumps(meta, sort_keys=True, allow_nan=False)} -->",
        _heading(status, issue),
        "",
        next_line(
            proj,
            timeline,
            waiting or Waiting(),
            pull_request=pull_request,
            branch=branch_for(issue[0]) if issue else None,
        ),
        "",
    ]
    lines += _now(proj)
    lines += [_where(proj, timeline), ""]
    if note:
        lines += [f"> {md.one_line(note)}", ""]
    if pull_request:
        lines += [f"**Pull request:** {md.link(pull_request)}", ""]
    lines += _conclusion(proj, timeline)
    # The goal quotes the issue (untrusted): collapsed, clipped, escaped, with no mentions.
    lines += _details("goal", md.quoted(proj.session["goal"]))
    lines += _cells(proj, timeline)
    lines += _uncertainty(proj, timeline)
    lines += _heard(timeline)
    lines += _validators(timeline)
    lines += egress.refused_section(proj)
    if timeline.runs or timeline.rounds:
        lines += ["", "#### Timeline", "", diagram.block(timeline, descriptions(timeline))]
    recent = _recent_output(proj)
    if recent:
        lines += ["", *_details("recent output", md.fence("text", recent))]
    if proj.rationale:
        lines += ["", *_details("the model's last rationale", md.quoted(proj.rationale))]
    lines += ["", _usage(proj)]
    if run_url:
        lines.append(f"[This run]({run_url})")
    return "\n".join(lines) + "\n"


def _heading(status: str, issue: tuple[int, str] | None) -> str:
    """``### rio-ci: <status> · #34 <the issue's title>`` (the title is untrusted text)."""
    if issue is None:
        return f"### rio-ci: {status}"
    return f"### rio-ci: {status} · #{issue[0]} {md.plain(issue[1], 120)}"


def _now(proj: Projection) -> list[str]:
    """The model's newest plain note (no role): what it says it is doing now."""
    notes = [c for c in proj.cells if c["kind"] == "note" and not c.get("role")]
    if not notes:
        return []
    return [
        f"**The model's latest note** (cell {notes[-1]['id']}):",
        "",
        md.quoted(clip(notes[-1]["text"], 600)),
        "",
    ]


def _details(summary: str, body: str) -> list[str]:
    """A collapsed section (``<details>``) that shows ``summary`` until opened."""
    return [f"<details><summary>{summary}</summary>", "", body, "", "</details>", ""]


def _where(proj: Projection, timeline: Timeline) -> str:
    """Jobs and rounds so far, and what the Session waits for next."""
    rounds = proj.usage.get("rounds", 0)
    text = f"Job {max(timeline.job, 1)} · {rounds} model round{'s' if rounds != 1 else ''}"
    if proj.ended:
        return text + f" · ended: {md.one_line(proj.ended['reason'])}"
    wake = proj.next_wake()
    if wake is not None:
        text += " · next wake " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(wake))
    if proj.pause:
        text += (
            f" · the queue waits for the model's next patch (paused by {md.one_line(proj.pause)})"
        )
    return text


def _conclusion(proj: Projection, timeline: Timeline) -> list[str]:
    conclusion = timeline.conclusion
    if conclusion is None:
        return []
    lines = [f"**Conclusion ({md.one_line(str(conclusion['result']))}):**", ""]
    if conclusion["text"]:
        lines += [md.quoted(conclusion["text"]), ""]
    return lines


def _cells(proj: Projection, timeline: Timeline) -> list[str]:
    """One row per Execution (every one the Journal holds, replaced and removed ones too);
    without a Timeline, the Projection's."""
    rows = ["#### Cells", "", "| cell | what | result | duration | job · round |"]
    rows.append("| --- | --- | --- | --- | --- |")
    runs = list(timeline.runs.values())
    for run in runs[-CELL_ROWS:]:
        result = result_text(run.result)
        if run.result is None:
            result = "running" if run.started_at else "queued"
        if run.resolution is not None:
            result += f", resolved by note {run.resolution.note_id}"
        if run.replaced_by is not None:
            result += f", replaced by cell {run.replaced_by}"
        elif run.removed:
            result += ", removed"
        rows.append(
            f"| {run.cell_id} | {_what(run.cell)} | {md.cell_text(result)} | "
            f"{took(run).removeprefix('took ')} | {run.job} · {run.round} |"
        )
    if not timeline.runs:
        for key, ex in proj.executions.items():
            cell = ex["cell"]
            rows.append(
                f"| {key} | {cell['kind']}{_role(cell)} | "
                f"{md.cell_text(result_text(ex['result']))} | — | — |"
            )
    if len(runs) > CELL_ROWS:
        rows += ["", f"_The last {CELL_ROWS} of {len(runs)} Executions; `rio-ci show` lists all._"]
    return rows if len(rows) > 2 else []


def _what(cell: Cell | ShortCell) -> str:
    """A Cell in a table: its description in words and what it runs in code, or only the
    latter when it has no description."""
    if cell.get("kind") in ("cmd", "code") and cell.get("description"):
        return f"{md.plain(str(cell['description']), 100)} {md.code(clip(what_it_runs(cell), 60))}"
    return md.code(describe(cell)) if cell.get("kind") in ("cmd", "code", "note") else "?"


def _uncertainty(proj: Projection, timeline: Timeline) -> list[str]:
    """Every UnknownExecution, kept whatever became of its Cell, with how it was resolved."""
    unknown = timeline.unknown()
    if not unknown:
        return []
    lines = ["", "#### UnknownExecutions", ""]
    # Every unresolved one, and the latest resolved ones (the comment has a size limit).
    shown = [r for r in unknown if r.resolution is None or r in unknown[-UNKNOWN_ROWS:]]
    if len(shown) < len(unknown):
        lines += [f"_{len(unknown) - len(shown)} earlier resolved ones are left out._", ""]
    for run in shown:
        reason = md.one_line(str((run.result or {}).get("reason") or ""))
        found = f"recorded by job {run.finished_job}" if run.finished_job else ""
        lines.append(
            f"- **cell {run.cell_id}** ({_what(run.cell)}): UnknownExecution "
            f"({reason}), started in job {run.job}, {found}."
        )
        lines += _last_lines(proj, run)
        res = run.resolution
        if res is None:
            lines.append("  **Unresolved**: the model must investigate before it may conclude.")
            continue
        cited = ", ".join(md.code(ref) for ref in res.evidence_refs) or "nothing"
        lines.append(f"  Resolved by note {res.note_id} in round {res.round}, citing {cited}:")
        if res.text:
            lines.append("  " + md.quoted(clip(res.text, 400)).replace("\n", "\n  "))
    return lines


def _last_lines(proj: Projection, run: Run) -> list[str]:
    """An interrupted Cell's last output lines, as far as the Projection still holds them
    (indented under its list item)."""
    ex = proj.executions.get(str(run.cell_id))
    text = (ex["stdout"] + ex["stderr"]).strip() if ex else ""
    if not text:
        return []
    last = "\n".join(text.split("\n")[-LAST_LINES:])[-600:]
    fenced = md.fence("text", last).replace("\n", "\n  ")
    return ["  Its last output lines before the cut-off:", "", "  " + fenced, ""]


def _heard(timeline: Timeline) -> list[str]:
    """The comments and reviews people wrote to the Session, and the round that read each."""
    heard = list(timeline.heard.values())[-HEARD_ROWS:]
    if not heard:
        return []
    lines = ["", "#### Comments received", "", "| from | what | read in |", "| --- | --- | --- |"]
    for h in heard:
        what = md.link(h.url, h.kind.replace("_", " ")) if h.url else md.cell_text(h.kind)
        read = f"round {h.round} (job {h.job})" if h.round is not None else "not read yet"
        lines.append(f"| {md.code(h.author or '?')} | {what} | {read} |")
    return lines


def _validators(timeline: Timeline) -> list[str]:
    """One row per validator, one column per place it ran: each success conclusion it was
    run for (the latest three) and the pull-request gate."""
    if not timeline.validations:
        return []
    places: list[tuple[str, int]] = []
    results: dict[tuple[str, int, str], str] = {}
    for v in timeline.validations:
        place = (v.where, v.note_id)
        if place not in places:
            places.append(place)
        results[(*place, " ".join(v.argv))] = result_text(v.result)
    places = places[-3:]
    argvs = list(dict.fromkeys(" ".join(v.argv) for v in timeline.validations))
    head = [
        f"at the conclusion (note {note})" if where == CONCLUSION else where
        for where, note in places
    ]
    lines = ["", "#### Validators", "", f"| validator | {' | '.join(head)} |"]
    lines.append("| --- |" + " --- |" * len(places))
    for argv in argvs:
        cells = [md.cell_text(results.get((*place, argv), "—")) for place in places]
        lines.append(f"| {md.code(argv)} | {' | '.join(cells)} |")
    return lines


def _usage(proj: Projection) -> str:
    usage, limits = proj.usage, proj.limits
    cost = md.dollars(usage.get("cost_usd", 0.0))
    if usage.get("unknown_cost_attempts"):
        cost += f" (+{usage['unknown_cost_attempts']} attempts of unknown cost)"
    tokens = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    return (
        f"Usage: {md.number(usage.get('rounds', 0))} of {md.number(limits.rounds)} rounds · "
        f"{md.number(tokens)} of {md.number(limits.tokens)} tokens "
        f"({md.number(usage.get('input_tokens', 0))} in / "
        f"{md.number(usage.get('output_tokens', 0))} out) · "
        f"{cost} of {md.dollars(limits.cost_usd)}"
    )


def render_problem(
    problem: str,
    *,
    run_url: str | None,
    operation: str | None = None,
    what_to_do: str | None = None,
    kept: dict[str, Any] | None = None,
) -> str:
    """The comment when no Session could be opened at all (every saved generation refused,
    or all gone), or when the job stopped before its first round (a bad configuration, a
    missing key, an unknown model): the problem and ``what_to_do`` under **Next**. Its
    metadata has no wake-up, so the sweep leaves the issue alone until someone acts;
    ``operation`` names the write, so a replay can tell it was made. ``kept``: the metadata
    of the comment this one replaces, whose generation and wake-up it keeps (a Session's
    Timer still fires once the problem is fixed)."""
    meta = {
        "status": "error",
        "generation": (kept or {}).get("generation"),
        "operation": operation,
        "next_wake": (kept or {}).get("next_wake"),
        "ended": bool((kept or {}).get("ended")),
    }
    lines = [
        MARKER,
        f"<!-- rio-ci:meta {json.dumps(meta, sort_keys=True, allow_nan=False)} -->",
        "### rio-ci: error",
        "",
        problem_line(problem, what_to_do),
        "",
    ]
    if run_url:
        lines.append(f"[This run]({run_url})")
    return "\n".join(lines) + "\n"


def read_meta(body: str) -> dict[str, Any] | None:
    match = _META.search(body or "")
    if not match:
        return None
    try:
        meta = json.loads(match.group(1))
    except (ValueError, RecursionError):  # damaged, or nested past the parser's depth
        return None
    return meta if isinstance(meta, dict) else None


def _role(cell: Cell) -> str:
    return f" ({cell['role']})" if cell.get("role") else ""


def _recent_output(proj: Projection) -> str:
    finished = [e for e in proj.executions.values() if e["stdout"] or e["stderr"]]
    if not finished:
        return ""
    last = max(finished, key=lambda e: e["cell_id"])
    # Cell output is untrusted: cut first, then fenced by md.fence, which escapes control
    # characters and breaks every run of backticks, so no cut can leave a line that closes
    # the fence (a cut inside an already escaped run once could).
    text = (last["stdout"] + last["stderr"]).strip()
    return "\n".join(text.split("\n")[-15:])[-1500:]
