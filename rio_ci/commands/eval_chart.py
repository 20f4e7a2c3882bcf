"""The picture of ``rio-ci eval``: an SVG bar chart written with plain string formatting.

Two panels side by side — pass rate and median cost per case — with one bar per mode
(without and with ``--crash``) for every case a report covers. A mode without a report, or a
case without a figure, draws no bar and says "n/a".
"""

from __future__ import annotations

from html import escape
from typing import Any

MODES = (("plain", "without --crash", "#4878a8"), ("crash", "with --crash", "#d08030"))
LABEL_W, PANEL_W, GAP, ROW_H, BAR_H, TOP, BOTTOM = 210, 250, 90, 34, 12, 70, 20


def bar_chart(modes: dict[str, dict[str, Any]]) -> str:
    """``modes`` maps ``plain``/``crash`` to a report (``build_report``'s value)."""
    names = list(dict.fromkeys(n for r in modes.values() for n in r["cases"]))
    costs = [
        row["median_cost_usd"]
        for r in modes.values()
        for row in r["cases"].values()
        if row["median_cost_usd"] is not None
    ]
    top_cost = max(costs, default=0.0) or 1.0  # all free (a scripted model): empty bars
    width = LABEL_W + 2 * PANEL_W + GAP + 60
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
    panels = (
        (LABEL_W, "pass rate", "pass_rate", 1.0, _percent),
        (LABEL_W + PANEL_W + GAP, "median cost (USD)", "median_cost_usd", top_cost, _dollars),
    )
    for left, title, _, _, _ in panels:
        parts.append(f'<text x="{left}" y="{TOP - 8}" font-weight="bold">{title}</text>')
        parts.append(
            f'<line x1="{left}" y1="{TOP - 4}" x2="{left}" y2="{height - BOTTOM}" stroke="#888"/>'
        )
    for row, name in enumerate(names):
        y = TOP + row * ROW_H
        parts.append(
            f'<text x="{LABEL_W - 8}" y="{y + BAR_H + 4}" text-anchor="end">{escape(name)}</text>'
        )
        for offset, (label, _, colour) in enumerate(MODES):
            figures = modes.get(label, {}).get("cases", {}).get(name)
            bar_y = y + 2 + offset * (BAR_H + 2)
            for left, _, key, scale, fmt in panels:
                value = None if figures is None else figures[key]
                length = 0.0 if value is None else PANEL_W * min(1.0, value / scale)
                parts.append(
                    f'<rect x="{left}" y="{bar_y}" width="{length:.1f}" '
                    f'height="{BAR_H}" fill="{colour}"/>'
                )
                text = "n/a" if value is None else fmt(value)
                parts.append(
                    f'<text x="{left + length + 4:.1f}" y="{bar_y + BAR_H - 2}" '
                    f'font-size="10">{text}</text>'
                )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _percent(value: float) -> str:
    return f"{value * 100:.0f}%"


def _dollars(value: float) -> str:
    return f"${value:.4f}"
