"""The maintainers' dashboard: server-rendered pages over the same tables the API reads.

`/` (open alerts, fleet health, commit x platform matrix with deltas), `/series` (interactive
chart), `/commits/<sha>`, `/compare?repository=&a=&b=`, `/jobs/<id>`, `/alerts` (filters and
triage), `/alerts/<id>` (explanation, timelines), `/notifications` (the outbox),
`/bisects`, `/bisects/<id>`, `/runners`, `/deliveries`, `/signin`, `/signout`. The pages live in
`pages_*` modules; this one registers them and applies what holds for every page: reading is
public unless `dashboard_public` is off, every POST carries the session's CSRF token, and every
response carries a Content-Security-Policy of default-src 'self' (no inline script or style
anywhere; the chart's script and the stylesheet are served from here).
"""
from __future__ import annotations

from typing import Any

from flask import Blueprint, redirect, request, url_for
from werkzeug.wrappers import Response

from app.web import (
    pages_alerts,
    pages_bisect,
    pages_commit,
    pages_explain,
    pages_home,
    pages_notify,
    pages_operator,
    pages_pulls,
    pages_runners,
    pages_series,
)
from app.web.dash_common import FILTERS, PALETTE
from app.web.dash_signin import check_csrf, csrf_token, current_user, reading_allowed, signin_page, signout

bp = Blueprint("dashboard", __name__, template_folder="templates", static_folder="static",
               static_url_path="/static/dashboard")
CSP = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
PUBLIC_ENDPOINTS = {"dashboard.signin", "dashboard.static"}

for name, function in FILTERS.items():
    bp.add_app_template_filter(function, name)

bp.add_url_rule("/", "index", pages_home.index)
bp.record_once(pages_home.install_snapshot)
bp.add_url_rule("/series", "series_page", pages_series.series_page)
bp.add_url_rule("/series/chart", "series_chart", pages_series.series_chart)
bp.add_url_rule("/commits/<sha>", "commit_page", pages_commit.commit_page)
bp.add_url_rule("/compare", "compare_page", pages_commit.compare_page)
bp.add_url_rule("/jobs/<id:job_id>", "job_page", pages_commit.job_page)
bp.add_url_rule("/alerts", "alerts_page", pages_alerts.alerts_page)
bp.add_url_rule("/alerts/<id:alert_id>/triage", "triage", pages_alerts.triage, methods=["POST"])
bp.add_url_rule("/alerts/<id:alert_id>", "alert_page", pages_explain.alert_page)
bp.add_url_rule("/notifications", "notifications_page", pages_notify.notifications_page)
bp.add_url_rule("/bisects", "bisects_page", pages_bisect.bisects_page)
bp.add_url_rule("/bisects/<id:bisect_id>", "bisect_page", pages_bisect.bisect_page)
bp.add_url_rule("/runners", "runners_page", pages_runners.runners_page)
bp.add_url_rule("/deliveries", "deliveries_page", pages_operator.deliveries_page)
bp.add_url_rule("/deliveries/<key>/<action>", "delivery_action", pages_operator.delivery_action, methods=["POST"])
bp.add_url_rule("/bisects/<id:bisect_id>/cancel", "cancel_bisect", pages_operator.cancel_bisect, methods=["POST"])
bp.add_url_rule("/jobs/<id:job_id>/cancel", "cancel_job", pages_operator.cancel_job, methods=["POST"])
bp.add_url_rule("/pulls/<id:number>", "pull_page", pages_pulls.pull_page)
bp.add_url_rule("/signin", "signin", signin_page, methods=["GET", "POST"])
bp.add_url_rule("/signout", "signout", signout, methods=["POST"])


@bp.before_request
def _guard() -> Response | None:
    if request.method == "POST":
        check_csrf()
    if request.endpoint not in PUBLIC_ENDPOINTS and not reading_allowed():
        return redirect(url_for("dashboard.signin", next=request.full_path.rstrip("?")))
    return None


@bp.after_request
def _content_security_policy(response: Response) -> Response:
    # Set here for the dashboard's own pages; an app-wide security-headers layer may set it too.
    response.headers.setdefault("Content-Security-Policy", CSP)
    return response


@bp.app_context_processor
def _helpers() -> dict[str, Any]:
    def series_url(repository: Any, suite: str, metric: str, branch: str | None = None) -> str:
        return url_for("dashboard.series_page", repository=repository.name, suite=suite, metric=metric,
                       branch=branch or repository.default_branch)
    return {"series_url": series_url, "csrf_token": csrf_token, "current_user": current_user, "palette": PALETTE}
