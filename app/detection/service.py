"""Detection as a service: mark series dirty when results arrive, scan them in the background,
classify changes across platforms, and keep alert groups.

- `on_run_stored` (in the queue's delivery of stored runs, `queue.deliver_stored_runs`, after
  the completing transaction) only upserts `detection_state.dirty`.
- The `detection` duty takes dirty series, clears the mark first (a result stored meanwhile
  marks it again, so nothing is lost), and re-examines only the recent window of each.
- `rescan` runs full detection over every series (`parallax detect --rescan`).
- Performance changes are classified against the other platforms (app.detection.classify_change);
  an inconclusive one queues the missing platforms' jobs at both ends of the range.
- `items:<name>` series get paired accuracy tests between consecutive measured commits;
  a hazard count (`hazards`, `stream_hazards`) above zero is a correctness alert by itself.
- Alerts group changes by (repository, branch, kind, range); improvements are recorded with
  `is_regression` False and never alarm; a later change that restores the level marks the
  regression fixed.
- A drift (a trend or random walk, `app.detection.shapes`) is one alert of kind "drift" per span,
  with the span and the total change, a regression only when its direction is bad; level
  changes recorded earlier inside its span are withdrawn into it. A change of noise level is an
  alert of kind "noise" ("noise changed"), never a regression.
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.core import signals
from app.core.clock import utcnow
from app.core.db import Database
from app.core.duties import Duty
from app.core.models import (
    Alert,
    AlertChange,
    AlertState,
    Branch,
    BranchCommit,
    Commit,
    DetectionState,
    JobReason,
    Repository,
    Run,
    Suite,
)
from app.detection.detector import (
    DEFAULT_CONFIG,
    Analysis,
    ChangePoint,
    DetectorConfig,
    Drift,
    NoiseChange,
    PlatformSeries,
    analyse,
    analyse_recent,
    classify_change,
    compare_accuracy,
    evidence_at,
)
from app.detection.series import Series, SeriesKey, load_series, series_keys, series_keys_for_run, sibling_series
from app.github import status as github_status
from app.jobs import queue

log = logging.getLogger(__name__)

# Minimum relative change worth an alert, per metric (DetectorConfig.min_relative, 2 %, for the
# rest): tail latencies move more from run to run; an accuracy fraction moves in small steps.
MIN_RELATIVE: dict[str, float] = {"itl_p99": 0.05, "ttft_p99": 0.05, "e2e_latency_p99": 0.05,
                                  "accuracy": 0.01}


def config_for(metric: str, floor: float = 0.0) -> DetectorConfig:
    """The detector's settings for a metric; `floor` is the suite's noise floor on the platform
    (`min_change`), which raises the metric's minimum relative change where it is larger."""
    least = max(MIN_RELATIVE.get(metric, DEFAULT_CONFIG.min_relative), floor)
    return DEFAULT_CONFIG if least == DEFAULT_CONFIG.min_relative else replace(DEFAULT_CONFIG, min_relative=least)


def noise_floors(session: Session, suite: str) -> dict[str, float]:
    """The suite's `min_change` per platform (empty for a suite not in the catalogue)."""
    return dict(session.scalar(select(Suite.min_change).where(Suite.name == suite)) or {})


def series_config(session: Session, key: SeriesKey) -> DetectorConfig:
    return config_for(key.metric, noise_floors(session, key.suite).get(key.platform, 0.0))


ACCURACY_ALPHA = 1e-3          # paired McNemar / two-proportion p-value for an accuracy alert
ACCURACY_MIN_DROP = 0.01       # and at least one point of accuracy
DRIFT_SPAN = 20                # a drift is tested against a commit at most this many measured commits back
SCAN_BATCH = 50                # dirty series per duty run
MAX_SUSPECTS = 50
OPEN_STATES = (AlertState.new, AlertState.acknowledged)
SHAPE_KINDS = ("drift", "noise")   # alert kinds that describe a series' shape, not one commit's change
NOISE_SAME = 20                    # a noise change found again within this many measured commits is the same


@dataclass
class ScanReport:
    series: int = 0
    created: list[int] = field(default_factory=list)       # new AlertChange ids
    updated: int = 0
    fixed: list[int] = field(default_factory=list)         # alert ids set to fixed
    withdrawn: list[int] = field(default_factory=list)     # AlertChange ids no longer supported
    confirm_jobs: list[int] = field(default_factory=list)

    def merge(self, other: "ScanReport") -> None:
        self.series += other.series
        self.created += other.created
        self.updated += other.updated
        self.fixed += other.fixed
        self.withdrawn += other.withdrawn
        self.confirm_jobs += other.confirm_jobs


# ---------------------------------------------------------------- marking

def _insert(session: Session):  # type: ignore[no-untyped-def]
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    return insert(DetectionState)


def mark_dirty(session: Session, key: SeriesKey) -> None:
    """Insert or flag the series' state row; one statement, safe under concurrent completions."""
    moment = utcnow()
    statement = _insert(session).values(series_key=key.digest, dirty=True, marked_at=moment,
                                        description={"key": key.to_json()})
    session.execute(statement.on_conflict_do_update(index_elements=["series_key"],
                                                    set_={"dirty": True, "marked_at": moment}))


def on_run_stored(session: Session, run: Run) -> None:
    for key in series_keys_for_run(session, run):
        mark_dirty(session, key)


# ---------------------------------------------------------------- scanning

def scan_dirty(db: Database, limit: int = SCAN_BATCH) -> ScanReport:
    """The duty: incremental detection on up to `limit` dirty series. Runs stored since the last
    delivery of their hooks are delivered first, so every stored run has marked its series."""
    queue.deliver_stored_runs(db)
    report = ScanReport()
    with db.session() as session:
        ids = list(session.scalars(select(DetectionState.id).where(DetectionState.dirty.is_(True))
                                   .order_by(DetectionState.id).limit(limit)))
    for state_id in ids:
        with db.session() as session:
            state = session.get(DetectionState, state_id)
            if state is None or not state.dirty:
                continue
            state.dirty = False
            session.commit()
            try:
                report.merge(scan_series(session, SeriesKey.from_json(state.description["key"]), full=False))
                session.commit()
            except Exception:
                # One broken series must not starve the others: log it, keep it dirty, go on.
                log.exception("detection scan failed", extra={"px_series": state_id})
                session.rollback()
                state = session.get(DetectionState, state_id)
                if state is not None:
                    state.dirty = True   # retried on the next tick (not on arrivals: no new mark)
                session.commit()
    return report


def rescan(db: Database, repository_id: int | None = None,
           progress: Any = None) -> ScanReport:
    """Full detection over every series (of one repository, or all)."""
    report = ScanReport()
    with db.session() as session:
        keys = series_keys(session, repository_id)
    for number, key in enumerate(keys, 1):
        with db.session() as session:
            outcome = scan_series(session, key, full=True)
            session.commit()
        report.merge(outcome)
        if progress is not None:
            progress(number, len(keys), key, outcome)
    return report


def scan_series(session: Session, key: SeriesKey, *, full: bool) -> ScanReport:
    series = load_series(session, key, last=None if full else DEFAULT_CONFIG.window)
    report = ScanReport(series=1)
    shapes: dict[str, Any] = {}
    if key.is_hazard:
        _hazard_alerts(session, series, report)
        found: list[dict[str, Any]] = []
    elif key.is_items:
        found = _accuracy_alerts(session, series, report, full=full)
    else:
        points = [p.samples for p in series.points]
        positions = [p.position for p in series.points]
        config = series_config(session, key)
        analysis = analyse(points, positions, config) if full else analyse_recent(points, positions, config)
        changes = analysis.changes
        found = []
        for change in changes:
            _record_performance_change(session, series, change, report)
            found.append(_change_json(series, change))
        _withdraw_vanished(session, series, changes, config, truncated=not full and len(points) >= config.window,
                           report=report)
        for drift in analysis.drifts:
            _absorb_into_drift(session, series, _record_drift(session, series, drift, report), report)
        if analysis.noise is not None:
            _record_noise_change(session, series, analysis.noise, report)
        shapes = _shapes_json(series, analysis)
    _reclassify_waiting(session, series, report)
    _save_state(session, series, found, shapes)
    return report


def _shapes_json(series: Series, analysis: Analysis) -> dict[str, Any]:
    """What the scan saw besides level changes, recorded on the series (never as a regression):
    drifts over spans with their total change, a change of noise level, a seasonal period."""
    points = series.points
    return {"drifts": [{"start": points[d.start].sha, "end": points[d.end].sha,
                        "start_position": points[d.start].position, "end_position": points[d.end].position,
                        "before": d.before, "after": d.after, "relative_change": d.relative_change,
                        "steps": d.steps} for d in analysis.drifts],
            "noise_changed": None if analysis.noise is None else {
                "at": points[analysis.noise.index].sha, "position": points[analysis.noise.index].position,
                "sigma_before": analysis.noise.sigma_before, "sigma_after": analysis.noise.sigma_after,
                "ratio": analysis.noise.ratio, "p_value": analysis.noise.p_value},
            "seasonal_period": analysis.period}


def _save_state(session: Session, series: Series, found: list[dict[str, Any]],
                shapes: dict[str, Any] | None = None) -> None:
    """Record the scan; never touches `dirty` (a run stored meanwhile keeps its mark)."""
    values = {"last_scanned_at": utcnow(),
              "description": {"key": series.key.to_json(), "points": len(series.points),
                              "ordered_by": series.ordered_by, "last_change_points": json_safe(found),
                              **json_safe(shapes or {})}}
    session.flush()
    statement = _insert(session).values(series_key=series.key.digest, dirty=False, **values)
    session.execute(statement.on_conflict_do_update(index_elements=["series_key"], set_=values))


def _change_json(series: Series, change: ChangePoint) -> dict[str, Any]:
    return {"index": change.index, "good": series.points[change.index - 1].sha,
            "bad": series.points[change.index].sha, "relative_change": change.relative_change,
            "p_value": change.p_value}


# ---------------------------------------------------------------- alerts

def is_regression(direction: str, relative_change: float) -> bool:
    return relative_change < 0 if direction == "higher_is_better" else relative_change > 0


def _series_changes(session: Session, key: SeriesKey) -> list[AlertChange]:
    return list(session.scalars(
        select(AlertChange).join(Alert, Alert.id == AlertChange.alert_id)
        .where(Alert.repository_id == key.repository_id, Alert.branch == key.branch,
               AlertChange.suite == key.suite, AlertChange.metric == key.metric,
               AlertChange.platform == key.platform, AlertChange.context_fingerprint == key.context_fingerprint)
        .order_by(AlertChange.id)))


def _branch_position(session: Session, key: SeriesKey, commit_id: int | None) -> int | None:
    if commit_id is None:
        return None
    return session.scalar(select(BranchCommit.position).join(Branch, Branch.id == BranchCommit.branch_id)
                          .where(Branch.repository_id == key.repository_id, Branch.name == key.branch,
                                 BranchCommit.commit_id == commit_id, BranchCommit.active.is_(True)))


def _alert_group(session: Session, series: Series, kind: str, good_id: int | None, bad_id: int,
                 regression: bool) -> tuple[Alert, bool]:
    """The open alert of the same kind whose commit range overlaps this one (platforms measured
    at different commits see one culprit through different ranges), narrowed to the overlap;
    or a new alert."""
    key = series.key
    same = (Alert.repository_id == key.repository_id, Alert.branch == key.branch, Alert.kind == kind,
            Alert.is_regression.is_(regression))
    alert = session.scalar(select(Alert).where(
        *same, Alert.good_commit_id == good_id if good_id is not None else Alert.good_commit_id.is_(None),
        Alert.bad_commit_id == bad_id).limit(1))
    if alert is not None:
        return alert, False
    good_pos, bad_pos = _branch_position(session, key, good_id), _branch_position(session, key, bad_id)
    if series.ordered_by == "branch" and good_pos is not None and bad_pos is not None:
        for candidate in session.scalars(select(Alert).where(*same, Alert.state.in_(OPEN_STATES))
                                         .order_by(Alert.id.desc()).limit(100)):
            c_good = _branch_position(session, key, candidate.good_commit_id)
            c_bad = _branch_position(session, key, candidate.bad_commit_id)
            if c_good is None or c_bad is None or not (c_good < bad_pos and good_pos < c_bad):
                continue
            if good_pos > c_good:
                candidate.good_commit_id = good_id
            if bad_pos < c_bad:
                candidate.bad_commit_id = bad_id
            return candidate, False
    alert = Alert(repository_id=key.repository_id, branch=key.branch, good_commit_id=good_id, bad_commit_id=bad_id,
                  kind=kind, is_regression=regression, state=AlertState.new)
    session.add(alert)
    session.flush()
    return alert, True


def _suspects(series: Series, good_index: int | None, bad_index: int, session: Session) -> list[str]:
    """Commits that may hold the change: every branch commit after the good one up to the bad one."""
    bad = series.points[bad_index]
    if series.ordered_by != "branch" or good_index is None:
        return [bad.sha]
    good = series.points[good_index]
    rows = session.execute(
        select(Commit.sha).join(BranchCommit, BranchCommit.commit_id == Commit.id)
        .join(Branch, Branch.id == BranchCommit.branch_id)
        .where(Branch.repository_id == series.key.repository_id, Branch.name == series.key.branch,
               BranchCommit.active.is_(True), BranchCommit.position > good.position,
               BranchCommit.position <= bad.position)
        .order_by(BranchCommit.position).limit(MAX_SUSPECTS)).all()
    return [sha for (sha,) in rows] or [bad.sha]


def _new_change(session: Session, series: Series, *, kind: str, good_index: int | None, bad_index: int,
                relative_change: float, before: float | None, after: float | None, p_value: float | None,
                ci: tuple[float, float] | None, classification: str, details: dict[str, Any],
                report: ScanReport, regression: bool | None = None) -> AlertChange:
    """Record a change in its alert group. A level change that is a regression sets a failing
    commit status, an improvement may restore earlier regressions; drifts and noise changes do
    neither (a drift has no single culprit commit, a noise change is never a regression)."""
    key = series.key
    if regression is None:
        regression = kind == "correctness" or is_regression(series.direction, relative_change)
    good_id = series.points[good_index].commit_id if good_index is not None else None
    bad = series.points[bad_index]
    alert, created = _alert_group(session, series, kind, good_id, bad.commit_id, regression)
    change = AlertChange(
        alert_id=alert.id, suite=key.suite, metric=key.metric, platform=key.platform,
        context_fingerprint=key.context_fingerprint, direction=series.direction,
        relative_change=_finite(relative_change), ci_low=json_safe(ci[0]) if ci else None,
        ci_high=json_safe(ci[1]) if ci else None, p_value=p_value, before_value=before, after_value=after,
        classification=classification, is_regression=regression,
        suspected_commits=_suspects(series, good_index, bad_index, session),
        details=json_safe({"good_position": series.points[good_index].position if good_index is not None else None,
                            "bad_position": bad.position, "ordered_by": series.ordered_by, **details}))
    session.add(change)
    alert.updated_at = utcnow()
    session.flush()
    report.created.append(change.id)
    if kind in SHAPE_KINDS:
        pass
    elif regression:
        _report_status(session, series, bad.sha, relative_change, classification, kind, before, after)
    else:
        _restore(session, series, change, report)
    if created and regression:
        signals.alert_opened.send(session, alert=alert)
    log.info("alert change recorded", extra={"px_alert": alert.id, "px_new_alert": created,
                                             "px_metric": key.metric, "px_platform": key.platform})
    return change


def json_safe(value: Any) -> Any:
    """JSON columns get null for NaN/inf: PostgreSQL refuses the `Infinity` token."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def _finite(value: float) -> float:
    if math.isfinite(value):
        return value
    return math.copysign(1e308, value)


def _restore(session: Session, series: Series, improvement: AlertChange, report: ScanReport) -> None:
    """An improvement that brings the level back to where an earlier open regression of the same
    series started marks that regression restored, and its alert fixed once all are."""
    least = series_config(session, series.key).min_relative
    for earlier in _series_changes(session, series.key):
        if (not earlier.is_regression or earlier.details.get("restored_by") or earlier.id == improvement.id
                or earlier.alert.kind != improvement.alert.kind):
            continue
        if (earlier.details.get("bad_position") or 0) > (improvement.details.get("bad_position") or 0):
            continue
        alert = earlier.alert
        if alert.state not in OPEN_STATES and alert.state != AlertState.wont_fix:
            continue
        base = earlier.before_value
        if base is None or improvement.after_value is None:
            continue
        scale = abs(base) or 1.0
        # Back to within a quarter of the drop (or the minimum magnitude) of the old level.
        tolerance = max(least, 0.25 * abs(earlier.relative_change))
        if abs(improvement.after_value - base) / scale > tolerance and not (base == 0 and improvement.after_value == 0):
            continue
        earlier.details = {**earlier.details, "restored_by": improvement.id}
        improvement.details = {**improvement.details, "restores": earlier.id}
        if all(c.details.get("restored_by") for c in alert.changes if c.is_regression):
            alert.state = AlertState.fixed
            alert.updated_at = utcnow()
            report.fixed.append(alert.id)
            signals.alert_fixed.send(session, alert=alert)


def _report_status(session: Session, series: Series, sha: str, relative_change: float, classification: str,
                   kind: str, before: float | None, after: float | None) -> None:
    """A new regression turns the bad commit's status to failure."""
    key = series.key
    metric = key.metric[len("items:"):] + " accuracy" if key.is_items else key.metric
    label = classification.replace("_", "-")
    if kind == "correctness":
        text = f"{metric} = {relative_change:g} on {key.platform} ({label})"
    elif not math.isfinite(relative_change):
        text = f"{metric} {before:g} -> {after:g} on {key.platform} ({label})"
    else:
        text = f"{metric} {relative_change * 100:+.1f}% on {key.platform} ({label})"
    github_status.set_status(session, repository_id=key.repository_id, sha=sha, platform=key.platform,
                             suite=key.suite, state="failure", description=text[:140])


def _existing_near(changes: list[AlertChange], series: Series, index: int, relative_change: float,
                   tolerance: int) -> AlertChange | None:
    """An already recorded change of this series within `tolerance` measured commits of the
    point at `index`, in the same direction (the same change, seen again or refined)."""
    at = {point.position: i for i, point in enumerate(series.points)}
    for change in changes:
        other = at.get(change.details.get("bad_position"))
        if other is None or abs(other - index) > tolerance:
            continue
        if math.copysign(1, change.relative_change) == math.copysign(1, relative_change):
            return change
    return None


def _record_performance_change(session: Session, series: Series, change: ChangePoint, report: ScanReport) -> None:
    existing = _existing_near(_kind_changes(session, series.key, "performance"), series, change.index,
                              change.relative_change, DEFAULT_CONFIG.min_segment)
    stats = {"change": asdict(change)}
    if existing is not None:
        # The same change seen again with more data: refresh its numbers and, when more data
        # moved it by a commit or two, its range; it stays in its group.
        existing.relative_change = _finite(change.relative_change)
        existing.ci_low, existing.ci_high = json_safe(change.ci_low), json_safe(change.ci_high)
        existing.p_value, existing.before_value, existing.after_value = change.p_value, change.before, change.after
        good, bad = series.points[change.index - 1], series.points[change.index]
        moved = existing.details.get("bad_position") != bad.position
        withdrawn = existing.details.get("withdrawn")
        existing.details = json_safe({**{k: v for k, v in existing.details.items() if k != "withdrawn"}, **stats,
                                      "good_position": good.position, "bad_position": bad.position})
        if withdrawn:
            # Found again after all: the detector takes its own withdrawal back.
            alert = existing.alert
            if alert.state == AlertState.invalid and alert.updated_by == "detector":
                alert.state, alert.updated_by, alert.note = AlertState.new, None, None
                alert.updated_at = utcnow()
            if existing.is_regression:
                _report_status(session, series, bad.sha, change.relative_change, existing.classification,
                               alert.kind, change.before, change.after)
        if moved:
            existing.suspected_commits = _suspects(series, change.index - 1, change.index, session)
            alert = existing.alert
            if len(alert.changes) == 1:
                alert.good_commit_id, alert.bad_commit_id = good.commit_id, bad.commit_id
        report.updated += 1
        return
    verdict, details = _classify(session, series, change, report)
    _new_change(session, series, kind="performance", good_index=change.index - 1, bad_index=change.index,
                relative_change=change.relative_change, before=change.before, after=change.after,
                p_value=change.p_value, ci=(change.ci_low, change.ci_high), classification=verdict,
                details={**stats, **details}, report=report)


def _kind_changes(session: Session, key: SeriesKey, kind: str) -> list[AlertChange]:
    return [c for c in _series_changes(session, key) if c.alert.kind == kind]


def _record_drift(session: Session, series: Series, drift: Drift, report: ScanReport) -> AlertChange:
    """One alert of kind "drift" per span: a drift found again over a span that overlaps a
    recorded one (a later scan sees more of it, or sees it through another window) widens and
    refreshes that record; its total change runs from the level before the wider span to the
    level after it."""
    start, end = series.points[drift.start], series.points[drift.end]
    for existing in _kind_changes(session, series.key, "drift"):
        span = existing.details.get("drift") or {}
        if not (span.get("start_position", math.inf) <= end.position
                and start.position <= span.get("end_position", -math.inf)):
            continue
        widened_left = start.position <= span["start_position"]
        widened_right = end.position >= span["end_position"]
        before = drift.before if widened_left else existing.before_value
        after = drift.after if widened_right else existing.after_value
        relative = _relative(before, after)
        regression = is_regression(series.direction, relative)
        existing.before_value, existing.after_value, existing.relative_change = before, after, _finite(relative)
        existing.is_regression = regression
        new_span = {"start": start.sha if widened_left else span.get("start"),
                    "start_position": start.position if widened_left else span["start_position"],
                    "end": end.sha if widened_right else span.get("end"),
                    "end_position": end.position if widened_right else span["end_position"],
                    "steps": max(drift.steps, span.get("steps", 0)), "total_change": relative}
        existing.details = json_safe({**existing.details, "drift": new_span,
                                      "bad_position": new_span["end_position"]})
        at = {point.position: i for i, point in enumerate(series.points)}
        first, last = at.get(new_span["start_position"]), at.get(new_span["end_position"])
        alert = existing.alert
        if len(alert.changes) == 1:
            alert.is_regression = regression
            if first:
                alert.good_commit_id = series.points[first - 1].commit_id
            if last is not None:
                alert.bad_commit_id = series.points[last].commit_id
        if first and last is not None:
            existing.suspected_commits = _suspects(series, first - 1, last, session)
        report.updated += 1
        return existing
    relative = _relative(drift.before, drift.after)
    return _new_change(
        session, series, kind="drift", good_index=drift.start - 1 if drift.start > 0 else None,
        bad_index=drift.end, relative_change=relative, before=drift.before, after=drift.after, p_value=None,
        ci=None, classification="inconclusive",
        details={"drift": {"start": start.sha, "end": end.sha, "start_position": start.position,
                           "end_position": end.position, "steps": drift.steps, "total_change": relative}},
        report=report)


def _relative(before: float | None, after: float | None) -> float:
    if before is None or after is None:
        return 0.0
    if before == 0:
        return 0.0 if after == 0 else math.copysign(math.inf, after)
    return (after - before) / abs(before)


def _absorb_into_drift(session: Session, series: Series, drift: AlertChange, report: ScanReport) -> None:
    """Level changes recorded inside a drift's span (an early scan saw the first step of a walk
    as a shift) are withdrawn into the drift: the drift alert reports them once. Their alert
    turns `invalid` by "detector" while untriaged and once none of its regressions stands, and
    a failing commit status is cleared, as for any withdrawal."""
    span = drift.details["drift"]
    for recorded in _kind_changes(session, series.key, "performance"):
        details = recorded.details or {}
        position = details.get("bad_position")
        if (position is None or details.get("withdrawn") or details.get("restored_by")
                or not span["start_position"] <= position <= span["end_position"]):
            continue
        recorded.details = json_safe({**details, "withdrawn": {"drift": drift.id}})
        report.withdrawn.append(recorded.id)
        alert = recorded.alert
        regressions = [c for c in alert.changes if c.is_regression]
        if (alert.state == AlertState.new
                and all(c.details.get("withdrawn") or c.details.get("restored_by") for c in regressions)):
            alert.state = AlertState.invalid
            alert.updated_by = "detector"
            alert.note = (f"withdrawn by the detector: part of drift alert {drift.alert_id} "
                          f"({series.key.metric} on {series.key.platform} moves over a span, not at one commit)")
            alert.updated_at = utcnow()
            signals.alert_withdrawn.send(session, alert=alert)
        if recorded.is_regression:
            sha = next((p.sha for p in series.points if p.position == position), None)
            if sha is not None:
                github_status.set_status(session, repository_id=series.key.repository_id, sha=sha,
                                         platform=series.key.platform, suite=series.key.suite, state="success",
                                         clears_failure=True,
                                         description=f"{series.key.metric} change is part of a drift, "
                                                     f"see alert {drift.alert_id}")


def _record_noise_change(session: Session, series: Series, noise: NoiseChange, report: ScanReport) -> None:
    """A change of noise level is an alert of kind "noise" ("noise changed" on the alert list):
    never a regression, never a commit status. Found again within `NOISE_SAME` measured commits
    of a recorded one, it refreshes that one."""
    at = {point.position: i for i, point in enumerate(series.points)}
    numbers = {"sigma_before": noise.sigma_before, "sigma_after": noise.sigma_after, "ratio": noise.ratio,
               "p_value": noise.p_value}
    for existing in _kind_changes(session, series.key, "noise"):
        other = at.get(existing.details.get("bad_position"))
        if other is not None and abs(other - noise.index) <= NOISE_SAME:
            existing.before_value, existing.after_value = noise.sigma_before, noise.sigma_after
            existing.relative_change, existing.p_value = _finite(noise.ratio - 1.0), noise.p_value
            existing.details = json_safe({**existing.details, "noise_changed": numbers})
            report.updated += 1
            return
    _new_change(session, series, kind="noise", good_index=noise.index - 1 if noise.index > 0 else None,
                bad_index=noise.index, relative_change=noise.ratio - 1.0, before=noise.sigma_before,
                after=noise.sigma_after, p_value=noise.p_value, ci=None, classification="inconclusive",
                details={"noise_changed": numbers}, report=report, regression=False)


def _withdraw_vanished(session: Session, series: Series, changes: list[ChangePoint], config: DetectorConfig, *,
                       truncated: bool, report: ScanReport) -> None:
    """A recorded change that more data no longer supports is withdrawn: the scan did not find
    it again although it lies well inside the scanned commits, and the commits after its first
    `min_segment` ones are back within half the alerting effect of the level before (the
    hysteresis keeps a change near the threshold from flapping). Its alert becomes `invalid`
    (by "detector") when nobody has triaged it and none of its regressions still stands; a
    failing commit status is cleared."""
    if len(series.points) < config.min_points:
        return
    at = {point.position: i for i, point in enumerate(series.points)}
    first = config.max_side // 2 if truncated else 1
    points = [p.samples for p in series.points]
    positions = [p.position for p in series.points]
    for recorded in _kind_changes(session, series.key, "performance"):
        details = recorded.details or {}
        index = at.get(details.get("bad_position"))
        if (index is None or details.get("withdrawn") or details.get("restored_by") or details.get("restores")
                or index < first or index > len(series.points) - 2 * config.min_segment):
            continue
        if any(abs(c.index - index) <= config.min_segment for c in changes):
            continue
        test = evidence_at(points, positions, index, [c.index for c in changes], config, skip=config.min_segment)
        if test is None or test.effect >= config.min_effect / 2:
            continue
        effect = round(test.effect, 2)
        later = len(series.points) - index
        recorded.details = json_safe({**details, "withdrawn": {"effect": effect, "measured_after": later}})
        report.withdrawn.append(recorded.id)
        alert = recorded.alert
        regressions = [c for c in alert.changes if c.is_regression]
        if (alert.state == AlertState.new and regressions
                and all(c.details.get("withdrawn") or c.details.get("restored_by") for c in regressions)):
            alert.state = AlertState.invalid
            alert.updated_by = "detector"
            alert.note = (f"withdrawn by the detector: with {later} measured commits from "
                          f"{series.points[index].sha[:12]} on, {series.key.metric} on {series.key.platform} is "
                          f"back within noise of the level before (effect {effect})")
            alert.updated_at = utcnow()
            signals.alert_withdrawn.send(session, alert=alert)
        if recorded.is_regression:
            github_status.set_status(session, repository_id=series.key.repository_id,
                                     sha=series.points[index].sha, platform=series.key.platform,
                                     suite=series.key.suite, state="success", clears_failure=True,
                                     description=f"{series.key.metric} regression withdrawn: within noise "
                                                 f"with {later} more commits")


def _classify(session: Session, series: Series, change: ChangePoint,
              report: ScanReport) -> tuple[str, dict[str, Any]]:
    others = {platform: PlatformSeries([p.samples for p in s.points], [p.position for p in s.points])
              for platform, s in sibling_series(session, series.key, last=2 * DEFAULT_CONFIG.window).items()
              if s.points}
    own = PlatformSeries([p.samples for p in series.points], [p.position for p in series.points])
    floors = noise_floors(session, series.key.suite)
    verdict = classify_change(series.key.platform, change, own, others,
                              config_for(series.key.metric, floors.get(series.key.platform, 0.0)),
                              min_relative_of={name: config_for(series.key.metric, floors.get(name, 0.0)).min_relative
                                               for name in others})
    details: dict[str, Any] = {"platforms": verdict.changed, "unchanged": verdict.unchanged,
                               "missing": verdict.missing, "ambiguous": verdict.ambiguous,
                               "comparison": verdict.details}
    if verdict.missing:
        details["confirm_jobs"] = _queue_confirmations(session, series, change, verdict.missing, report)
    return verdict.kind, details


def _queue_confirmations(session: Session, series: Series, change: ChangePoint, platforms: list[str],
                         report: ScanReport) -> list[int]:
    """Queue the missing platforms' jobs at both ends of the range, so the question answers itself."""
    suite = session.scalar(select(Suite).where(Suite.name == series.key.suite))
    repository = session.get(Repository, series.key.repository_id)
    if suite is None or repository is None:
        return []
    job_ids = []
    for platform in platforms:
        if platform not in (suite.platforms or []):
            continue
        for point in (series.points[change.index - 1], series.points[change.index]):
            commit = session.get(Commit, point.commit_id)
            assert commit is not None
            job, created = queue.enqueue(session, repository, commit, suite, platform, reason=JobReason.confirm)
            if created:
                job_ids.append(job.id)
    report.confirm_jobs += job_ids
    return job_ids


def _reclassify_waiting(session: Session, series: Series, report: ScanReport) -> None:
    """New data on this platform may settle other platforms' inconclusive changes."""
    if series.key.is_items or series.key.is_hazard:
        return
    waiting = list(session.scalars(
        select(AlertChange).join(Alert, Alert.id == AlertChange.alert_id)
        .where(Alert.repository_id == series.key.repository_id, Alert.branch == series.key.branch,
               Alert.kind == "performance", AlertChange.suite == series.key.suite,
               AlertChange.metric == series.key.metric, AlertChange.platform != series.key.platform,
               AlertChange.classification == "inconclusive")))
    for row in waiting:
        stored = row.details.get("change")
        if not stored or any(v is None for v in stored.values()):
            continue   # numbers that were not finite cannot be compared across platforms
        key = SeriesKey(series.key.repository_id, series.key.branch, row.suite, row.metric, row.platform,
                        row.context_fingerprint)
        own = load_series(session, key, last=2 * DEFAULT_CONFIG.window)
        index = next((i for i, p in enumerate(own.points) if p.position == stored["bad_position"]), None)
        if index is None or index == 0:
            continue
        change = ChangePoint(**{**stored, "index": index})
        verdict, details = _classify(session, own, change, ScanReport())
        if verdict != "inconclusive" or details["missing"] != row.details.get("missing"):
            row.classification = verdict
            row.details = json_safe({**row.details, **details, "confirm_jobs": row.details.get("confirm_jobs", [])})
            report.updated += 1


# ---------------------------------------------------------------- accuracy and hazards

def _accuracy_alerts(session: Session, series: Series, report: ScanReport, *, full: bool) -> list[dict[str, Any]]:
    """Each measured commit is compared on its per-item vector (latest run) with the previous
    measured commit, and then with an anchor up to `DRIFT_SPAN` commits back: the last commit
    of the current level (just after the latest accuracy change), so a slow drift whose steps
    are each too small to test still becomes one alert spanning the commits that drifted."""
    points = [p for p in series.points if p.correct and p.correct[-1]]
    start = 1 if full else max(1, len(points) - DEFAULT_CONFIG.window)
    existing = _series_changes(session, series.key)
    found = []
    def changed_at(point: Any) -> bool:
        return any(c.details.get("bad_position") == point.position for c in existing)

    latest_change = max((j for j in range(start) if changed_at(points[j])), default=0)
    for i in range(start, len(points)):
        after = points[i]
        result = _accuracy_change(session, series, points[i - 1], after, existing, report, drift=False)
        anchor = max(i - DRIFT_SPAN, latest_change)
        if result is None and anchor < i - 1:
            result = _accuracy_change(session, series, points[anchor], after, existing, report, drift=True)
        if result is not None:
            found.append(result)
        if changed_at(after):
            latest_change = i
    return found


def _accuracy_change(session: Session, series: Series, before: Any, after: Any, existing: list[AlertChange],
                     report: ScanReport, *, drift: bool) -> dict[str, Any] | None:
    """Paired test of two measured commits; records an accuracy change (once) when it passes."""
    result = compare_accuracy(before.correct[-1], after.correct[-1])
    delta = result.after - result.before
    if result.p_value >= ACCURACY_ALPHA or abs(delta) < ACCURACY_MIN_DROP:
        return None
    index = series.points.index(after)
    if _existing_near(existing, series, index, delta, 0) is None:
        relative = delta / result.before if result.before else delta
        existing.append(_new_change(
            session, series, kind="accuracy", good_index=series.points.index(before), bad_index=index,
            relative_change=relative, before=result.before, after=result.after, p_value=result.p_value,
            ci=(result.ci_low, result.ci_high),
            classification=_pointwise_classification(session, series, before, after, "accuracy"),
            details={"method": result.method, "discordant": result.discordant, "difference": delta,
                     "drift": drift}, report=report))
    return {"good": before.sha, "bad": after.sha, "difference": delta, "p_value": result.p_value, "drift": drift}


def _hazard_alerts(session: Session, series: Series, report: ScanReport) -> None:
    """Any hazard is a correctness failure: one alert per run of commits with hazards, at the run's
    first measured commit; fixed where the count returns to zero. Results arrive in any order, so
    a run found earlier from part of its commits is the same alert: when an earlier commit of
    the run is measured later, the alert moves back to it instead of another one opening."""
    existing = [c for c in _series_changes(session, series.key) if c.alert.kind == "correctness"]
    measured = [i for i, point in enumerate(series.points) if point.samples]
    runs: list[list[int]] = []
    for index in measured:
        if max(series.points[index].samples) > 0:
            if runs and runs[-1][-1] == measured[measured.index(index) - 1]:
                runs[-1].append(index)
            else:
                runs.append([index])
    for run in runs:
        start, end = run[0], run[-1]
        first, last = series.points[start].position, series.points[end].position
        order = measured.index(start)
        good = measured[order - 1] if order > 0 else None
        count = max(series.points[start].samples)
        seen = next((c for c in existing if first <= _bad_position(c) <= last), None)
        if seen is None:
            existing.append(_new_change(
                session, series, kind="correctness", good_index=good, bad_index=start,
                relative_change=float(count), before=0.0 if good is not None else None, after=float(count),
                p_value=None, ci=None,
                classification=_pointwise_classification(session, series, None, series.points[start], "hazard"),
                details={"hazards": count}, report=report))
        elif seen.details.get("bad_position") != first:
            seen.details = {**seen.details, "bad_position": first, "hazards": count,
                            "good_position": series.points[good].position if good is not None else None}
            seen.suspected_commits = _suspects(series, good, start, session)
            if len(seen.alert.changes) == 1:
                seen.alert.good_commit_id = series.points[good].commit_id if good is not None else None
                seen.alert.bad_commit_id = series.points[start].commit_id
            report.updated += 1
        next_order = measured.index(end) + 1
        if next_order < len(measured):
            clean = series.points[measured[next_order]]
            for change in existing:
                alert = change.alert
                if (change.is_regression and alert.state in OPEN_STATES
                        and first <= _bad_position(change) <= last
                        and not change.details.get("restored_by")):
                    change.details = {**change.details, "restored_by": f"hazards 0 at {clean.sha}"}
                    if all(c.details.get("restored_by") for c in alert.changes if c.is_regression):
                        alert.state = AlertState.fixed
                        alert.updated_at = utcnow()
                        report.fixed.append(alert.id)


def _bad_position(change: AlertChange) -> int:
    """The change's bad commit's position in the branch history; -1 when not recorded (0 is the first commit)."""
    position = change.details.get("bad_position")
    return -1 if position is None else int(position)


def _pointwise_classification(session: Session, series: Series, before: Any, after: Any, what: str) -> str:
    """Did the other platforms show the same thing at the same commits?"""
    others = sibling_series(session, series.key)
    verdicts = []
    for other in others.values():
        at = {p.position: p for p in other.points}
        new = at.get(after.position)
        old = at.get(before.position) if before is not None else None
        if new is None or (before is not None and old is None):
            verdicts.append("missing")
        elif what == "hazard":
            verdicts.append("changed" if new.samples and max(new.samples) > 0 else "unchanged")
        else:
            if not (new.correct and old.correct):
                verdicts.append("missing")
                continue
            result = compare_accuracy(old.correct[-1], new.correct[-1])
            changed = result.p_value < ACCURACY_ALPHA and abs(result.after - result.before) >= ACCURACY_MIN_DROP
            verdicts.append("changed" if changed else "unchanged")
    if not verdicts or "missing" in verdicts:
        return "inconclusive"
    return "common" if all(v == "changed" for v in verdicts) else "platform_specific"


# Detection runs on arrivals too, but at most once a second: a burst of runs on one series is
# scanned once, not once per run.
ARRIVALS_MIN_S = 1.0


def marked_since(session: Session, since: datetime | None) -> bool:
    """A run stored, or a series marked, since the last pass (one over a second ago): the duty's
    `due` check. A series whose scan failed keeps its old mark and waits for the interval."""
    if since is not None and since > utcnow() - timedelta(seconds=ARRIVALS_MIN_S):
        return False
    marked = select(DetectionState.id).where(DetectionState.dirty.is_(True))
    if since is not None:
        marked = marked.where(DetectionState.marked_at > since)
    return queue.runs_stored_since(session, since) or session.scalar(marked.limit(1)) is not None


DUTIES = [Duty("detection", scan_dirty, interval_s=5.0, lease_s=300.0, due=marked_since)]
