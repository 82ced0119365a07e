"""The maintainers' dashboard: server-rendered pages over the same tables the API reads.

`/` (recent commits x suite x platform, open alerts, runners, queue), `/commits/<sha>` (jobs,
per-platform metrics with the change from the previous measured commit), `/jobs/<id>` (log),
`/series` (a plot of one metric on every platform, relative to each platform's own level, with
the detector's change points), `/alerts`.
"""
from __future__ import annotations

import io
import statistics
from dataclasses import dataclass
from typing import Any

import matplotlib
from flask import Blueprint, abort, render_template, request, url_for
from markupsafe import Markup
from sqlalchemy import func, select

from app.core.clock import as_utc
from app.core.models import (
    Alert,
    AlertChange,
    AlertState,
    Branch,
    BranchCommit,
    Commit,
    Job,
    JobLog,
    JobState,
    Repository,
    Run,
    Runner,
    Suite,
)
from app.detection.detector import DEFAULT_CONFIG, detect
from app.detection.series import Series, SeriesKey, branch_positions, load_series
from app.jobs.queue import queue_depth
from app.web.session import request_session

matplotlib.use("Agg")  # before pyplot is imported: no display here, pages get SVG
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: searchable, and a tenth of the size
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

bp = Blueprint("dashboard", __name__, template_folder="templates", static_folder="static",
               static_url_path="/static/dashboard")
RECENT_COMMITS = 30
OPEN_STATES = (AlertState.new, AlertState.acknowledged)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


@bp.app_template_filter("short")
def short_sha(sha: str) -> str:
    return sha[:10]


@bp.app_template_filter("pct")
def percent(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f}%"


@bp.app_template_filter("num")
def number(value: float | None) -> str:
    if value is None:
        return "–"
    magnitude = abs(value)
    return f"{value:,.0f}" if magnitude >= 1000 else f"{value:.3g}" if magnitude < 1 else f"{value:.2f}"


@bp.app_template_filter("when")
def when(value: Any) -> str:
    value = as_utc(value)
    return value.strftime("%Y-%m-%d %H:%M UTC") if value else "never"


def recent_commits(session, repository: Repository, limit: int = RECENT_COMMITS) -> tuple[list[Commit], str]:  # type: ignore[no-untyped-def]
    """The default branch's newest commits in first-parent order, or (without branch history)
    the commits with the newest jobs."""
    branch = session.scalar(select(Branch).where(Branch.repository_id == repository.id,
                                                 Branch.name == repository.default_branch))
    if branch is not None:
        commits = list(session.scalars(
            select(Commit).join(BranchCommit, BranchCommit.commit_id == Commit.id)
            .where(BranchCommit.branch_id == branch.id, BranchCommit.active.is_(True))
            .order_by(BranchCommit.position.desc()).limit(limit)))
        if commits:
            return commits, f"{repository.default_branch} (first-parent history)"
    newest_job = (select(Job.commit_id, func.max(Job.id).label("newest")).where(Job.repository_id == repository.id)
                  .group_by(Job.commit_id).subquery())
    commits = list(session.scalars(select(Commit).join(newest_job, newest_job.c.commit_id == Commit.id)
                                   .order_by(newest_job.c.newest.desc()).limit(limit)))
    return commits, "most recently queued"


@dataclass
class Cell:
    state: str
    job_id: int | None = None
    regression: bool = False


def matrix(session, commits: list[Commit]) -> tuple[list[tuple[str, str]], dict[tuple[int, str, str], Cell]]:  # type: ignore[no-untyped-def]
    ids = [c.id for c in commits]
    cells: dict[tuple[int, str, str], Cell] = {}
    columns: set[tuple[str, str]] = set()
    if not ids:
        return [], cells
    rows = session.execute(select(Job.id, Job.commit_id, Suite.name, Job.platform, Job.state)
                           .join(Suite, Suite.id == Job.suite_id).where(Job.commit_id.in_(ids)).order_by(Job.id))
    for job_id, commit_id, suite, platform, state in rows:
        columns.add((suite, platform))
        cells[(commit_id, suite, platform)] = Cell(state=state.value, job_id=job_id)
    flagged = session.execute(select(Alert.bad_commit_id, AlertChange.suite, AlertChange.platform)
                              .join(AlertChange, AlertChange.alert_id == Alert.id)
                              .where(Alert.bad_commit_id.in_(ids), AlertChange.is_regression.is_(True),
                                     Alert.state.in_(OPEN_STATES)))
    for commit_id, suite, platform in flagged:
        if (commit_id, suite, platform) in cells:
            cells[(commit_id, suite, platform)].regression = True
    return sorted(columns), cells


@bp.get("/")
def index():  # type: ignore[no-untyped-def]
    session = request_session()
    repositories = []
    for repository in session.scalars(select(Repository).order_by(Repository.name)):
        commits, ordered = recent_commits(session, repository)
        columns, cells = matrix(session, commits)
        repositories.append({"repo": repository, "commits": commits, "ordered": ordered, "columns": columns,
                             "cells": cells})
    alerts = list(session.scalars(select(Alert).where(Alert.state.in_(OPEN_STATES), Alert.is_regression.is_(True))
                                  .order_by(Alert.id.desc()).limit(20)))
    runners = list(session.scalars(select(Runner).order_by(Runner.platform, Runner.name)))
    busy = dict(session.execute(select(Job.runner_id, Job.id).where(Job.state == JobState.running)).all())
    return render_template("index.html", repositories=repositories, alerts=alerts, runners=runners, busy=busy,
                           depth=queue_depth(session))


def previous_point(series: Series, commit_id: int) -> tuple[float | None, str | None]:
    """Median of the last measured commit before `commit_id` on the series."""
    for i, point in enumerate(series.points):
        if point.commit_id == commit_id:
            if i == 0:
                return None, None
            before = series.points[i - 1]
            return median(before.samples), before.sha
    return None, None


@bp.get("/commits/<sha>")
def commit_page(sha: str):  # type: ignore[no-untyped-def]
    session = request_session()
    commit = session.scalar(select(Commit).where(Commit.sha == sha).order_by(Commit.id).limit(1))
    if commit is None:
        abort(404, description=f"commit {sha} is not known to Parallax")
    repository = commit.repository
    jobs = list(session.scalars(select(Job).where(Job.commit_id == commit.id).order_by(Job.id)))
    runs = list(session.scalars(select(Run).where(Run.commit_id == commit.id).order_by(Run.id)))
    branch = repository.default_branch
    suites: dict[str, dict[str, Any]] = {}
    for run in runs:
        suite = session.get(Suite, run.suite_id)
        table = suites.setdefault(suite.name, {"platforms": [], "metrics": {}})
        if run.platform not in table["platforms"]:
            table["platforms"].append(run.platform)
        for m in run.measurements:
            entry = table["metrics"].setdefault(m.metric, {"unit": m.unit, "direction": m.direction, "cells": {}})
            key = SeriesKey(repository.id, branch, suite.name, m.metric, run.platform, run.context_fingerprint)
            before, before_sha = previous_point(load_series(session, key), commit.id)
            value = median(m.samples)
            change = None if before in (None, 0) or value is None else (value - before) / abs(before)
            # Shaded only past the detector's own minimum magnitude; the alert says whether it is real.
            worse = (change is not None and abs(change) >= DEFAULT_CONFIG.min_relative
                     and (change < 0) == (m.direction == "higher_is_better"))
            entry["cells"][run.platform] = {"median": value, "min": min(m.samples), "max": max(m.samples),
                                            "n": len(m.samples), "change": change, "worse": worse,
                                            "before_sha": before_sha, "simulated": run.simulated}
    alerts = list(session.scalars(select(Alert).where(Alert.bad_commit_id == commit.id).order_by(Alert.id)))
    return render_template("commit.html", commit=commit, repository=repository, jobs=jobs, runs=runs,
                           suites=suites, alerts=alerts, branch=branch)


@bp.get("/jobs/<id:job_id>")
def job_page(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    job = session.get(Job, job_id)
    if job is None:
        abort(404, description=f"job {job_id} does not exist")
    log = "".join(session.scalars(select(JobLog.text).where(JobLog.job_id == job_id).order_by(JobLog.id)))
    return render_template("job.html", job=job, log=log)


@bp.get("/alerts")
def alerts_page():  # type: ignore[no-untyped-def]
    session = request_session()
    state = request.args.get("state", "open")
    query = select(Alert).order_by(Alert.id.desc()).limit(200)
    if state == "open":
        query = query.where(Alert.state.in_(OPEN_STATES))
    elif state in {s.value for s in AlertState}:
        query = query.where(Alert.state == AlertState(state))
    alerts = list(session.scalars(query))
    commits = {c.id: c for c in session.scalars(select(Commit).where(
        Commit.id.in_({a.bad_commit_id for a in alerts} | {a.good_commit_id for a in alerts if a.good_commit_id})))}
    return render_template("alerts.html", alerts=alerts, commits=commits, state=state,
                           states=["open", *[s.value for s in AlertState]])


@bp.get("/series")
def series_page():  # type: ignore[no-untyped-def]
    session = request_session()
    name = request.args.get("repository", "")
    suite, metric = request.args.get("suite", ""), request.args.get("metric", "")
    repository = session.scalar(select(Repository).where(Repository.name == name))
    if repository is None or not suite or not metric:
        abort(400, description="series needs ?repository=&suite=&metric= (and optionally &branch=)")
    branch = request.args.get("branch") or repository.default_branch
    rows = session.execute(select(Run.platform, Run.context_fingerprint).join(Suite, Suite.id == Run.suite_id)
                           .join(Commit, Commit.id == Run.commit_id)
                           .where(Commit.repository_id == repository.id, Suite.name == suite).distinct()).all()
    series = [load_series(session, SeriesKey(repository.id, branch, suite, metric, platform, fingerprint))
              for platform, fingerprint in sorted(rows)]
    series = [s for s in series if s.points]
    if not series:
        abort(404, description=f"no measurements of {suite}/{metric} in {name}")
    return render_template("series.html", repository=repository, suite=suite, metric=metric, branch=branch,
                           series=series, chart=Markup(render_chart(series, metric)),
                           positions=branch_positions(session, repository.id, branch) is not None)


def render_chart(series: list[Series], metric: str) -> str:
    """An SVG of each platform's medians relative to that platform's first measured level, so
    platforms with different absolute speeds share one axis; change points are marked."""
    figure, axis = plt.subplots(figsize=(10, 4), dpi=96)
    for one in series:
        levels = [median(p.samples) for p in one.points]
        baseline = next((v for v in levels if v), None) or 1.0
        xs = [p.position for p in one.points]
        ys = [((v or 0.0) / baseline - 1.0) * 100 for v in levels]
        label = f"{one.key.platform} ({one.key.context_fingerprint[:6]})"
        (line,) = axis.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=label)
        for p in one.points:
            axis.scatter([p.position] * len(p.samples), [(s / baseline - 1.0) * 100 for s in p.samples],
                         s=4, color=line.get_color(), alpha=0.35)
        for change in detect([p.samples for p in one.points], xs):
            axis.axvline(change.bad_position - 0.5, color=line.get_color(), linestyle="--", linewidth=1)
    axis.xaxis.set_major_locator(MaxNLocator(integer=True))
    axis.set_xlabel("commit (position in first-parent history)")
    # Names are data, not mathtext: "$x$" in a metric name must print as typed, not be parsed.
    axis.set_ylabel(f"{metric}: % vs first measured", parse_math=False)
    axis.grid(alpha=0.3)
    for text in axis.legend(loc="best", fontsize=8).get_texts():
        text.set_parse_math(False)
    figure.tight_layout()
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    plt.close(figure)
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]


@bp.app_context_processor
def helpers() -> dict[str, Any]:
    def series_url(repository: Repository, suite: str, metric: str, branch: str | None = None) -> str:
        return url_for("dashboard.series_page", repository=repository.name, suite=suite, metric=metric,
                       branch=branch or repository.default_branch)
    return {"series_url": series_url}
