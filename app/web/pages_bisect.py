"""The bisect page: the range, the culprit with its effect and interval, the other platforms'
confirmation, every tested commit with its samples and verdict, each round's jobs. It shows what
`GET /api/v1/bisects/<id>` answers (`app.bisect.service.bisect_json`), so page and API agree."""
from __future__ import annotations

from flask import abort, current_app, render_template
from sqlalchemy import select

from app.bisect.service import bisect_json
from app.core.models import Bisect, Commit, Job, Repository
from app.explain.service import explain_bisect
from app.web.dash_common import median
from app.web.session import request_session


def bisect_page(bisect_id: int) -> str:
    session = request_session()
    bisect = session.get(Bisect, bisect_id)
    if bisect is None:
        abort(404, description=f"bisect {bisect_id} does not exist")
    ids = {bisect.good_commit_id, bisect.bad_commit_id} | ({bisect.culprit_commit_id} if bisect.culprit_commit_id else set())
    commits = {c.id: c for c in session.scalars(select(Commit).where(Commit.id.in_(ids)))}
    jobs = list(session.scalars(select(Job).where(Job.bisect_id == bisect.id).order_by(Job.id)))
    view = bisect_json(session, bisect)
    for stage in view["stages"]:
        for tested in stage["tested"]:
            tested["median"] = median(tested["samples"])
    explanation = explain_bisect(session, current_app.extensions["parallax.settings"], bisect)
    return render_template("bisect.html", bisect=bisect, repository=session.get(Repository, bisect.repository_id),
                           commits=commits, view=view, jobs=jobs, explanation=explanation)


def bisects_page() -> str:
    session = request_session()
    bisects = list(session.scalars(select(Bisect).order_by(Bisect.id.desc()).limit(100)))
    ids = {b.bad_commit_id for b in bisects} | {b.culprit_commit_id for b in bisects if b.culprit_commit_id}
    commits = {c.id: c for c in session.scalars(select(Commit).where(Commit.id.in_(ids)))} if ids else {}
    return render_template("bisects.html", bisects=bisects, commits=commits)
