"""A stream timeline (app.explain.timeline) drawn as plain SVG on the server: one lane per
stream, the host on top, each span a rectangle over a few steady-state steps; waits (a stream
waiting for another, the host synchronising) drawn in the highlight colour. No inline style
(the dashboard's Content-Security-Policy is default-src 'self'); the classes are in style.css."""
from __future__ import annotations

from markupsafe import Markup, escape

from app.explain.timeline import Timeline

WIDTH, LANE_H, LEFT, TOP, BOTTOM = 960, 26, 90, 8, 22
MIN_WIDTH = 0.6  # px: a span shorter than this is still drawn, or kernels vanish


def render(timeline: Timeline, label: str) -> Markup:
    start, end = timeline.window()
    scale = (WIDTH - LEFT - 10) / max(end - start, 1e-9)
    height = TOP + LANE_H * len(timeline.lanes) + BOTTOM
    parts = [f'<svg class="timeline" role="img" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
             f'aria-label="{escape(label)}" data-lanes="{escape(",".join(timeline.lanes))}">']
    for i, lane in enumerate(timeline.lanes):
        y = TOP + i * LANE_H
        parts.append(f'<text class="lane-name" x="4" y="{y + LANE_H * 0.65:.1f}">{escape(lane)}</text>')
        parts.append(f'<line class="lane-rule" x1="{LEFT}" x2="{WIDTH - 10}" y1="{y + LANE_H - 2}" y2="{y + LANE_H - 2}"/>')
        for span in timeline.on(lane):
            if span.end_us < start or span.start_us > end:
                continue
            x0 = LEFT + (max(span.start_us, start) - start) * scale
            x1 = LEFT + (min(span.end_us, end) - start) * scale
            css = "span-wait" if span.is_wait else "span-work"
            parts.append(f'<rect class="{css}" x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, MIN_WIDTH):.1f}" '
                         f'height="{LANE_H - 8}"><title>{escape(span.name)} '
                         f'({span.end_us - span.start_us:.1f} µs)</title></rect>')
    axis_y = TOP + LANE_H * len(timeline.lanes) + 14
    parts.append(f'<text class="axis" x="{LEFT}" y="{axis_y}">0 µs</text>')
    parts.append(f'<text class="axis" x="{WIDTH - 10}" y="{axis_y}" text-anchor="end">{end - start:.0f} µs '
                 '(three steady-state steps)</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
