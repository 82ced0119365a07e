"""Alerts: filters (state, platform, classification, suite, kind), triage from the page (a new
state, a note, a linked issue URL; recorded with the signed-in user's name), and the bisect
behind each alert."""
from __future__ import annotations

from urllib.parse import urlsplit

from flask import abort, redirect, render_template, request, url_for
from sqlalchemy import select
from werkzeug.wrappers import Response

from app.core.clock import utcnow
from app.core.models import Alert, AlertChange, AlertState, Bisect, Commit
from app.web.dash_common import OPEN_STATES, arg_choice
from app.web.dash_signin import current_user, require_user
from app.web.session import request_session

STATES = [s.value for s in AlertState]
STATE_FILTERS = ["open", "all", *STATES]
CLASSIFICATIONS = ["platform_specific", "common", "inconclusive"]
KINDS = ["performance", "accuracy", "correctness"]
TRIAGE_ACTIONS = {"acknowledged": "Acknowledge", "invalid": "Invalid", "wont_fix": "Won't fix", "fixed": "Fixed"}


def alerts_page() -> str:
    session = request_session()
    state = arg_choice("state", STATE_FILTERS, "open")
    classification = arg_choice("classification", CLASSIFICATIONS)
    kind = arg_choice("kind", KINDS)
    platform = request.args.get("platform", "").strip()
    suite = request.args.get("suite", "").strip()
    query = select(Alert).order_by(Alert.id.desc()).limit(200)
    if state == "open":
        query = query.where(Alert.state.in_(OPEN_STATES))
    elif state != "all":
        query = query.where(Alert.state == AlertState(state))
    if kind:
        query = query.where(Alert.kind == kind)
    change_filter = select(AlertChange.alert_id)
    if platform:
        change_filter = change_filter.where(AlertChange.platform == platform)
    if suite:
        change_filter = change_filter.where(AlertChange.suite == suite)
    if classification:
        change_filter = change_filter.where(AlertChange.classification == classification)
    if platform or suite or classification:
        query = query.where(Alert.id.in_(change_filter))
    alerts = list(session.scalars(query))
    ids = {a.bad_commit_id for a in alerts} | {a.good_commit_id for a in alerts if a.good_commit_id}
    commits = {c.id: c for c in session.scalars(select(Commit).where(Commit.id.in_(ids)))} if ids else {}
    bisects: dict[int, list[Bisect]] = {}
    if alerts:
        for bisect in session.scalars(select(Bisect).where(Bisect.alert_id.in_([a.id for a in alerts]))
                                      .order_by(Bisect.id)):
            bisects.setdefault(bisect.alert_id or 0, []).append(bisect)
    platforms = sorted(set(session.scalars(select(AlertChange.platform).distinct())))
    suites = sorted(set(session.scalars(select(AlertChange.suite).distinct())))
    return render_template("alerts.html", alerts=alerts, commits=commits, bisects=bisects, state=state,
                           states=STATE_FILTERS, classification=classification, classifications=CLASSIFICATIONS,
                           kind=kind, kinds=KINDS, platform=platform, platforms=platforms, suite=suite, suites=suites,
                           actions=TRIAGE_ACTIONS, user=current_user())


def valid_issue_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.netloc or len(value) > 1000:
        abort(400, description=f"issue_url: must be an http(s) URL of at most 1000 characters, got {value[:80]!r}")
    return value


def triage(alert_id: int) -> Response:
    session = request_session()
    user = require_user()
    alert = session.get(Alert, alert_id)
    if alert is None:
        abort(404, description=f"alert {alert_id} does not exist")
    state = request.form.get("state", "").strip()
    if state and state not in STATES:
        abort(400, description=f"state: must be one of {', '.join(STATES)}, got {state!r}")
    note = request.form.get("note", "").strip()
    issue_url = request.form.get("issue_url", "").strip()
    if not (state or note or issue_url):
        abort(400, description="nothing to record: choose a state, or give a note or an issue URL")
    if issue_url:
        alert.issue_url = valid_issue_url(issue_url)
    if state:
        alert.state = AlertState(state)
    if note:
        alert.note = note
    alert.updated_by = user.name
    alert.updated_at = utcnow()
    session.commit()
    return redirect(request.form.get("back") if _local(request.form.get("back", "")) else
                    url_for("dashboard.alerts_page", state="all") + f"#alert-{alert.id}", code=303)


def _local(url: str) -> bool:
    return url.startswith("/") and not url.startswith("//")
