"""``rio-ci show``: a readable summary of a Session (committed facts only). Everything a
Cell or a model wrote is printed with its terminal control characters escaped.

It reads the projection alone (the snapshot and the events after it), so it takes the same
time however long the Journal is: the Executions the State may show (in context, not
finished, or unresolved) and the last ``DEPARTED_KEPT`` that the fold dropped once settled,
with the number dropped before them (their events stay in the Journal: ``rio-ci events``)."""

from __future__ import annotations

from typing import Any

from rio_ci.core.projection import Projection
from rio_ci.core.text import clip, escape_control
from rio_ci.core.view import retained
from rio_ci.live import describe
from rio_ci.session import Session


def executions(session: Session, proj: Projection) -> dict[str, dict[str, Any]]:
    """The Executions ``show`` lists, by Cell id (in id order): the projection's own, and the
    last ``DEPARTED_KEPT`` it dropped (``proj.departed``), as ``{cell_id, cell, phase,
    result, resolved_by}``: finished, the Cell in short, no output (``rio-ci output`` reads
    it)."""
    gone = {str(ex["cell_id"]): {**ex, "phase": "finished"} for ex in proj.departed}
    every = {**proj.executions, **gone}
    return {k: every[k] for k in sorted(every, key=int)}


def no_output(session: Session, cell_id: int, db: str) -> str:
    """Why ``rio-ci output`` has no text for ``cell_id``: its Execution was never launched
    (cancelled before launch, or still queued), or it has none."""
    proj = session.refresh()
    finished = session.journal.find(str(cell_id), "execution_finished")
    if finished is not None:
        result = finished["result"]
        return (
            f"cell {cell_id} was {result['type']} before it was launched "
            f"({result.get('reason')}): it has no output"
        )
    ex = proj.executions.get(str(cell_id))
    if ex is not None and ex["phase"] == "queued":
        return f"cell {cell_id} is queued and has not been launched yet: it has no output"
    return f"cell {cell_id} has no Execution in {db}"


def summary(session: Session) -> dict[str, Any]:
    proj = session.refresh()
    return {
        "session": proj.session["id"],
        "goal": proj.session["goal"],
        "cwd": proj.session["cwd"],
        "revision": proj.revision,
        "cells": proj.cells,
        "executions": {
            k: {key: ex[key] for key in ("phase", "result", "resolved_by")}
            for k, ex in executions(session, proj).items()
        },
        "inbox": proj.inbox,
        "timers": list(proj.timers.values()),
        "pause": proj.pause,
        "usage": proj.usage,
        "rationale": proj.rationale,
        "ended": proj.ended,
        "events": proj.last_seq,
        "executions_not_listed": proj.departed_before,
    }


def render_text(session: Session) -> str:
    proj = session.refresh()
    lines = [
        f"Session {proj.session['id']}  ({escape_control(str(session.journal.path))})",
        f"goal: {escape_control(clip(proj.session['goal'], 300))}",
        f"working directory: {escape_control(proj.session['cwd'])}",
        f"revision {proj.revision}, {proj.last_seq} events, next cell id {proj.next_cell_id}",
    ]
    if proj.ended:
        lines.append(f"ENDED: {proj.ended['result']} — {escape_control(proj.ended['reason'])}")
        for left in proj.ended.get("unresolved") or []:  # the uncertainty a failure keeps
            lines.append(
                f"  unresolved: cell {left.get('cell_id')} "
                f"({escape_control(str(left.get('reason')))})"
            )
    elif proj.pause:
        lines.append(f"paused by {proj.pause}")
    lines.append("")
    lines.append("cells:")
    every = executions(session, proj)
    for cell in proj.cells:
        lines.append(f"  [{cell['id']}] {describe(cell)}")
        ex = every.get(str(cell["id"]))
        if ex:
            lines.extend(_execution_lines(ex))
    heads = {c["id"] for c in proj.cells}
    others = [ex for k, ex in every.items() if int(k) not in heads]
    if others:
        lines.append("executions of cells no longer in context (replaced or removed):")
        if proj.departed_before:
            lines.append(
                f"  ({proj.departed_before} earlier ones not listed; "
                "`rio-ci events DB` has them all)"
            )
        for ex in others:
            lines.append(f"  [{ex['cell_id']}] {describe(ex['cell'])}")
            lines.extend(_execution_lines(ex))
    lines.append("")
    lines.append(f"inbox: {len(proj.inbox)} unconsumed")
    for message in proj.inbox:
        lines.append(
            f"  {escape_control(message['id'])} ({message['kind']}, event {message['seq']})"
        )
    for timer in proj.timers.values():
        lines.append(f"timer {escape_control(timer['id'])} due at {timer['deadline']}")
    if proj.rationale:
        lines.append(
            "the model's last rationale: "
            + escape_control(clip(proj.rationale, 800)).replace("\n", "\n  ")
        )
    usage = proj.usage
    lines.append(
        f"usage: {usage.get('rounds', 0)} rounds, {usage.get('input_tokens', 0)} in / "
        f"{usage.get('output_tokens', 0)} out tokens, ${usage.get('cost_usd', 0):.4f}"
        f" known cost, {usage.get('unknown_cost_attempts', 0)} attempts of unknown cost"
    )
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
    if "stdout" not in ex:  # one the projection dropped: `rio-ci output` reads its output
        return lines
    for stream in ("stdout", "stderr"):
        # Escaped before it is cut into lines: a carriage return (or any other character
        # splitlines() breaks at) must not start a line of its own that looks like ours.
        text = escape_control(retained(ex, stream).strip())
        if text:
            tail = clip("\n".join(text.split("\n")[-5:]), 400)
            lines.append(f"      {stream}: " + tail.replace("\n", "\n        "))
    return lines
