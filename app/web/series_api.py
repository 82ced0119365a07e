"""Read API for series and alerts, and alert triage (DESIGN.md paths).

GET /api/v1/series?repository=&suite=&metric=&platform=&branch=   points + change points (answers kept in
                                                                   memory until the data changes:
                                                                   app/web/series_cache.py)
GET /api/v1/alerts?state=&platform=&repository=                    alert groups with their changes
GET /api/v1/alerts/<id>                                            one alert with its `explanation`
PATCH /api/v1/alerts/<id> {state, note}                            admin token
"""
from __future__ import annotations

import math
from typing import Any

from flask import Blueprint, current_app, jsonify, request
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core import limits
from app.core.clock import utcnow
from app.core.errors import Invalid, NotFound
from app.core.limits import free_text
from app.core.models import Alert, AlertChange, AlertState, Commit, Repository, Run
from app.detection.detector import DetectorConfig, analyse
from app.detection.documents import alert_json
from app.detection.series import Series, SeriesKey, load_series
from app.detection.service import config_for, json_safe, noise_floors
from app.explain.service import explain_alert
from app.web.auth import require_maintainer
from app.web.bodies import json_body, settings
from app.web.series_cache import SeriesCache, SeriesRequest, read_stamp
from app.web.session import request_session

bp = Blueprint("series_api", __name__)
STATES = [state.value for state in AlertState]


def _required(name: str) -> str:
    value = request.args.get(name, "").strip()
    if not value:
        raise Invalid(f"{name}: required query parameter", extra={"field": name})
    return value


def _repository(session, name: str) -> Repository:  # type: ignore[no-untyped-def]
    repository = session.scalar(select(Repository).where(Repository.name == name))
    if repository is None:
        raise NotFound(f"unknown repository {name!r}")
    return repository


def summary_json(samples: list[float]) -> dict[str, Any]:
    """n, median, mean, stdev, min, max. Computed on samples scaled by their largest magnitude, so
    that the mean of huge samples does not overflow; a statistic that still does not fit a
    double (the stdev of +-1.7e308) is null, since JSON has no infinity. Plain Python, not numpy:
    a point holds a handful of samples, and numpy's per-call overhead made 5,000 points cost
    0.7 s (bench/history_scale.py)."""
    n = len(samples)
    if not n:
        return {"n": 0}
    values = sorted(float(v) for v in samples)
    scale = max(abs(values[0]), abs(values[-1])) or 1.0
    scaled = [v / scale for v in values]
    middle = n // 2
    median_scaled = scaled[middle] if n % 2 else (scaled[middle - 1] + scaled[middle]) / 2
    mean_scaled = sum(scaled) / n
    stdev = math.sqrt(sum((x - mean_scaled) ** 2 for x in scaled) / (n - 1)) * scale if n > 1 else 0.0
    summary = {"median": median_scaled * scale, "mean": mean_scaled * scale, "stdev": stdev,
               "min": values[0], "max": values[-1]}
    return {"n": n, **json_safe(summary)}


def _point_json(point: Any) -> dict[str, Any]:
    summary = summary_json(point.samples)
    return {"commit": point.sha, "position": point.position, "runs": point.run_ids, "samples": point.samples,
            "summary": summary}


def series_json(series: Series, context: dict[str, Any] | None, config: DetectorConfig) -> dict[str, Any]:
    """The series with what the detector finds in it (`config`: the metric's and the suite's
    noise floor on the platform, as the service's scan uses)."""
    analysis = analyse([p.samples for p in series.points], [p.position for p in series.points], config)
    changes, points, noise = analysis.changes, series.points, analysis.noise
    return {
        "context_fingerprint": series.key.context_fingerprint, "context": context,
        "direction": series.direction, "unit": series.unit, "ordered_by": series.ordered_by,
        "points": [_point_json(p) for p in series.points],
        "change_points": [json_safe({"index": c.index, "good": series.points[c.index - 1].sha,
                           "bad": series.points[c.index].sha, "good_position": c.good_position,
                           "bad_position": c.bad_position, "before": c.before, "after": c.after,
                           "relative_change": c.relative_change, "ci": [c.ci_low, c.ci_high],
                           "p_value": c.p_value}) for c in changes],
        "drifts": [json_safe({"start": points[d.start].sha, "end": points[d.end].sha,
                              "start_position": points[d.start].position, "end_position": points[d.end].position,
                              "before": d.before, "after": d.after, "relative_change": d.relative_change,
                              "steps": d.steps}) for d in analysis.drifts],
        "noise_changed": None if noise is None else json_safe({
            "at": points[noise.index].sha, "position": points[noise.index].position,
            "sigma_before": noise.sigma_before, "sigma_after": noise.sigma_after, "ratio": noise.ratio,
            "p_value": noise.p_value}),
        "seasonal_period": analysis.period,
    }


@bp.get("/api/v1/series")
def get_series():  # type: ignore[no-untyped-def]
    session = request_session()
    repository = _repository(session, _required("repository"))
    suite, metric, platform = _required("suite"), _required("metric"), _required("platform")
    branch = request.args.get("branch", "").strip() or repository.default_branch
    wanted = request.args.get("context_fingerprint", "").strip() or None
    # `last=N`: only the newest N commits of the branch (a years-long history is 50,000 points).
    last = request.args.get("last", "").strip()
    window = limits.integer(int(last) if last.isdigit() and len(last) < 10 else last, "last", minimum=1) if last else None
    # The stamp before any data (app/web/series_cache.py): the epoch came with the repository row.
    cache: SeriesCache = current_app.extensions["parallax.series_cache"]
    key = SeriesRequest(repository.id, repository.name, branch, suite, metric, platform, wanted, window)
    stamp = read_stamp(session, repository.series_epoch, platform)
    body = cache.get(key, stamp)
    if body is None:
        response = jsonify(_series_answer(session, repository, key))
        cache.put(key, stamp, response.get_data())
        return response
    return current_app.response_class(body, mimetype=current_app.json.mimetype)  # type: ignore[attr-defined]


def _series_answer(session: Session, repository: Repository, key: SeriesRequest) -> dict[str, Any]:
    """Every series of the request, one per context fingerprint, read and analysed."""
    branch, suite, metric, platform = key.branch, key.suite, key.metric, key.platform
    # The newest context of each fingerprint: one row per fingerprint, not every run's document.
    newest = (select(func.max(Run.id)).join(Commit, Commit.id == Run.commit_id)
              .where(Commit.repository_id == repository.id, Run.platform == platform)
              .group_by(Run.context_fingerprint))
    contexts: dict[str, dict[str, Any]] = dict(
        session.execute(select(Run.context_fingerprint, Run.context).where(Run.id.in_(newest))).all())
    if key.context_fingerprint is not None:
        contexts = {k: v for k, v in contexts.items() if k == key.context_fingerprint}
    result = []
    config = config_for(metric, noise_floors(session, suite).get(platform, 0.0))
    for fingerprint, context in sorted(contexts.items()):
        series = load_series(session, SeriesKey(repository.id, branch, suite, metric, platform, fingerprint),
                             last=key.last)
        if series.points:
            result.append(series_json(series, context, config))
    return {"repository": repository.name, "branch": branch, "suite": suite, "metric": metric,
            "platform": platform, "series": result}


@bp.get("/api/v1/alerts")
def list_alerts():  # type: ignore[no-untyped-def]
    session = request_session()
    query = select(Alert).order_by(Alert.id.desc()).limit(500)
    state = request.args.get("state", "").strip()
    if state:
        if state not in STATES:
            raise Invalid(f"state: must be one of {', '.join(STATES)}, got {state!r}", extra={"field": "state"})
        query = query.where(Alert.state == AlertState(state))
    platform = request.args.get("platform", "").strip()
    if platform:
        query = query.where(Alert.id.in_(select(AlertChange.alert_id).where(AlertChange.platform == platform)))
    repository = request.args.get("repository", "").strip()
    if repository:
        query = query.where(Alert.repository_id == _repository(session, repository).id)
    return jsonify({"alerts": [alert_json(session, a) for a in session.scalars(query)]})


@bp.get("/api/v1/alerts/<id:alert_id>")
def get_alert(alert_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    alert = session.get(Alert, alert_id)
    if alert is None:
        raise NotFound(f"alert {alert_id} does not exist")
    return jsonify({**alert_json(session, alert), "explanation": explain_alert(session, settings(), alert)})


@bp.patch("/api/v1/alerts/<id:alert_id>")
def update_alert(alert_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    actor = require_maintainer(session)
    body = json_body()
    alert = session.get(Alert, alert_id)
    if alert is None:
        raise NotFound(f"alert {alert_id} does not exist")
    unknown = sorted(set(body) - {"state", "note"})
    if unknown:
        raise Invalid(f"{unknown[0]}: unknown field (allowed: state, note)", extra={"field": unknown[0]})
    if "state" not in body and "note" not in body:
        raise Invalid("state: give a new state and/or a note", extra={"field": "state"})
    state = body.get("state")
    if "state" in body and (not isinstance(state, str) or state not in STATES):
        raise Invalid(f"state: must be one of {', '.join(STATES)}, got {state!r}", extra={"field": "state"})
    note = body.get("note")
    if "note" in body and note is not None and not isinstance(note, str):
        raise Invalid("note: must be a string or null", extra={"field": "note"})
    if "state" in body:
        alert.state = AlertState(state)
    if "note" in body:
        alert.note = None if note is None else free_text(note)
    alert.updated_by = actor
    alert.updated_at = utcnow()
    session.commit()
    return jsonify(alert_json(session, alert))
