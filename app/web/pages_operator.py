"""The operator's pages and buttons: `/deliveries` (webhook deliveries with their errors, retry
and skip; signed-in users only) and the cancel buttons of the bisect and job pages. Each button is a signed-in user's
POST (CSRF-checked by the dashboard) calling the same area function as the API and the CLI."""
from __future__ import annotations

from flask import abort, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from app.bisect import service as bisects
from app.core.errors import APIError
from app.core.models import Job
from app.github import deliveries
from app.jobs import queue
from app.web.dash_signin import current_user, require_user
from app.web.session import request_session

PAGE = 100


def deliveries_page() -> str | Response:
    """Signed-in users only, like `GET /api/v1/deliveries`: errors name repository URLs and paths."""
    if current_user() is None:
        return redirect(url_for("dashboard.signin", next=request.full_path.rstrip("?")))
    session = request_session()
    state = request.args.get("state") or None
    if state is not None and state not in deliveries.STATES:
        abort(400, description=f"state: must be one of {', '.join(deliveries.STATES)}, got {state[:40]!r}")
    before = request.args.get("before")
    before_id = int(before) if before and before.isdigit() and len(before) < 10 else None
    rows = [deliveries.delivery_json(d) for d in
            deliveries.list_deliveries(session, state=state, limit=PAGE, before_id=before_id)]
    return render_template("deliveries.html", rows=rows, counts=deliveries.counts(session), state=state,
                           states=deliveries.STATES, user=current_user(),
                           next_before=rows[-1]["id"] if len(rows) == PAGE else None)


def delivery_action(key: str, action: str) -> Response:
    session = request_session()
    user = require_user()
    try:
        if action == "retry":
            deliveries.retry(session, key)
        elif action == "skip":
            deliveries.skip(session, key, user.name)
        else:
            abort(404)
    except APIError as exc:
        abort(exc.status, description=exc.detail)
    session.commit()
    return redirect(url_for("dashboard.deliveries_page"), code=303)


def cancel_bisect(bisect_id: int) -> Response:
    session = request_session()
    user = require_user()
    try:
        bisects.cancel(session, bisect_id, user.name)
    except APIError as exc:
        abort(exc.status, description=exc.detail)
    session.commit()
    return redirect(url_for("dashboard.bisect_page", bisect_id=bisect_id), code=303)


def cancel_job(job_id: int) -> Response:
    session = request_session()
    require_user()
    job = session.get(Job, job_id)
    if job is None:
        abort(404, description=f"job {job_id} does not exist")
    queue.request_cancel(session, job)
    session.commit()
    return redirect(url_for("dashboard.job_page", job_id=job_id), code=303)
