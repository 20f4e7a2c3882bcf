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

from rio_ci.core.projection import Projection
from rio_ci.core.text import clip, escape_control
from rio_ci.errors import RioError
from rio_ci.github.env import ActionEnv, log
from rio_ci.github.forge.base import Forge
from rio_ci.session import Session

MARKER = "<!-- rio-ci:progress -->"
# The watermark an ended Session gets once its last progress comment (and, on success, its
# pull request, or the reason there is none) reached GitHub; until then every job that
# restores it publishes it again (an outage during finish must not leave it unpublished).
PUBLISHED = "published"
_META = re.compile(r"<!-- rio-ci:meta (\{.*?\}) -->")


def status_of(proj: Projection, outcome: str | None) -> str:
    if proj.ended:
        return "succeeded" if proj.ended["result"] == "success" else "failed"
    if proj.pause:
        return "paused"
    if outcome == "waiting" and proj.timers:
        wake = min(t["deadline"] for t in proj.timers.values())
        return "waiting until " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(wake))
    if outcome == "waiting":
        return "waiting for a comment or a check"
    if outcome == "deadline":
        return "waiting for the next job (this one's time budget ran out)"
    if outcome == "interrupted":
        return "waiting for the next job (this one was cut off)"
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
) -> str:
    meta = {
        "status": status,
        "generation": generation,
        "operation": operation,
        "next_wake": min((t["deadline"] for t in proj.timers.values()), default=None),
        "ended": bool(proj.ended),
    }
    usage = proj.usage
    cost = f"${usage.get('cost_usd', 0.0):.4f}"
    if usage.get("unknown_cost_attempts"):
        cost += f" (+{usage['unknown_cost_attempts']} attempts of unknown cost)"
    lines = [
        MARKER,
        f"<!-- rio-ci:meta {json.dumps(meta, sort_keys=True, allow_nan=False)} -->",
        f"### rio-ci: {status}",
        "",
    ]
    if note:
        lines += [f"> {_one_line(note)}", ""]
    # The goal quotes the issue (untrusted): folded, clipped, escaped, with no mentions.
    lines += [
        "<details><summary>goal</summary>",
        "",
        _quoted(proj.session["goal"]),
        "",
        "</details>",
        "",
    ]
    lines += ["| cell | kind | phase | result |", "| --- | --- | --- | --- |"]
    shown = [c["id"] for c in proj.cells]
    for key in proj.executions:
        if int(key) not in shown:
            shown.append(int(key))
    by_id = {c["id"]: c for c in proj.cells}
    for cell_id in shown:
        ex = proj.executions.get(str(cell_id))
        cell: dict[str, Any] = by_id.get(cell_id) or (ex or {}).get("cell") or {"kind": "?"}
        result = (ex or {}).get("result") or {}
        label = result.get("type", "")
        if result.get("reason"):
            label += f" ({result['reason']})"
        if ex and ex.get("resolved_by"):
            label += f", resolved by {ex['resolved_by']}"
        lines.append(
            f"| {cell_id} | {cell['kind']}{_role(cell)} | "
            f"{(ex or {}).get('phase', '—')} | {_cell_text(label)} |"
        )
    recent = _recent_output(proj)
    if recent:
        lines += [
            "",
            "<details><summary>recent output</summary>",
            "",
            "```text",
            recent,
            "```",
            "",
            "</details>",
        ]
    if proj.rationale:
        lines += [
            "",
            "<details><summary>the model's last rationale</summary>",
            "",
            _quoted(proj.rationale),
            "",
            "</details>",
        ]
    lines += [
        "",
        f"Rounds {usage.get('rounds', 0)} · tokens {usage.get('input_tokens', 0)} in / "
        f"{usage.get('output_tokens', 0)} out · cost {cost}",
    ]
    if pull_request:
        lines.append(f"Pull request: {pull_request}")
    if run_url:
        lines.append(f"[This run]({run_url})")
    return "\n".join(lines) + "\n"


def render_problem(problem: str, *, run_url: str | None, operation: str | None = None) -> str:
    """The comment when no Session could be opened at all (every saved generation refused,
    or all gone). Its metadata has no wake-up, so the sweep leaves the issue alone until
    someone acts; ``operation`` names the write, so a replay can tell it was made."""
    meta = {
        "status": "error",
        "generation": None,
        "operation": operation,
        "next_wake": None,
        "ended": False,
    }
    lines = [
        MARKER,
        f"<!-- rio-ci:meta {json.dumps(meta, sort_keys=True, allow_nan=False)} -->",
        "### rio-ci: error",
        "",
        f"> {_one_line(problem)}",
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
    except json.JSONDecodeError:
        return None
    return meta if isinstance(meta, dict) else None


def _quoted(text: str) -> str:
    """Untrusted text as a Markdown quote: clipped, control characters escaped, no mentions,
    no HTML (a ``</details>`` in it cannot close the fold it sits in)."""
    clipped = escape_control(clip(text.strip(), 1500)).replace("@", "@\u200b")
    clipped = clipped.replace("&", "&amp;").replace("<", "&lt;")
    return "\n".join(f"> {line}" for line in clipped.splitlines())


def _role(cell: dict[str, Any]) -> str:
    return f" ({cell['role']})" if cell.get("role") else ""


def _one_line(text: str) -> str:
    return escape_control(" ".join(text.split()))[:2000]


def _cell_text(text: str) -> str:
    return escape_control(text.replace("|", "\\|").replace("\n", " "))[:200]


def _recent_output(proj: Projection) -> str:
    finished = [e for e in proj.executions.values() if e["stdout"] or e["stderr"]]
    if not finished:
        return ""
    last = max(finished, key=lambda e: e["cell_id"])
    # Cell output is untrusted: control sequences are shown, never passed on (the comment
    # is copied into the step summary and logs), and escaped before the text is cut into
    # lines, so a carriage return cannot start a line of its own.
    text = escape_control((last["stdout"] + last["stderr"]).strip()).replace("```", "`\u200b``")
    return "\n".join(text.split("\n")[-15:])[-1500:]


def publish_progress(
    env: ActionEnv,
    forge: Forge,
    session: Session,
    issue: int,
    generation: int,
    outcome: str | None,
    *,
    note: str | None = None,
    pull_request: str | None = None,
    final: bool = False,
) -> bool:
    """Rewrite the progress comment from committed facts; whether it was written. A failed
    write is logged, never fatal: the work and the Session matter more than the report."""
    proj = session.refresh()
    status = status_of(proj, outcome)
    body = render(
        proj,
        status=status,
        run_url=env.run_url,
        generation=generation,
        operation=f"{proj.session['id']}:{proj.last_seq}",
        note=note,
        pull_request=pull_request,
    )
    written = True
    try:
        forge.upsert_comment(issue, MARKER, body)
    except RioError as exc:
        log(f"::warning::rio-ci: the progress comment was not written: {exc}")
        written = False
    if final and env.summary is not None:
        with env.summary.open("a") as stream:
            stream.write(body.replace(MARKER, "") + "\n")
    return written
