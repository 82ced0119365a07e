"""Home: open alerts first (one-platform regressions before common ones), fleet health in one
line, then per repository the default branch's newest commits x (suite, platform), each cell
showing the headline metric's change from the previous measured commit, coloured by the
detector's verdict."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from flask import current_app, render_template
from flask.blueprints import BlueprintSetupState
from markupsafe import Markup
from sqlalchemy import ColumnElement, and_, case, func, select
from sqlalchemy.orm import Session

from app.core.clock import as_utc, utcnow
from app.core.models import Alert, AlertChange, Commit, Job, JobState, Repository, Runner, Suite
from app.detection.detector import DEFAULT_CONFIG
from app.github.deliveries import counts as delivery_counts
from app.jobs.queue import queue_depth
from app.pulls.view import open_pulls
from app.web.dash_common import OPEN_STATES, Thresholds, median, relative, verdict_of
from app.web.dash_queries import group_by_series, headline_metrics, positions, previous_samples, readings, recent_commits
from app.web.session import request_session
from app.web.snapshot import Snapshot

log = logging.getLogger(__name__)

RECENT_COMMITS = 30
SNAPSHOT = "parallax.home_snapshot"


@dataclass
class Cell:
    state: str                      # newest job's state ("none" when no job)
    job_id: int | None = None
    metric: str | None = None
    unit: str | None = None
    value: float | None = None
    change: float | None = None
    verdict: str = "pending"        # regression / improvement / unchanged / *-unconfirmed / pending / failed
    alert_id: int | None = None


@dataclass
class Fleet:
    online: dict[str, int]
    registered: dict[str, int]
    depth: dict[str, int]
    oldest_queued: Any


def alert_priority(alert: Alert) -> tuple[int, int, int]:
    """New before acknowledged, one-platform regressions before common ones, newest first."""
    one_platform = any(c.classification == "platform_specific" for c in alert.changes)
    return (0 if alert.state.value == "new" else 1, 0 if one_platform else 1, -alert.id)


def open_alerts(session: Session, limit: int = 20) -> list[Alert]:
    alerts = list(session.scalars(select(Alert).where(Alert.state.in_(OPEN_STATES), Alert.is_regression.is_(True))
                                  .order_by(Alert.id.desc()).limit(200)))
    return sorted(alerts, key=alert_priority)[:limit]


def runner_online() -> ColumnElement[bool]:
    """A runner is online when it is enabled and was seen within one lease (SQL, for a query)."""
    cutoff = utcnow() - timedelta(seconds=current_app.extensions["parallax.settings"].lease_s)
    return and_(Runner.disabled.is_(False), Runner.last_seen_at >= cutoff)


def fleet(session: Session) -> Fleet:
    """Counted by the database: a fleet of hundreds of runners is one row per platform here."""
    is_online = case((runner_online(), 1), else_=0)
    online: dict[str, int] = {}
    registered: dict[str, int] = {}
    for platform, count, live in session.execute(
            select(Runner.platform, func.count(), func.sum(is_online)).group_by(Runner.platform)):
        registered[platform] = count
        if live:
            online[platform] = int(live)
    oldest = session.scalar(select(func.min(Job.created_at)).where(Job.state == JobState.queued))
    return Fleet(online=online, registered=registered, depth=queue_depth(session), oldest_queued=as_utc(oldest))


def matrix(session: Session, commits: list[Commit], branch: int | None
           ) -> tuple[list[tuple[str, str]], dict[tuple[int, str, str], Cell]]:
    ids = [c.id for c in commits]
    cells: dict[tuple[int, str, str], Cell] = {}
    columns: set[tuple[str, str]] = set()
    if not ids:
        return [], cells
    for job_id, commit_id, suite, platform, state in session.execute(
            select(Job.id, Job.commit_id, Suite.name, Job.platform, Job.state)
            .join(Suite, Suite.id == Job.suite_id).where(Job.commit_id.in_(ids)).order_by(Job.id)):
        columns.add((suite, platform))
        cells[(commit_id, suite, platform)] = Cell(state=state.value, job_id=job_id,
                                                   verdict="failed" if state == JobState.failed else "pending")
    found = readings(session, ids)
    headline = headline_metrics(found)
    order = {c.id: i for i, c in enumerate(commits)}       # 0 = newest
    where = positions(session, branch, ids)
    verdicts: dict[tuple[int, str, str, str], tuple[bool, int]] = {}
    threshold = Thresholds(session)
    for commit_id, suite, platform, metric, is_regression, alert_id in session.execute(
            select(Alert.bad_commit_id, AlertChange.suite, AlertChange.platform, AlertChange.metric,
                   AlertChange.is_regression, Alert.id)
            .join(AlertChange, AlertChange.alert_id == Alert.id)
            .where(Alert.bad_commit_id.in_(ids), Alert.state.in_(OPEN_STATES))):
        key = (commit_id, suite, platform, metric)
        if key not in verdicts or is_regression:
            verdicts[key] = (is_regression, alert_id)
    for (suite, platform, _fingerprint, metric), series in group_by_series(found).items():
        if headline.get(suite) != metric:
            continue
        series.sort(key=lambda r: order[r.commit_id], reverse=True)   # oldest first
        before: list[float] = []
        if series:
            before, _ = previous_samples(session, branch, series[0], where.get(series[0].commit_id))
        for reading in series:
            value = median(reading.samples)
            cell = cells.setdefault((reading.commit_id, suite, platform), Cell(state="none"))
            columns.add((suite, platform))
            if cell.metric is not None:
                before = reading.samples
                continue                                          # a second fingerprint: keep the first
            cell.metric, cell.value, cell.unit = metric, value, reading.unit
            cell.change = relative(value, median(before))
            flagged = verdicts.get((reading.commit_id, suite, platform, metric))
            if flagged is None:
                flagged = next((v for k, v in verdicts.items() if k[:3] == (reading.commit_id, suite, platform)), None)
            cell.alert_id = flagged[1] if flagged else None
            cell.verdict = verdict_of(flagged[0] if flagged else None, cell.change, reading.direction,
                                      threshold(suite, platform, metric))
            before = reading.samples
    return sorted(columns), cells


def index() -> str:
    """The page around a per-process snapshot of its content (`app.web.snapshot`): the content
    is the same for everyone, and rendering it is a dozen queries, which under a fleet's load
    is the dashboard's tail. `PARALLAX_HOME_MAX_AGE_S` 0 renders it on every request."""
    max_age_s = current_app.extensions["parallax.settings"].home_max_age_s
    snapshot: Snapshot = current_app.extensions[SNAPSHOT]
    rendered = snapshot.get(_content, max_age_s)
    as_of = datetime.fromtimestamp(rendered.rendered_at, timezone.utc).strftime("%H:%M:%S UTC")
    catalogue = current_app.extensions["parallax.catalogue_check"].state(request_session())
    return render_template("index.html", body=Markup(rendered.html), as_of=as_of, max_age_s=max_age_s,
                           catalogue=catalogue)


def install_snapshot(state: BlueprintSetupState) -> None:
    """One home-page snapshot per application, made when the dashboard is registered."""
    state.app.extensions[SNAPSHOT] = Snapshot(_log_failed_refresh)


def _log_failed_refresh(exc: BaseException) -> None:
    log.error("home page refresh failed; serving the previous one", exc_info=exc)


def _content() -> str:
    session = request_session()
    repositories = []
    for repository in session.scalars(select(Repository).order_by(Repository.name)):
        commits, branch = recent_commits(session, repository, RECENT_COMMITS)
        columns, cells = matrix(session, commits, branch)
        ordered = f"{repository.default_branch} (first-parent history)" if branch is not None else "most recently queued"
        headers = {(suite, platform): (cell.metric, cell.unit) for (_, suite, platform), cell in cells.items()
                   if cell.metric is not None}
        repositories.append({"repo": repository, "commits": commits, "ordered": ordered, "columns": columns,
                             "cells": cells, "headers": headers})
    return render_template("home_body.html", repositories=repositories, alerts=open_alerts(session),
                           fleet=fleet(session), deliveries=delivery_counts(session), pulls=open_pulls(session),
                           min_change=f"{DEFAULT_CONFIG.min_relative:.0%}", min_points=DEFAULT_CONFIG.min_points)
