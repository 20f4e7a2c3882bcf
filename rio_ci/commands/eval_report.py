"""The figures of ``rio-ci eval`` (docs/eval.md), read from committed events, and its report files.

``measure(events)`` turns one Session's Journal into one trial's figures; nothing is assumed
or estimated. ``summarise(trials)`` aggregates. ``write_reports`` writes ``OUT/report.json``,
``OUT/report.md`` and ``OUT/report.svg`` for this run, and keeps this mode's report as
``OUT/report-plain.json`` or ``OUT/report-crash.json`` so that a later run in the other mode
(with the same model) can draw both side by side.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from rio_ci.commands.eval_chart import bar_chart

SCHEMA = "rio.eval/1"
TRIAL_FIELDS = (
    "case",
    "trial",
    "passed",
    "status",
    "rounds",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "wall_seconds",
    "cells_run",
    "unknown_executions",
    "rounds_to_resolve",
    "recovery_seconds",
    "crashed",
)


def measure(events: list[dict[str, Any]]) -> dict[str, Any]:
    """One trial's figures from its Session's events (dicts with ``seq``, ``kind``, ``at`` and
    the event's data, as ``rio-ci events`` prints them).

    - ``rounds``: model replies that were complete (``model_response`` with ``ok``), i.e.
      ``runtime.usage.rounds``;
    - ``input_tokens``/``output_tokens``/``cost_usd``: summed over every billed response;
      ``unknown_cost_attempts`` counts attempts whose cost is unknown (then ``cost_usd`` is a
      lower bound, never "free");
    - ``cells_run``: Executions whose launch was authorised (``execution_started``);
    - ``unknown_executions``: results of type ``UnknownExecution``;
    - ``rounds_to_resolve``: for the first UnknownExecution, the round whose patch resolved
      it minus the round whose Turn delivered its notice (rounds are numbered by accepted
      patch, as the scripted model numbers them); null when there is none or it was never
      resolved;
    - ``recovery_seconds``: the time the first UnknownExecution cost, from the last event
      committed before it was recorded (the last sign of the Owner that died) to the patch
      that resolved it; null when there is none or it was never resolved;
    - ``wall_seconds``: from the Session's first to its last committed event;
    - ``ended``: ``succeeded``/``failed`` from the run ending, or None.
    """
    rounds = input_tokens = output_tokens = attempts = priced = 0
    cost = 0.0
    cells_run = 0
    unknown: list[dict[str, Any]] = []
    delivered_in: dict[str, str] = {}  # message id -> the first Turn that delivered it
    round_of: dict[str, int] = {}  # turn id -> its round (1-based, by accepted patch)
    resolved_in: dict[int, int] = {}  # cell id -> round of its first resolution
    ended = None
    previous_at = 0.0
    lost_at: float | None = None  # the last event before the first UnknownExecution
    resolved_at: dict[int, float] = {}
    for event in events:
        kind = event["kind"]
        if kind == "execution_finished" and event["result"]["type"] == "UnknownExecution":
            lost_at = previous_at if lost_at is None else lost_at
        if kind == "patch_accepted":
            for control in event.get("controls", []):
                if control.get("role") == "resolution":
                    resolved_at.setdefault(control["target_cell_id"], event["at"])
        previous_at = event["at"]
        if kind == "model_attempt":
            attempts += 1
        elif kind == "model_response":
            rounds += bool(event.get("ok"))
            usage = event.get("usage") or {}
            # input as the Session counts it (runtime.usage, the tokens budget): cache
            # reads and writes included
            input_tokens += sum(
                int(usage.get(name) or 0)
                for name in ("input_tokens", "cache_read_tokens", "cache_write_tokens")
            )
            output_tokens += int(usage.get("output_tokens") or 0)
            if usage.get("cost_usd") is not None:
                cost += float(usage["cost_usd"])
                priced += 1
        elif kind == "turn_prepared":
            for message_id in event.get("delivered", []):
                delivered_in.setdefault(message_id, event["turn_id"])
        elif kind == "patch_accepted":
            round_of[event["turn_id"]] = len(round_of) + 1
            for control in event.get("controls", []):
                if control.get("role") == "resolution":
                    resolved_in.setdefault(control["target_cell_id"], len(round_of))
        elif kind == "execution_started":
            cells_run += 1
        elif kind == "execution_finished" and event["result"]["type"] == "UnknownExecution":
            unknown.append(event)
        elif kind == "run_ended":
            ended = "succeeded" if event["result"] == "success" else "failed"
    return {
        "rounds": rounds,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd": round(cost, 6),
        "unknown_cost_attempts": max(0, attempts - priced),
        "wall_seconds": round(events[-1]["at"] - events[0]["at"], 2) if events else 0.0,
        "cells_run": cells_run,
        "unknown_executions": len(unknown),
        "rounds_to_resolve": _rounds_to_resolve(unknown, delivered_in, round_of, resolved_in),
        "recovery_seconds": _recovery(unknown, lost_at, resolved_at),
        "ended": ended,
    }


def _rounds_to_resolve(
    unknown: list[dict[str, Any]],
    delivered_in: dict[str, str],
    round_of: dict[str, int],
    resolved_in: dict[int, int],
) -> int | None:
    if not unknown:
        return None
    first = unknown[0]
    notice = (first.get("message") or {}).get("id", f"execution:{first['cell_id']}")
    seen = round_of.get(delivered_in.get(notice, ""))
    resolved = resolved_in.get(first["cell_id"])
    if seen is None or resolved is None:
        return None
    return resolved - seen


def _recovery(
    unknown: list[dict[str, Any]], lost_at: float | None, resolved_at: dict[int, float]
) -> float | None:
    if not unknown or lost_at is None or unknown[0]["cell_id"] not in resolved_at:
        return None
    return round(resolved_at[unknown[0]["cell_id"]] - lost_at, 2)


def _median(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def summarise(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """``pass_rate`` (passed / trials), ``median_rounds``, ``median_cost_usd``,
    ``total_cost_usd``, ``recovered`` (crashed trials that passed), the recovery medians
    (``median_rounds_to_resolve``, ``median_recovery_seconds``: over the trials that resolved
    an UnknownExecution) and the counts behind them. Medians are None for no trials."""
    count = len(trials)
    costs = [t["cost_usd"] for t in trials if t["cost_usd"] is not None]
    return {
        "trials": count,
        "passed": sum(t["passed"] for t in trials),
        "pass_rate": round(sum(t["passed"] for t in trials) / count, 4) if count else None,
        "median_rounds": statistics.median(t["rounds"] for t in trials) if count else None,
        "median_cost_usd": round(statistics.median(costs), 6) if costs else None,
        "total_cost_usd": round(sum(costs), 6),
        "crashed": sum(t["crashed"] for t in trials),
        "recovered": sum(t["crashed"] and t["passed"] for t in trials),
        # over the trials that had an UnknownExecution and resolved it
        "median_rounds_to_resolve": _median([t.get("rounds_to_resolve") for t in trials]),
        "median_recovery_seconds": _median([t.get("recovery_seconds") for t in trials]),
    }


def build_report(trials: list[dict[str, Any]], *, model: str, crash: bool) -> dict[str, Any]:
    names = list(dict.fromkeys(t["case"] for t in trials))
    return {
        "schema": SCHEMA,
        "model": model,
        "crash": crash,
        "trials": trials,
        "summary": summarise(trials),
        "cases": {n: summarise([t for t in trials if t["case"] == n]) for n in names},
    }


def write_reports(
    out: Path, trials: list[dict[str, Any]], *, model: str, crash: bool
) -> dict[str, Any]:
    """Write this run's report (JSON, Markdown, SVG) to ``out``; returns the JSON value."""
    report = build_report(trials, model=model, crash=crash)
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
    (out / f"report-{'crash' if crash else 'plain'}.json").write_text(text)
    (out / "report.json").write_text(text)
    modes = both_modes(out, report)
    (out / "report.md").write_text(markdown(report, modes))
    (out / "report.svg").write_text(bar_chart(modes))
    return report


def both_modes(out: Path, report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """This report and, when ``out`` holds one for the other mode with the same model, that
    one too: ``{"plain": report, "crash": report}`` (either may be missing)."""
    mine = "crash" if report["crash"] else "plain"
    modes = {mine: report}
    other = "plain" if report["crash"] else "crash"
    try:
        kept = json.loads((out / f"report-{other}.json").read_text())
    except (OSError, ValueError):
        return modes
    if (
        isinstance(kept, dict)
        and kept.get("schema") == SCHEMA
        and kept.get("model") == report["model"]
    ):
        modes[other] = kept
    return modes


# --- Markdown ----------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}".rstrip("0").rstrip(".") if value else "0"
    return str(value).replace("|", "\\|")


def markdown(report: dict[str, Any], modes: dict[str, dict[str, Any]]) -> str:
    mode = "with --crash" if report["crash"] else "without --crash"
    lines = [
        f"# rio-ci eval: {report['model']}, {mode}",
        "",
        "| " + " | ".join(TRIAL_FIELDS) + " |",
        "|" + " --- |" * len(TRIAL_FIELDS),
    ]
    lines += [
        "| " + " | ".join(_cell(t.get(f)) for f in TRIAL_FIELDS) + " |" for t in report["trials"]
    ]
    summary = report["summary"]
    keys = (
        "trials",
        "pass_rate",
        "median_rounds",
        "median_cost_usd",
        "total_cost_usd",
        "crashed",
        "recovered",
        "median_rounds_to_resolve",
        "median_recovery_seconds",
    )
    lines += [
        "",
        "## Summary",
        "",
        "| " + " | ".join(keys) + " |",
        "|" + " --- |" * len(keys),
        "| " + " | ".join(_cell(summary[k]) for k in keys) + " |",
        "",
        "## By case",
        "",
        "| case | mode | trials | pass_rate | median_rounds | median_cost_usd | recovered "
        "| median_rounds_to_resolve | median_recovery_seconds |",
        "|" + " --- |" * 9,
    ]
    names = list(dict.fromkeys(n for r in modes.values() for n in r["cases"]))
    for name in names:
        for label in ("plain", "crash"):
            row = modes.get(label, {}).get("cases", {}).get(name)
            if row is not None:
                lines.append(
                    "| "
                    + " | ".join(
                        _cell(v)
                        for v in (
                            name,
                            label,
                            row["trials"],
                            row["pass_rate"],
                            row["median_rounds"],
                            row["median_cost_usd"],
                            row["recovered"],
                            row.get("median_rounds_to_resolve"),
                            row.get("median_recovery_seconds"),
                        )
                    )
                    + " |"
                )
    lines += ["", "![pass rate and median cost per case](report.svg)", ""]
    return "\n".join(lines)
