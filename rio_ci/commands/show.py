"""``rio-ci show``: a readable summary of a Session (committed facts only). Everything a
Cell or a model wrote is printed with its terminal control characters escaped."""

from __future__ import annotations

from typing import Any

from rio_ci.core.text import clip, escape_control
from rio_ci.core.view import retained
from rio_ci.live import describe
from rio_ci.session import Session


def summary(session: Session) -> dict[str, Any]:
    proj = session.refresh()
    return {
        "session": proj.session["id"],
        "goal": proj.session["goal"],
        "cwd": proj.session["cwd"],
        "revision": proj.revision,
        "cells": proj.cells,
        "executions": {k: {key: ex[key] for key in ("phase", "result", "resolved_by")}
                       for k, ex in proj.executions.items()},
        "inbox": proj.inbox,
        "timers": list(proj.timers.values()),
        "pause": proj.pause,
        "usage": proj.usage,
        "rationale": proj.rationale,
        "ended": proj.ended,
        "events": proj.last_seq,
    }


def render_text(session: Session) -> str:
    proj = session.refresh()
    lines = [f"Session {proj.session['id']}  ({session.journal.path})",
             f"goal: {escape_control(clip(proj.session['goal'], 300))}",
             f"working directory: {proj.session['cwd']}",
             f"revision {proj.revision}, {proj.last_seq} events, next cell id {proj.next_cell_id}"]
    if proj.ended:
        lines.append(f"ENDED: {proj.ended['result']} — {escape_control(proj.ended['reason'])}")
    elif proj.pause:
        lines.append(f"paused by {proj.pause}")
    lines.append("")
    lines.append("cells:")
    for cell in proj.cells:
        lines.append(f"  [{cell['id']}] {describe(cell)}")
        ex = proj.executions.get(str(cell["id"]))
        if ex:
            lines.extend(_execution_lines(ex))
    others = [ex for k, ex in proj.executions.items()
              if int(k) not in {c["id"] for c in proj.cells}]
    if others:
        lines.append("executions of cells no longer in context:")
        for ex in others:
            lines.append(f"  [{ex['cell_id']}] {describe(ex['cell'])}")
            lines.extend(_execution_lines(ex))
    lines.append("")
    lines.append(f"inbox: {len(proj.inbox)} unconsumed")
    for message in proj.inbox:
        lines.append(f"  {escape_control(message['id'])} ({message['kind']}, "
                     f"event {message['seq']})")
    for timer in proj.timers.values():
        lines.append(f"timer {escape_control(timer['id'])} due at {timer['deadline']}")
    if proj.rationale:
        lines.append("the model's last rationale: "
                     + escape_control(clip(proj.rationale, 800)).replace("\n", "\n  "))
    usage = proj.usage
    lines.append(f"usage: {usage.get('rounds', 0)} rounds, {usage.get('input_tokens', 0)} in / "
                 f"{usage.get('output_tokens', 0)} out tokens, ${usage.get('cost_usd', 0):.4f}"
                 f" known cost, {usage.get('unknown_cost_attempts', 0)} attempts of unknown cost")
    return "\n".join(lines)


def _execution_lines(ex: dict[str, Any]) -> list[str]:
    result = ex["result"] or {}
    status = ex["phase"]
    if result:
        status += f" → {result.get('type')}"
        if result.get("exit_code") is not None:
            status += f" (exit {result['exit_code']})"
        if result.get("reason"):
            status += f" [{escape_control(str(result['reason']))}]"
    if ex["resolved_by"]:
        status += f", resolved by cell {ex['resolved_by']}"
    lines = [f"      {status}"]
    for stream in ("stdout", "stderr"):
        text = retained(ex, stream).strip()
        if text:
            tail = escape_control(clip("\n".join(text.splitlines()[-5:]), 400))
            lines.append(f"      {stream}: " + tail.replace("\n", "\n        "))
    return lines
