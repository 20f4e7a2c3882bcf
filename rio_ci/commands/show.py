"""``rio-ci show``: a readable summary of a Session (committed facts only). Everything a
Cell or a model wrote is printed with its terminal control characters escaped.

It reads the projection alone (the saved projection and the events after it), so it takes the same
time however long the Journal is: the Executions the State may show (in context, not
finished, or unresolved) and the last ``DEPARTED_KEPT`` that the fold dropped once settled,
with the number dropped before them (their events stay in the Journal: ``rio-ci events``)."""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import Any, Literal, final

from rio_ci.core.entities import CellUserRecord, Departed, Execution, Phase, stream_keys
from rio_ci.core.projection import Projection
from rio_ci.core.text import clip, escape_control
from rio_ci.core.timeline import CONCLUSION, Run, Timeline
from rio_ci.core.view import retained
from rio_ci.reports import egress as egress_report
from rio_ci.reports.live import describe
from rio_ci.reports.timeline import RECENT_EVENTS, recent_timeline, result_text, seconds, took
from rio_ci.session.session import Session

SHOWN_LINES = 5  # of each output stream
SHOWN_CHARS = 400


@final
class Gone(Departed):
    """A dropped Execution as ``show`` lists it: finished, its Cell in short, no output."""

    phase: Phase


Listed = Execution | Gone


def executions(session: Session, proj: Projection) -> dict[str, Listed]:
    """The Executions ``show`` lists, by Cell id (in id order): the projection's own, and the
    last ``DEPARTED_KEPT`` it dropped (``proj.departed``), as ``{cell_id, cell, phase,
    result, resolved_by}``: finished, the Cell in short, no output (``rio-ci output`` reads
    it)."""
    gone: dict[str, Gone] = {
        str(ex["cell_id"]): {**ex, "phase": "finished"} for ex in proj.departed
    }
    every: dict[str, Listed] = {**proj.executions, **gone}
    return {k: every[k] for k in sorted(every, key=int)}


def no_output(session: Session, cell_id: int, db: str) -> str:
    """Why ``rio-ci output`` has no text for ``cell_id``: its Execution was never launched
    (cancelled before launch, or still queued), or it has none."""
    proj = session.refresh()
    finished = session.find(str(cell_id), "execution_finished")
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


@dataclass
class Shown:
    """Everything ``show`` reports, gathered in one place (``gather``)."""

    proj: Projection
    executions: dict[str, Listed]
    timeline: Timeline


def gather(session: Session) -> Shown:
    """The facts ``show`` prints, committed up to one seq: the Projection, the Executions it
    lists (``executions``) and their times and the latest validators (``recent_timeline``): a
    bounded number of indexed reads, so ``show`` costs the same on a long Session."""
    proj = session.refresh()
    listed = executions(session, proj)
    cell_ids = [int(k) for k in listed]
    return Shown(proj, listed, recent_timeline(session, proj, cell_ids))


def summary(session: Session) -> dict[str, Any]:
    shown = gather(session)
    proj = shown.proj
    return {
        "session": proj.session["id"],
        "goal": proj.session["goal"],
        "cwd": proj.session["cwd"],
        "revision": proj.revision,
        "cells": proj.cells,
        "executions": {
            k: {"phase": ex["phase"], "result": ex["result"], "resolved_by": ex["resolved_by"]}
            for k, ex in shown.executions.items()
        },
        "inbox": proj.inbox,
        "timers": list(proj.timers.values()),
        "pause": proj.pause,
        "usage": proj.usage,
        "rationale": proj.rationale,
        "ended": proj.ended,
        "cell_user": cell_user_summary(proj.cell_user),
        "network": egress_report.network(proj),
        "egress": egress_report.egress(proj),
        "events": proj.last_seq,
        "validators": [
            {"note_id": v.note_id, "argv": v.argv, "result": v.result, "at": v.at, "where": v.where}
            for v in shown.timeline.validations
        ],
        "executions_not_listed": proj.departed_before,
    }


def cell_user_summary(mode: CellUserRecord | None) -> dict[str, Any] | None:
    """How Cells ran, as the last ``cell_user`` event says (None: no Cell user was asked)."""
    if mode is None:
        return None
    return {k: mode.get(k) for k in ("mode", "user", "uid", "reason")}


def cell_user_line(mode: CellUserRecord | None) -> str | None:
    if mode is None:
        return None
    if mode["mode"] == "separate":
        return (
            f"cells run as: {escape_control(mode['user'])} (uid {mode['uid']}), apart from rio-ci"
        )
    return (
        f"cells run as: rio-ci's own user — Cells share the harness's user "
        f"({escape_control(str(mode.get('reason')))}; the Cell user "
        f"{escape_control(str(mode.get('user')))} was asked for)"
    )


def network_lines(proj: Projection) -> list[str]:
    """The Cells' network, and every host they were refused with the options that would
    allow it in a new Session."""
    net = egress_report.network(proj)
    patterns = len(net["allow"])
    fixed = f"network: {net['mode']}" + (f" ({patterns} host patterns)" if patterns else "")
    if net["isolated"]:
        lines = [f"{fixed}, in a network of their own: every connection goes through the proxy"]
    else:
        lines = [
            f"{fixed}, but Cells use the host's network "
            f"({escape_control(str(net['reason']))}): nothing records or stops their connections"
        ]
    tally = proj.egress
    if tally["allowed"] or tally["refused"]:
        lines.append(f"connections: {tally['allowed']} allowed")
    for entry in tally["refused"]:
        where = escape_control(f"{entry['host']}:{entry['port']}")
        cell = entry["cell_id"]
        by = f"cell {cell}" if cell is not None else "a validator"
        line = egress_report.allowing(entry, config=False)
        allow = f": {line}" if line else " (no option would allow it)"
        lines.append(f"  refused {where} {entry['count']} times ({by}){allow}")
    return lines


def render_text(session: Session) -> str:
    shown = gather(session)
    proj, timeline = shown.proj, shown.timeline
    db = str(session.path)
    lines = [
        f"Session {proj.session['id']}  ({escape_control(db)})",
        f"goal: {escape_control(clip(proj.session['goal'], 300))}",
        f"working directory: {escape_control(proj.session['cwd'])}",
        f"revision {proj.revision}, {proj.last_seq} events, next cell id {proj.next_cell_id}",
        _times(timeline),
    ]
    if (line := cell_user_line(proj.cell_user)) is not None:
        lines.append(line)
    lines += network_lines(proj)
    if proj.ended:
        lines.append(f"ENDED: {proj.ended['result']} — {escape_control(proj.ended['reason'])}")
        for left in proj.ended.get("unresolved") or []:  # the uncertainty a failure keeps
            lines.append(
                f"  unresolved: cell {left.get('cell_id')} "
                f"({escape_control(str(left.get('reason')))})"
            )
    elif proj.pause:
        lines.append(f"paused by {proj.pause}")
    lines += ["", "cells:"]
    every = shown.executions
    for cell in proj.cells:
        lines.append(f"  [{cell['id']}] {describe(cell)}")
        ex = every.get(str(cell["id"]))
        if ex:
            lines.extend(_execution_lines(ex, timeline.runs.get(cell["id"]), db))
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
            lines.extend(_execution_lines(ex, timeline.runs.get(ex["cell_id"]), db))
    lines += _validator_lines(timeline)
    lines += _rest(session, proj, db)
    return "\n".join(lines)


def _times(timeline: Timeline) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timeline.started_at))
    last = seconds(timeline.last_at - timeline.started_at)
    rounds = timeline.round_count if timeline.round_count is not None else len(timeline.rounds)
    return f"created {started}, last event {last} later; {rounds} round{'s' if rounds != 1 else ''}"


def _validator_lines(timeline: Timeline) -> list[str]:
    if not timeline.validations:
        return []
    lines = ["", "validators:"]
    for v in timeline.validations:
        lines.append(
            f"  {escape_control(' '.join(v.argv))} → {result_text(v.result)} "
            f"({_place(v.where, v.note_id)}, at "
            f"{time.strftime('%H:%M:%S UTC', time.gmtime(v.at))})"
        )
    return lines


def _place(where: str, note_id: int) -> str:
    return f"at the conclusion, note {note_id}" if where == CONCLUSION else where


def _rest(session: Session, proj: Projection, db: str) -> list[str]:
    lines = ["", f"inbox: {len(proj.inbox)} unconsumed"]
    for message in proj.inbox:
        lines.append(
            f"  {escape_control(message['id'])} ({message['kind']}, event {message['seq']})"
        )
    for timer in proj.timers.values():
        due = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timer["deadline"]))
        lines.append(f"timer {escape_control(timer['id'])} due at {due} ({timer['deadline']})")
    lines.extend(_fallback_lines(session, proj))
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
    step = next_step(proj, db)
    if step:
        lines.append(f"next: {step}")
    return lines


def _fallback_lines(session: Session, proj: Projection) -> list[str]:
    """Attempts that went to the fallback model after a refusal (``model_attempt`` events
    with ``fallback_from``) among the last ``RECENT_EVENTS`` events."""
    after = max(0, proj.last_seq - RECENT_EVENTS)
    switched = [
        event
        for event in session.events(after=after, kinds=("model_attempt",))
        if event.get("fallback_from") and event["seq"] <= proj.last_seq
    ]
    return [
        f"after a refusal, {escape_control(e['turn_id'])} attempt {e['attempt']} went to "
        f"{escape_control(e['model'])} (fallback for {escape_control(e['fallback_from'])})"
        for e in switched
    ]


def next_step(proj: Projection, db: str) -> str | None:
    """What happens next, and the command that does it, when the run has not ended."""
    if proj.ended:
        return None
    run = f"rio-ci run {escape_control(shlex.quote(db))} --model MODEL"
    if proj.unresolved():
        cells = ", ".join(str(e["cell_id"]) for e in proj.unresolved())
        return (
            f"the model must investigate the UnknownExecution of cell(s) {cells} and resolve "
            f"it with evidence: {run}"
        )
    if proj.pause:
        return f"the queue waits for the model's next patch (after {proj.pause}): {run}"
    if proj.pending() or proj.inbox or proj.turn:
        return f"work or input waits for the Owner and the model: {run}"
    wake = proj.next_wake()
    if wake is not None:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(wake))
        return f"waiting for a Timer due at {when}; then {run}"
    return f"the model's next round: {run}"


def _execution_lines(ex: Listed, run: Run | None, db: str) -> list[str]:
    result = ex["result"]
    status: str = ex["phase"]
    if result:
        status += f" → {result.get('type')}"
        if result.get("exit_code") is not None:
            status += f" (exit {result['exit_code']})"
        if result.get("reason"):
            status += f" [{escape_control(str(result['reason']))}]"
    if ex["resolved_by"]:
        status += f", resolved by cell {ex['resolved_by']}"
    if run is not None and run.started_at is not None:
        status += ", started " + time.strftime("%H:%M:%S UTC", time.gmtime(run.started_at))
        status += f", {took(run)}"
    lines = [f"      {status}"]
    if "stdout" not in ex:  # one the projection dropped: `rio-ci output` reads its output
        return lines
    for stream in ("stdout", "stderr"):
        lines.extend(_output_lines(ex, stream, db))
    return lines


def _output_lines(ex: Execution, stream: Literal["stdout", "stderr"], db: str) -> list[str]:
    """The last lines of a stream, and when more was captured than shown, how many bytes
    are left out and the command that prints them all."""
    full = retained(ex, stream)
    # Escaped before it is cut into lines: a carriage return (or any other character
    # splitlines() breaks at) must not start a line of its own that looks like ours.
    text = escape_control(full.strip())
    if not text:
        return []
    tail = clip("\n".join(text.split("\n")[-SHOWN_LINES:]), SHOWN_CHARS)
    lines = [f"      {stream}: " + tail.replace("\n", "\n        ")]
    left = len(text.encode()) - len(tail.removesuffix("…").encode())
    left += int(ex.get(stream_keys(stream)[1], 0))  # not even retained: counted, not kept
    if left > 0:
        flag = "" if stream == "stdout" else " --stream stderr"
        lines.append(
            f"        [… {left} bytes not shown: "
            f"rio-ci output {escape_control(shlex.quote(db))} {ex['cell_id']}{flag} --human]"
        )
    return lines
