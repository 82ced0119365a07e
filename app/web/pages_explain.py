"""One alert's page (`/alerts/<id>`): its changes, what changed at the culprit (the
`explanation` of GET /api/v1/alerts/<id>), and the stream timelines of the last good and the
culprit commit one above the other, with their idle share per decode step and download links
(Perfetto opens them), and whether its good and bad commits reproduced it when measured again."""
from __future__ import annotations

from typing import Any

from flask import abort, current_app, render_template
from sqlalchemy import select

from app.core.models import Alert, Bisect, Commit, JobArtifact, Repository, Reproduction
from app.explain.service import explain_alert
from app.explain.timeline import TraceError, read_trace
from app.web import timeline_svg
from app.web.session import request_session


def _drawing(session: Any, entry: dict[str, Any] | None, label: str) -> dict[str, Any] | None:
    if not entry:
        return None
    row = session.scalar(select(JobArtifact).where(JobArtifact.job_id == entry["job_id"],
                                                   JobArtifact.attempt == entry["attempt"],
                                                   JobArtifact.name == entry["name"]))
    if row is None:
        return None
    try:
        svg = timeline_svg.render(read_trace(row.data), label)
    except TraceError as exc:
        return {**entry, "svg": None, "error": str(exc)}
    return {**entry, "svg": svg}


def alert_page(alert_id: int) -> str:
    session = request_session()
    alert = session.get(Alert, alert_id)
    if alert is None:
        abort(404, description=f"alert {alert_id} does not exist")
    settings = current_app.extensions["parallax.settings"]
    explanation = explain_alert(session, settings, alert)
    timelines = (explanation or {}).get("timelines") or {}
    drawings: dict[str, dict[str, Any] | None] = {"good": None, "culprit": None}
    if explanation is not None:
        for which in drawings:
            label = f"{timelines.get('platform')} timeline at {which} {(explanation[which] or '')[:10]}"
            drawings[which] = _drawing(session, timelines.get(which), label)
    ids = {alert.bad_commit_id} | ({alert.good_commit_id} if alert.good_commit_id else set())
    commits = {c.id: c for c in session.scalars(select(Commit).where(Commit.id.in_(ids)))}
    bisects = list(session.scalars(select(Bisect).where(Bisect.alert_id == alert.id).order_by(Bisect.id)))
    reproductions = list(session.scalars(select(Reproduction).where(Reproduction.alert_id == alert.id)
                                         .order_by(Reproduction.id)))
    return render_template("alert.html", alert=alert, repository=session.get(Repository, alert.repository_id),
                           commits=commits, bisects=bisects, reproductions=reproductions,
                           explanation=explanation, drawings=drawings,
                           changes=sorted(alert.changes, key=lambda c: c.id))
