"""An interactive series chart as plain SVG, drawn on the server.

Every median is one element carrying its commit, message and samples in data attributes, so
the small script in static/chart.js can show them on hover or focus, open the commit on click
or Enter, and ask for another window (zoom and pan) without reloading the page. Raw samples are
faint dots; change points are dashed lines; alert ranges are shaded. Each platform has a
colour from the Okabe-Ito palette and its own marker shape. No inline style: the page keeps a
Content-Security-Policy of default-src 'self'.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from markupsafe import Markup, escape

WIDTH, HEIGHT = 960, 380
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 30, 44
RADIUS = 4.0


@dataclass
class PlotPoint:
    position: int
    sha: str
    summary: str
    value: float            # the median (absolute or normalised)
    samples: list[float]    # in the same unit as `value`
    raw: list[float]        # the measured samples, for the tooltip


@dataclass
class PlotSeries:
    platform: str
    colour: str
    marker: str
    points: list[PlotPoint] = field(default_factory=list)


@dataclass
class Band:
    """A shaded commit range (an alert: last good .. first bad)."""

    low: float
    high: float
    label: str
    css: str = "alert-range"


@dataclass
class Rule:
    """A vertical line between two positions (a change point before `position`)."""

    position: float
    platform: str
    label: str


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    if not math.isfinite(low) or not math.isfinite(high):
        return []
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def covering_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Nice ticks whose first is at or below `low` and last at or above `high`, so the axis holds
    every point (nice_ticks alone keeps its ticks inside the range)."""
    ticks = nice_ticks(low, high, count)
    if len(ticks) < 2:
        return ticks
    step = ticks[1] - ticks[0]
    below = [round(ticks[0] - step * k, 12) for k in range(math.ceil((ticks[0] - low) / step), 0, -1)]
    above = [round(ticks[-1] + step * k, 12) for k in range(1, math.ceil((high - ticks[-1]) / step) + 1)]
    return [*below, *ticks, *above]


def marker_path(shape: str, x: float, y: float, r: float = RADIUS) -> str:
    if shape == "square":
        r *= 0.9
        return f"M{x - r:.1f},{y - r:.1f}h{2 * r:.1f}v{2 * r:.1f}h{-2 * r:.1f}z"
    if shape == "triangle":
        r *= 1.2
        return f"M{x:.1f},{y - r:.1f}L{x + r:.1f},{y + r * 0.8:.1f}L{x - r:.1f},{y + r * 0.8:.1f}z"
    if shape == "diamond":
        r *= 1.2
        return f"M{x:.1f},{y - r:.1f}L{x + r:.1f},{y:.1f}L{x:.1f},{y + r:.1f}L{x - r:.1f},{y:.1f}z"
    if shape == "cross":
        return f"M{x - r:.1f},{y - r:.1f}L{x + r:.1f},{y + r:.1f}M{x + r:.1f},{y - r:.1f}L{x - r:.1f},{y + r:.1f}"
    return f"M{x - r:.1f},{y:.1f}a{r:.1f},{r:.1f} 0 1,0 {2 * r:.1f},0a{r:.1f},{r:.1f} 0 1,0 {-2 * r:.1f},0"


def _fmt(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if magnitude < 1 else f"{value:.4g}"


def render(series: list[PlotSeries], *, x_range: tuple[int, int], full_range: tuple[int, int], y_label: str,
           bands: list[Band], rules: list[Rule], unit_suffix: str = "") -> Markup:
    """The chart for positions within `x_range` (inclusive); `full_range` lets the script know
    how far zoom out and pan may go."""
    x0, x1 = x_range
    span = max(1, x1 - x0)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    values = [v for s in series for p in s.points for v in (p.value, *p.samples) if math.isfinite(v)]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (high - low) * 0.06 or abs(high) * 0.05 or 1.0
    # A quantity that is never negative (throughput, latency, accuracy) gets no axis below zero;
    # a normalised chart (a % change, `unit_suffix`) may go negative.
    bottom = max(0.0, low - pad) if low >= 0 and not unit_suffix else low - pad
    y_ticks = [t for t in covering_ticks(bottom, high + pad) if t >= 0 or bottom < 0]
    y_low, y_high = (y_ticks[0], y_ticks[-1]) if len(y_ticks) >= 2 else (bottom, high + pad)

    def sx(position: float) -> float:
        return LEFT + (position - x0 + 0.5) / (span + 1) * plot_w

    def sy(value: float) -> float:
        return TOP + (1 - (value - y_low) / ((y_high - y_low) or 1.0)) * plot_h

    parts: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="series-chart" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{escape(y_label)} by commit" data-from="{x0}" data-to="{x1}" '
        f'data-min="{full_range[0]}" data-max="{full_range[1]}" data-left="{LEFT}" data-plot-width="{plot_w}">',
        f'<rect class="plot-area" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/>',
    ]
    for band in bands:
        a, b = max(band.low, x0 - 0.5), min(band.high, x1 + 0.5)
        if b < a:
            continue
        parts.append(f'<rect class="{band.css}" x="{sx(a) - 0.5 * plot_w / (span + 1):.1f}" y="{TOP}" '
                     f'width="{max(2.0, (b - a + 1) * plot_w / (span + 1)):.1f}" height="{plot_h}">'
                     f'<title>{escape(band.label)}</title></rect>')
    for tick in y_ticks:
        y = sy(tick)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(tick)}{unit_suffix}</text>')
    for tick in nice_ticks(x0, x1, 8):
        if tick != int(tick):
            continue
        x = sx(tick)
        parts.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">{int(tick)}</text>')
    parts.append(f'<text class="axis-label" x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 6}" text-anchor="middle">'
                 f'commit (position in first-parent history)</text>')
    parts.append(f'<text class="axis-label" transform="rotate(-90)" x="{-(TOP + plot_h / 2):.0f}" y="14" '
                 f'text-anchor="middle">{escape(y_label)}</text>')
    for rule in rules:
        if not x0 - 0.5 <= rule.position <= x1 + 0.5:
            continue
        colour = next((s.colour for s in series if s.platform == rule.platform), "#000")
        x = sx(rule.position)
        parts.append(f'<line class="change-point" data-platform="{escape(rule.platform)}" stroke="{colour}" '
                     f'x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + plot_h}"><title>{escape(rule.label)}</title></line>')
    for one in series:
        platform = escape(one.platform)
        parts.append(f'<g class="samples" fill="{one.colour}" data-platform="{platform}">')
        parts.extend(f'<circle cx="{sx(p.position):.1f}" cy="{sy(v):.1f}" r="1.6"/>'
                     for p in one.points for v in p.samples if math.isfinite(v))
        parts.append("</g>")
        line = " ".join(f"{sx(p.position):.1f},{sy(p.value):.1f}" for p in one.points if math.isfinite(p.value))
        parts.append(f'<polyline class="series-line" data-platform="{platform}" stroke="{one.colour}" points="{line}"/>')
        parts.append(f'<g class="points" data-platform="{platform}" fill="{one.colour}" stroke="{one.colour}">')
        for p in one.points:
            if not math.isfinite(p.value):
                continue
            samples = " ".join(_fmt(v) for v in p.raw)
            parts.append(
                f'<path class="point" tabindex="0" role="link" data-platform="{platform}" data-sha="{escape(p.sha)}" '
                f'data-position="{p.position}" data-value="{_fmt(p.value)}{escape(unit_suffix)}" '
                f'data-summary="{escape(p.summary)}" data-samples="{samples}" '
                f'aria-label="{platform} {escape(p.sha[:10])}: {_fmt(p.value)}{escape(unit_suffix)}" '
                f'd="{marker_path(one.marker, sx(p.position), sy(p.value))}"/>')
        parts.append("</g>")
    legend_x = LEFT + 8
    for one in series:
        parts.append(f'<g class="legend-entry" fill="{one.colour}" stroke="{one.colour}">'
                     f'<path d="{marker_path(one.marker, legend_x + 4, 14)}"/>'
                     f'<text x="{legend_x + 14}" y="18" stroke="none">{escape(one.platform)}</text></g>')
        legend_x += 14 + 9 * len(one.platform) + 24
    parts.append('<rect class="selection" x="0" y="0" width="0" height="0"/>')
    parts.append("</svg>")
    return Markup("".join(parts))
