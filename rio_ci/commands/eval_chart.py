"""The picture of ``rio-ci eval``: an SVG bar chart written with plain string formatting.

Three panels side by side — pass rate, median cost per case, and the median time a crash
cost (``median_recovery_seconds``, with the rounds it took to resolve) — with one bar per mode
(without and with ``--crash``) for every case a report covers. Each bar says how many trials
it stands for (``n=3``), and each panel has a scale (0, half and full, in its unit). A mode
without a report, or a case without a figure, draws no bar and says "n/a".
"""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

MODES = (("plain", "without --crash", "#4878a8"), ("crash", "with --crash", "#d08030"))
LABEL_W, PANEL_W, GAP, ROW_H, BAR_H, TOP, BOTTOM = 210, 220, 110, 34, 12, 70, 40

Panel = tuple[int, str, str, float, Callable[[float], str]]


def bar_chart(modes: dict[str, dict[str, Any]]) -> str:
    """``modes`` maps ``plain``/``crash`` to a report (``build_report``'s value)."""
    names = list(dict.fromkeys(n for r in modes.values() for n in r["cases"]))
    width = LABEL_W + 3 * PANEL_W + 2 * GAP + 220  # room for the last panel's labels
    height = TOP + ROW_H * max(1, len(names)) + BOTTOM
    model = next(iter(modes.values()))["model"] if modes else ""
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="15" font-weight="bold">rio-ci eval: '
        f"{escape(model)}</text>",
    ]
    x = LABEL_W
    for _, caption, colour in MODES:
        parts.append(f'<rect x="{x}" y="30" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{x + 16}" y="40">{caption}</text>')
        x += 150
    parts.append(
        f'<text x="{x + 20}" y="40" fill="#555">n = trials per bar; the recovery panel is '
        "over trials that resolved an UnknownExecution</text>"
    )
    panels: list[Panel] = [
        (LABEL_W, "pass rate", "pass_rate", 1.0, _percent),
        (LABEL_W + PANEL_W + GAP, "median cost (USD)", "median_cost_usd", 0.0, _dollars),
        (
            LABEL_W + 2 * (PANEL_W + GAP),
            "median time a crash cost (s)",
            "median_recovery_seconds",
            0.0,
            _seconds,
        ),
    ]
    panels = [(left, t, key, scale or _top(modes, key), f) for left, t, key, scale, f in panels]
    for panel in panels:
        parts += _axis(panel, height)
    for row, name in enumerate(names):
        y = TOP + row * ROW_H
        parts.append(
            f'<text x="{LABEL_W - 8}" y="{y + BAR_H + 4}" text-anchor="end">{escape(name)}</text>'
        )
        for offset, (label, _, colour) in enumerate(MODES):
            figures = modes.get(label, {}).get("cases", {}).get(name)
            bar_y = y + 2 + offset * (BAR_H + 2)
            for panel in panels:
                parts += _bar(panel, figures, bar_y, colour)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _top(modes: dict[str, dict[str, Any]], key: str) -> float:
    values = [
        row[key] for r in modes.values() for row in r["cases"].values() if row.get(key) is not None
    ]
    return max(values, default=0.0) or 1.0  # all zero (a scripted model is free): empty bars


def _axis(panel: Panel, height: int) -> list[str]:
    """The panel's title, its baseline and a scale of three ticks (0, half, full)."""
    left, title, _, scale, fmt = panel
    bottom = height - BOTTOM
    parts = [
        f'<text x="{left}" y="{TOP - 8}" font-weight="bold">{title}</text>',
        f'<line x1="{left}" y1="{TOP - 4}" x2="{left}" y2="{bottom}" stroke="#888"/>',
        f'<line x1="{left}" y1="{bottom}" x2="{left + PANEL_W}" y2="{bottom}" stroke="#888"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        x = left + PANEL_W * fraction
        parts.append(
            f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" stroke="#888"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{bottom + 16}" font-size="10" text-anchor="middle" '
            f'fill="#555">{fmt(scale * fraction)}</text>'
        )
    return parts


def _bar(panel: Panel, figures: dict[str, Any] | None, bar_y: int, colour: str) -> list[str]:
    left, _, key, scale, fmt = panel
    value = None if figures is None else figures.get(key)
    length = 0.0 if value is None else PANEL_W * min(1.0, value / scale)
    text = "n/a" if value is None else fmt(value)
    if figures is not None:
        text += f" (n={figures['trials']})"
        if key == "median_recovery_seconds" and figures.get("median_rounds_to_resolve") is not None:
            text += f", {_rounds(figures['median_rounds_to_resolve'])} to resolve"
    return [
        f'<rect x="{left}" y="{bar_y}" width="{length:.1f}" height="{BAR_H}" fill="{colour}"/>',
        f'<text x="{left + length + 4:.1f}" y="{bar_y + BAR_H - 2}" font-size="10">{text}</text>',
    ]


def _percent(value: float) -> str:
    return f"{value * 100:.0f}%"


def _dollars(value: float) -> str:
    return f"${value:.4f}"


def _seconds(value: float) -> str:
    return f"{value:.1f} s"


def _rounds(value: float) -> str:
    return f"{value:g} round{'' if value == 1 else 's'}"
