"""The Journal-size chart: what opening a Session, an Owner's start and ``show`` cost at 1k,
10k and 100k events, drawn from ``rio-ci bench --json`` output (docs/journal-size.svg).

    python -m rio_ci.commands.bench.journal_chart OUT.svg LABEL=BENCH.json [LABEL=FILE.json …]

Each file contributes one line per figure family it holds (``open_ms``, ``owner_open_ms``,
``show_ms``, ``show_json_ms``: the ``_1k``, ``_10k`` and ``_100k`` values), named
``LABEL: family``. The events axis is logarithmic, the time axis linear from zero. Plain
string formatting, like ``chart.py``.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from rio_ci.commands.bench.chart import (
    BOTTOM,
    COLOURS,
    HEIGHT,
    LEFT,
    RIGHT,
    TOP,
    WIDTH,
    _nice,
    frame,
    grid,
    series_line,
)

__all__ = ["FAMILIES", "series_of", "svg"]

FAMILIES = ("open_ms", "owner_open_ms", "show_ms", "show_json_ms")
SIZES = (("1k", 1_000), ("10k", 10_000), ("100k", 100_000))
Line = list[tuple[int, float]]


def series_of(label: str, figures: dict[str, Any]) -> dict[str, Line]:
    """The lines ``figures`` (one bench run's JSON) holds, each as (events, ms) points."""
    lines: dict[str, Line] = {}
    for family in FAMILIES:
        points = [
            (int(figures.get(f"events_{name}", events)), float(figures[f"{family}_{name}"]))
            for name, events in SIZES
            if f"{family}_{name}" in figures
        ]
        if len(points) == len(SIZES):
            lines[f"{label}: {family}"] = points
    return lines


def svg(lines: dict[str, Line], title: str) -> str:
    largest = max(ms for points in lines.values() for _, ms in points) or 1.0
    step = _nice(largest / 5) if largest >= 5 else 1.0
    top = step * (int(largest / step) + 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    low, high = math.log10(SIZES[0][1]), math.log10(SIZES[-1][1])

    def x(events: float) -> float:
        return LEFT + plot_w * (math.log10(events) - low) / (high - low)

    def y(ms: float) -> float:
        return TOP + plot_h * (1 - ms / top)

    parts = frame(title) + grid(top, step, y, lambda value: f"{value:g} ms")
    for name, events in SIZES:
        parts.append(
            f'<text x="{x(events):.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle">'
            f"{name}</text>"
        )
    parts.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">'
        "events in the Journal (log scale)</text>"
    )
    for n, (label, points) in enumerate(lines.items()):
        colour = COLOURS[n % len(COLOURS)]
        dash = ' stroke-dasharray="6 4"' if n >= len(COLOURS) else ""
        line = " ".join(f"{x(e):.1f},{y(ms):.1f}" for e, ms in points)
        legend = f"{label}: {points[0][1]:g} → {points[-1][1]:g} ms"
        parts += series_line(n, colour, dash, line, legend)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not all("=" in spec for spec in argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    lines: dict[str, Line] = {}
    for spec in argv[1:]:
        label, _, path = spec.partition("=")
        lines.update(series_of(label, json.loads(Path(path).read_text())))
    if not lines:
        print("no figures at 1k, 10k and 100k events in those files", file=sys.stderr)
        return 2
    Path(argv[0]).write_text(svg(lines, "Time against the Journal's length (rio-ci bench)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
