"""Drifts and noise changes as the service reports them: a trend or random walk is one alert of
kind "drift" over its span with its total change (a regression only in the bad direction), level
changes recorded before the walk was recognised are withdrawn into it, and a change of noise
level is a "noise changed" alert that is never a regression. SQLite and PostgreSQL (`db`)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from sqlalchemy import func, select

from app.core.models import Alert, AlertChange, AlertState, CommitStatusUpdate
from app.detection.service import rescan, scan_dirty
from tests.detection.builder import METRIC, SUITE, Builder

N = 240


@pytest.fixture
def build(db):  # type: ignore[no-untyped-def]
    return Builder(db)


def trend(slope: float) -> list[float]:
    return [1000.0 * (1 + slope * i / N) for i in range(N)]


def walk(seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(1000.0 * (1 + np.cumsum(0.012 * rng.standard_normal(N))))


def noisier(seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(1000.0 * (1 + np.where(np.arange(N) < N // 2, 0.004, 0.03) * rng.standard_normal(N)))


def alerts(db) -> list[tuple[Alert, list[AlertChange]]]:  # type: ignore[no-untyped-def]
    with db.session() as session:
        rows = list(session.scalars(select(Alert).order_by(Alert.id)))
        return [(alert, sorted(alert.changes, key=lambda c: c.id)) for alert in rows]


def failures(db) -> int:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(CommitStatusUpdate)
                              .where(CommitStatusUpdate.state == "failure")) or 0


def series_url() -> str:
    return f"/api/v1/series?repository=demo/engine&suite={SUITE}&metric={METRIC}&platform=rocm"


def test_a_random_walk_is_one_drift_alert_over_its_span_with_the_total_change(build, db):
    shas = build.branch(N)
    build.history(shas, "rocm", walk(3), cv=0.003, seed=3)
    rescan(db)
    ((alert, (change,)),) = alerts(db)
    assert alert.kind == "drift"
    span = change.details["drift"]
    assert span["steps"] >= 2 and span["end_position"] - span["start_position"] > 50
    assert change.relative_change == pytest.approx((change.after_value - change.before_value) / change.before_value)
    assert span["total_change"] == pytest.approx(change.relative_change)
    assert change.is_regression == (change.relative_change < 0)


@pytest.mark.parametrize(("slope", "regression"), [(-0.25, True), (0.25, False)])
def test_a_drift_is_a_regression_only_in_the_bad_direction(build, db, settings, slope, regression):
    from app.core.config import use_settings
    shas = build.branch(N)
    build.history(shas, "rocm", trend(slope), cv=0.005, seed=4)
    with use_settings(replace(settings, github_token="t")):
        rescan(db)
    ((alert, (change,)),) = alerts(db)
    assert alert.kind == "drift" and change.is_regression is regression and alert.is_regression is regression
    assert change.relative_change == pytest.approx(slope * 0.8, abs=0.08)   # most of the line lies in the span
    assert failures(db) == 0     # a drift has no single culprit commit to fail


def test_a_level_change_that_turns_out_to_start_a_drift_is_withdrawn_into_the_drift_alert(build, db, settings):
    from app.core.config import use_settings
    shas = build.branch(205)
    levels = [1000.0] * 60 + [940.0] * 25 + list(940.0 * (1 - 0.004 * np.arange(1, 121)))
    with use_settings(replace(settings, github_token="t")):
        build.history(shas[:85], "rocm", levels[:85], cv=0.005, seed=7)
        scan_dirty(db)
        ((first, (step,)),) = alerts(db)
        assert first.kind == "performance" and step.details["bad_position"] == 60 and failures(db) == 1
        for start in range(85, 205, 40):
            build.history(shas[start:start + 40], "rocm", levels[start:start + 40], cv=0.005, seed=start)
            scan_dirty(db)
    *steps, (drift, (span,)) = alerts(db)
    assert drift.kind == "drift" and span.details["drift"]["start_position"] <= 60 and span.is_regression
    assert steps and steps[0][1][0].id == step.id
    for performance, rows in steps:      # the first step, and any a later scan saw before the walk was clear
        assert [row.details["withdrawn"] for row in rows] == [{"drift": span.id}]
        assert performance.state == AlertState.invalid and performance.updated_by == "detector"
        assert f"drift alert {drift.id}" in performance.note
    with db.session() as session:
        latest = session.scalars(select(CommitStatusUpdate).where(CommitStatusUpdate.sha == shas[60])
                                 .order_by(CommitStatusUpdate.id.desc())).first()
    assert latest is not None and latest.state == "success"


def test_a_change_of_noise_level_is_a_noise_alert_never_a_regression(build, db, settings, client):
    from app.core.config import use_settings
    shas = build.branch(N)
    build.history(shas, "rocm", noisier(5), cv=0.0005, seed=5)
    with use_settings(replace(settings, github_token="t")):
        rescan(db)
    ((alert, (change,)),) = alerts(db)
    assert alert.kind == "noise" and not alert.is_regression and not change.is_regression
    assert change.after_value > 3 * change.before_value
    assert abs(change.details["bad_position"] - N // 2) <= 10
    assert failures(db) == 0
    (listed,) = client.get("/api/v1/alerts").get_json()["alerts"]
    assert listed["kind"] == "noise" and listed["changes"][0]["noise_changed"]["ratio"] > 3


def test_rescanning_a_drift_and_a_noise_change_does_not_duplicate_them(build, db):
    shas = build.branch(N)
    build.history(shas, "rocm", walk(3), cv=0.003, seed=3)
    rescan(db)
    first = [(a.id, [c.id for c in rows]) for a, rows in alerts(db)]
    rescan(db)
    assert [(a.id, [c.id for c in rows]) for a, rows in alerts(db)] == first


def test_the_series_api_shows_drifts_and_noise_changes(build, db, client):
    shas = build.branch(N)
    build.history(shas, "rocm", noisier(6), cv=0.0005, seed=6)
    (series,) = client.get(series_url()).get_json()["series"]
    assert series["change_points"] == [] and series["drifts"] == []
    assert series["noise_changed"]["ratio"] > 3 and abs(series["noise_changed"]["position"] - N // 2) <= 10
