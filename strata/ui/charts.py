"""Step charts drawn as SVG by the server: the geometry here, the markup in ``templates/chart.html``.

A series changes only at the records of a history, so a step line (flat until the next entry)
is its exact shape; no charting library is needed, and none is shipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

WIDTH = 640
HEIGHT = 160
PAD_LEFT = 56
PAD_BOTTOM = 20
PAD_TOP = 8


@dataclass(frozen=True)
class Line:
    key: str
    label: str
    path: str  # an SVG path's "d"


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    lines: tuple[Line, ...]
    y_ticks: tuple[tuple[float, str], ...]  # (y, label)
    x_ticks: tuple[tuple[float, str], ...]  # (x, label)
    marker: float | None  # x of the version shown
    empty: bool


def step_chart(
    points: Sequence[dict[str, Any]],
    series: Sequence[tuple[str, str]],
    *,
    x_end: int,
    marker: int | None = None,
    y_format: Callable[[float], str] = lambda v: f"{v:g}",
    floor: float = 0.0,
) -> Chart:
    """``points`` (each with "offset" and every key of ``series``, in offset order) as step lines
    from the first offset to ``x_end``; ``floor`` is the least top of the y axis (a gang's
    minMember, so that the line shows how far it is)."""
    if not points:
        return Chart(WIDTH, HEIGHT, (), (), (), None, True)
    x0 = points[0]["offset"]
    x1 = max(x_end, points[-1]["offset"] + 1, x0 + 1)
    top = max([floor, 1.0, *(float(p[key]) for p in points for key, _ in series)])
    plot_w = WIDTH - PAD_LEFT - 4
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM

    def x(offset: float) -> float:
        return round(PAD_LEFT + (offset - x0) / (x1 - x0) * plot_w, 1)

    def y(value: float) -> float:
        return round(PAD_TOP + plot_h - value / top * plot_h, 1)

    lines = []
    for key, label in series:
        d = [f"M{x(x0)},{y(points[0][key])}"]
        for p in points[1:]:
            d.append(f"H{x(p['offset'])}V{y(p[key])}")
        d.append(f"H{x(x1)}")
        lines.append(Line(key, label, "".join(d)))
    y_ticks = tuple((y(v), y_format(v)) for v in (0.0, top / 2, top))
    x_ticks = tuple((x(v), str(int(v))) for v in (x0, x1))
    shown = x(marker) if marker is not None and x0 <= marker <= x1 else None
    return Chart(WIDTH, HEIGHT, tuple(lines), y_ticks, x_ticks, shown, False)
