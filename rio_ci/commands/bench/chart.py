"""The storage chart: a Session's size against the rounds played, one line per rio_ci tree.

Each line comes from ``drive.py`` run as a script in its own process, with the tree on
``PYTHONPATH`` (this rio_ci's line runs it with nothing added), so an older commit's
checkout is measured by the very same rounds on the same disk in the same run. The SVG is
written with plain string formatting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from html import escape
from pathlib import Path

from rio_ci.core.errors import UsageError

Series = dict[str, list[tuple[int, int]]]
CONTENT = "the rounds' new content"
THIS = "this rio-ci"
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 760, 420, 70, 20, 40, 50


def parse_before(specs: list[str]) -> dict[str, Path]:
    """``LABEL=DIR`` pairs: DIR holds a rio_ci source tree (a checkout of another commit)."""
    trees: dict[str, Path] = {}
    for spec in specs:
        label, sep, folder = spec.partition("=")
        tree = Path(folder).expanduser().resolve()
        if not sep or not label.strip() or not (tree / "rio_ci" / "cli.py").is_file():
            raise UsageError(
                f"--before expects LABEL=DIR with DIR a rio_ci source tree, got {spec!r}"
            )
        trees[label.strip()] = tree
    return trees


def growth(trees: dict[str, Path], root: Path, rounds: int, every: int) -> Series:
    """Each tree's Session size every ``every`` rounds, then this rio_ci's."""
    script = Path(__file__).with_name("drive.py")
    series: Series = {}
    for label, tree in [*trees.items(), (THIS, None)]:
        env = {**os.environ, "RIO_DRIVE_DIR": str(root)}
        env.pop("PYTHONPATH", None)
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        done = subprocess.run(
            [sys.executable, str(script), str(rounds), str(every)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"bench: the drive failed for {label}: {done.stderr[-500:]}")
        points = json.loads(done.stdout)
        series[label] = [(int(r), int(b)) for r, b, _ in points]
    # What the rounds brought (patch, output, Inbox payload), above this tree's first size.
    series[CONTENT] = [(int(r), int(points[0][1] + c)) for r, _, c in points]
    return series


def per_round(points: list[tuple[int, int]]) -> int:
    """Bytes per round over the second half of the series (steady state)."""
    (r0, b0), (r1, b1) = points[len(points) // 2], points[-1]
    return round((b1 - b0) / (r1 - r0)) if r1 > r0 else 0


def svg(series: Series, title: str) -> str:
    rounds = max(r for points in series.values() for r, _ in points) or 1
    largest = max(b for points in series.values() for _, b in points) or 1
    step = _nice(largest / 5)
    top = step * (int(largest / step) + 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(r: float) -> float:
        return LEFT + plot_w * r / rounds

    def y(b: float) -> float:
        return TOP + plot_h * (1 - b / top)

    parts = frame(title) + grid(top, step, y, lambda value: f"{value / 1e6:g} MB")
    for n in range(6):  # the rounds axis
        r = rounds * n / 5
        parts.append(
            f'<text x="{x(r):.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle">{r:g}</text>'
        )
    parts.append(
        f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 10}" text-anchor="middle">rounds played</text>'
    )
    parts.append(
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" '
        f'y2="{TOP + plot_h}" stroke="#333"/>'
    )
    for n, (label, points) in enumerate(series.items()):
        colour = "#7f7f7f" if label == CONTENT else COLOURS[n % len(COLOURS)]
        line = " ".join(f"{x(r):.1f},{y(b):.1f}" for r, b in points)
        dash = ' stroke-dasharray="6 4"' if label == CONTENT else ""
        legend = f"{label}: {per_round(points):,} bytes per round"
        parts += series_line(n, colour, dash, line, legend)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def frame(title: str) -> list[str]:
    """The opening of a chart: the SVG element, its white ground and the title."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]


def grid(
    top: float, step: float, y: Callable[[float], float], unit: Callable[[float], str]
) -> list[str]:
    """Horizontal grid lines from 0 to ``top`` every ``step``, each labelled by ``unit``."""
    parts = []
    for n in range(int(top / step) + 1):
        value = n * step
        parts.append(
            f'<line x1="{LEFT}" y1="{y(value):.1f}" x2="{WIDTH - RIGHT}" '
            f'y2="{y(value):.1f}" stroke="#ddd"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{unit(value)}</text>'
        )
    return parts


def series_line(n: int, colour: str, dash: str, points: str, legend: str) -> list[str]:
    """Line ``n`` of a chart (SVG ``points``) and its entry in the legend."""
    legend_y = TOP + 16 + 18 * n
    return [
        f'<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{points}"/>',
        f'<line x1="{LEFT + 12}" y1="{legend_y - 4}" x2="{LEFT + 36}" y2="{legend_y - 4}" '
        f'stroke="{colour}" stroke-width="2"{dash}/>',
        f'<text x="{LEFT + 42}" y="{legend_y}">{escape(legend)}</text>',
    ]


def _nice(raw: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``raw``."""
    magnitude = 10.0 ** (len(str(int(max(raw, 1)))) - 1)
    return float(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw))
