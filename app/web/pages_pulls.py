"""The pull request page: `/pulls/<number>?repository=` shows what the API answers (the
verdict table and scopes), the A/B samples per platform as a chart, and every job."""
from __future__ import annotations

from typing import Any

from flask import abort, render_template
from markupsafe import Markup, escape

from app.core.errors import NotFound
from app.pulls import comparisons
from app.pulls.view import ab_samples, find, pull_json
from app.web.dash_common import PALETTE, arg_required
from app.web.session import request_session

WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 220, 64, 12, 24, 34
SIDE_COLOUR = {"base": PALETTE[0], "head": PALETTE[1]}


def ab_chart(title: str, points: list[dict[str, Any]]) -> Markup:
    """One platform x suite x metric: each job's samples (faint) and median (marker) in claim
    order, base and head in their own colours."""
    values = [v for p in points for v in p["samples"]] or [0.0]
    low, high = min(values), max(values)
    if high == low:
        low, high = low - 1.0, high + 1.0
    pad = (high - low) * 0.08
    low, high = low - pad, high + pad
    n = max(len(points), 1)

    def sx(i: int) -> float:
        return LEFT + (i + 0.5) * (WIDTH - LEFT - RIGHT) / n

    def sy(v: float) -> float:
        return TOP + (high - v) * (HEIGHT - TOP - BOTTOM) / (high - low)

    parts = [f'<svg class="ab-chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
             f'<text x="{LEFT}" y="16" class="chart-title">{escape(title)}</text>',
             f'<line x1="{LEFT}" y1="{HEIGHT - BOTTOM}" x2="{WIDTH - RIGHT}" y2="{HEIGHT - BOTTOM}" stroke="#888"/>',
             f'<text x="4" y="{sy(high - pad):.1f}" font-size="11">{high - pad:.4g}</text>',
             f'<text x="4" y="{sy(low + pad):.1f}" font-size="11">{low + pad:.4g}</text>']
    for i, point in enumerate(points):
        colour = SIDE_COLOUR[point["side"]]
        for value in point["samples"]:
            parts.append(f'<circle cx="{sx(i):.1f}" cy="{sy(value):.1f}" r="2" fill="{colour}" opacity="0.35"/>')
        if point["median"] is not None:
            shape = (f'<rect x="{sx(i) - 5:.1f}" y="{sy(point["median"]) - 5:.1f}" width="10" height="10"'
                     if point["side"] == "head" else f'<circle cx="{sx(i):.1f}" cy="{sy(point["median"]):.1f}" r="5"')
            parts.append(f'{shape} fill="{colour}" data-job="{point["job_id"]}"><title>{point["side"]} round '
                         f'{point["round"]}, job {point["job_id"]}: median {point["median"]:.4g}</title>'
                         f'{"</rect>" if point["side"] == "head" else "</circle>"}')
        parts.append(f'<text x="{sx(i):.1f}" y="{HEIGHT - 18}" font-size="10" text-anchor="middle">'
                     f'{point["side"][0]}{point["round"]}</text>')
    parts.append(f'<text x="{LEFT}" y="{HEIGHT - 4}" font-size="11">● base  ■ head, in claim order (b1 = base round 1)</text>')
    parts.append("</svg>")
    return Markup("".join(parts))


def pull_page(number: int) -> str:
    session = request_session()
    name = arg_required("repository", "the pull request's repository, owner/name")
    try:
        repository, pull = find(session, name, number)
    except NotFound as exc:
        abort(404, description=str(exc))
    view = pull_json(session, repository, pull)
    current = comparisons.latest(session, pull.id)
    charts = []
    if current is not None:
        for (platform, suite, metric), points in sorted(ab_samples(session, current).items()):
            charts.append(ab_chart(f"{platform} · {suite} · {metric}", points))
    return render_template("pull.html", view=view, charts=charts)
