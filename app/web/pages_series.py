"""The series page: one suite/metric, one line per platform, absolute or normalised to a
baseline commit, with raw samples, change points and alert ranges. `/series` is the page;
`/series/chart` answers the same parameters with only the chart and its table, which the page's
script swaps in when a control changes (no reload).

Parameters: repository, suite, metric (required); branch; platform (repeatable; default every
platform measured); mode=absolute|normalised; baseline=<sha> (normalised: each platform's median
at that commit = 0 %, default its first point in view); from, to (positions; default the last
WINDOW measured commits).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flask import abort, render_template, request
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.models import Alert, AlertChange, AlertState, Branch, BranchCommit, Commit, Measurement, Run, Suite
from app.detection.detector import detect
from app.detection.series import Series, SeriesKey, load_series
from app.detection.service import config_for, noise_floors
from app.web.chart_svg import Band, PlotPoint, PlotSeries, Rule, render
from app.web.dash_common import MARKERS, PALETTE, arg_choice, arg_int, arg_required, arg_sha, median, repository_or_404
from app.web.session import request_session

WINDOW = 300


@dataclass
class SeriesView:
    repository: Any
    suite: str
    metric: str
    branch: str
    mode: str
    baseline: str | None
    platforms: list[str]          # shown
    available: list[str]          # measured for this suite
    metrics: list[str]
    branches: list[str]
    chart: Any
    rows: list[tuple[str, Any, float | None]]   # platform, point, median (for the table)
    x_range: tuple[int, int]
    ordered_by: str
    note: str | None
    too_short: list[str]          # "platform: n" for series with fewer points than detection needs
    points_needed: int


def best_fingerprints(session: Session, repository_id: int, suite: str) -> dict[str, str]:
    """Per platform, the context fingerprint with the most measured commits (devices differ)."""
    rows = session.execute(select(Run.platform, Run.context_fingerprint, func.count(func.distinct(Run.commit_id)))
                           .join(Commit, Commit.id == Run.commit_id).join(Suite, Suite.id == Run.suite_id)
                           .where(Commit.repository_id == repository_id, Suite.name == suite)
                           .group_by(Run.platform, Run.context_fingerprint)).all()
    best: dict[str, tuple[int, str]] = {}
    for platform, fingerprint, count in rows:
        if platform not in best or (count, fingerprint) > best[platform]:
            best[platform] = (count, fingerprint)
    return {platform: fingerprint for platform, (_, fingerprint) in sorted(best.items())}


def suite_metrics(session: Session, repository_id: int, suite: str) -> list[str]:
    newest = session.scalar(select(Run.id).join(Commit, Commit.id == Run.commit_id).join(Suite, Suite.id == Run.suite_id)
                            .where(Commit.repository_id == repository_id, Suite.name == suite)
                            .order_by(Run.id.desc()).limit(1))
    if newest is None:
        return []
    return list(session.scalars(select(Measurement.metric).where(Measurement.run_id == newest).order_by(Measurement.id)))


def alert_bands(session: Session, repository_id: int, branch: str, suite: str, metric: str,
                platforms: list[str], where: dict[int, int]) -> list[Band]:
    rows = session.execute(select(Alert.id, Alert.good_commit_id, Alert.bad_commit_id, Alert.state, AlertChange.platform,
                                  AlertChange.relative_change)
                           .join(AlertChange, AlertChange.alert_id == Alert.id)
                           .where(Alert.repository_id == repository_id, Alert.branch == branch,
                                  AlertChange.suite == suite, AlertChange.metric == metric,
                                  AlertChange.platform.in_(platforms), Alert.state != AlertState.invalid)).all()
    bands = []
    for alert_id, good, bad, state, platform, change in rows:
        if bad not in where:
            continue
        low = where.get(good, where[bad]) if good is not None else where[bad]
        bands.append(Band(low=low, high=where[bad],
                          label=f"alert #{alert_id} ({state.value}): {platform} {change * 100:+.1f}%"))
    return bands


def build(session: Session) -> SeriesView:
    repository = repository_or_404(session, arg_required("repository", "/series?repository=&suite=&metric="))
    suite = arg_required("suite", "/series?repository=&suite=&metric=")
    metric = arg_required("metric", "/series?repository=&suite=&metric=")
    branches = list(session.scalars(select(Branch.name).where(Branch.repository_id == repository.id).order_by(Branch.name)))
    branch = request.args.get("branch", "").strip() or repository.default_branch
    if branches and branch not in branches:
        abort(404, description=f"branch {branch!r} has no history in {repository.name}")
    mode = arg_choice("mode", ["absolute", "normalised"], "absolute")
    assert mode is not None
    baseline = arg_sha("baseline")
    x_from, x_to = arg_int("from"), arg_int("to")
    if x_from is not None and x_to is not None and x_from > x_to:
        abort(400, description=f"from: must not be after to ({x_from} > {x_to})")
    fingerprints = best_fingerprints(session, repository.id, suite)
    if not fingerprints:
        abort(404, description=f"no measurements of suite {suite!r} in {repository.name}")
    metrics = suite_metrics(session, repository.id, suite)
    wanted = [p.strip() for p in request.args.getlist("platform") if p.strip()] or list(fingerprints)
    unknown = [p for p in wanted if p not in fingerprints]
    if unknown:
        abort(400, description=f"platform: {unknown[0]!r} has no {suite} measurements (measured: {', '.join(fingerprints)})")
    loaded: list[Series] = []
    for platform in wanted:
        series = load_series(session, SeriesKey(repository.id, branch, suite, metric, platform, fingerprints[platform]))
        if series.points:
            loaded.append(series)
    if not loaded and metric not in metrics:
        abort(404, description=f"no measurements of {suite}/{metric} in {repository.name}")
    all_positions = sorted({p.position for s in loaded for p in s.points})
    full = (all_positions[0], all_positions[-1]) if all_positions else (0, 0)
    if x_to is None:
        x_to = full[1]
    if x_from is None:
        inside = [p for p in all_positions if p <= x_to]
        x_from = inside[-WINDOW] if len(inside) >= WINDOW else (inside[0] if inside else full[0])
    baseline_id = session.scalar(select(Commit.id).where(Commit.repository_id == repository.id,
                                                         Commit.sha == baseline)) if baseline else None
    if baseline and baseline_id is None:
        abort(404, description=f"baseline: commit {baseline} is not known in {repository.name}")
    note = None
    plots: list[PlotSeries] = []
    rows: list[tuple[str, Any, float | None]] = []
    rules: list[Rule] = []
    visible_ids: set[int] = set()
    pending: list[tuple[PlotSeries, list[Any], float | None]] = []
    floors = noise_floors(session, suite)
    for i, series in enumerate(loaded):
        platform = series.key.platform
        in_view = [p for p in series.points if x_from <= p.position <= x_to]
        visible_ids.update(p.commit_id for p in in_view)
        scale = None
        if mode == "normalised":
            at_baseline = next((p for p in series.points if p.commit_id == baseline_id), None)
            if baseline_id is not None and at_baseline is None:
                note = f"{platform} was not measured at the baseline commit: normalised to its first point in view"
            reference = at_baseline or (in_view[0] if in_view else None)
            scale = median(reference.samples) if reference else None
        plots.append(PlotSeries(platform=platform, colour=PALETTE[i % len(PALETTE)], marker=MARKERS[i % len(MARKERS)]))
        for point in in_view:
            level = median(point.samples)
            rows.append((platform, point, level))
        for change in detect([p.samples for p in series.points], [p.position for p in series.points],
                             config_for(metric, floors.get(platform, 0.0))):
            good, bad = series.points[change.index - 1].sha[:10], series.points[change.index].sha[:10]
            rules.append(Rule(position=change.bad_position - 0.5, platform=platform,
                              label=f"change point on {platform}: {change.relative_change * 100:+.1f}% between {good} and {bad}"))
        pending.append((plots[-1], in_view, scale))
    summaries = dict(session.execute(select(Commit.id, Commit.summary).where(Commit.id.in_(visible_ids))).all()) \
        if visible_ids else {}
    for plot, in_view, scale in pending:
        plot.points = [_plot_point(point, scale, summaries.get(point.commit_id) or "") for point in in_view]
    where = dict(session.execute(select(BranchCommit.commit_id, BranchCommit.position).join(
        Branch, Branch.id == BranchCommit.branch_id).where(Branch.repository_id == repository.id, Branch.name == branch,
                                                           BranchCommit.active.is_(True),
                                                           BranchCommit.position.between(x_from - WINDOW, x_to))).all())
    if not where:
        where = {p.commit_id: p.position for s in loaded for p in s.points}
    bands = alert_bands(session, repository.id, branch, suite, metric, [s.key.platform for s in loaded], where)
    unit = loaded[0].unit if loaded else ""
    label = f"{metric}: % vs baseline" if mode == "normalised" else f"{metric} ({unit})" if unit else metric
    chart = render(plots, x_range=(x_from, x_to), full_range=full, y_label=label, bands=bands, rules=rules,
                   unit_suffix="%" if mode == "normalised" else "")
    needed = config_for(metric).min_points
    too_short = [f"{s.key.platform} has {len(s.points)}" for s in loaded if len(s.points) < needed]
    return SeriesView(repository=repository, suite=suite, metric=metric, branch=branch, mode=mode, baseline=baseline,
                      platforms=[s.key.platform for s in loaded], available=list(fingerprints), metrics=metrics,
                      branches=branches or [repository.default_branch], chart=chart, rows=rows,
                      x_range=(x_from, x_to), ordered_by=loaded[0].ordered_by if loaded else "branch", note=note,
                      too_short=too_short, points_needed=needed)


def _plot_point(point: Any, scale: float | None, summary: str) -> PlotPoint:
    level = median(point.samples)
    if scale:
        def norm(v: float) -> float:
            return (v / scale - 1.0) * 100
        return PlotPoint(point.position, point.sha, summary, norm(level) if level is not None else float("nan"),
                         [norm(v) for v in point.samples], point.samples)
    return PlotPoint(point.position, point.sha, summary, level if level is not None else float("nan"),
                     list(point.samples), point.samples)


def series_page() -> str:
    return render_template("series.html", view=build(request_session()))


def series_chart() -> str:
    return render_template("series_chart.html", view=build(request_session()))
