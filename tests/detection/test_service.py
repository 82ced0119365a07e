"""Detection as a service: series building, dirty marking, incremental scans, classification
across platforms, confirmation jobs, alert grouping and states, accuracy and hazard alerts.
Runs on SQLite and PostgreSQL (the `db` fixture)."""
from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from scipy import stats
from sqlalchemy import func, select

from app.core.clock import utcnow
from app.core.models import (
    Alert,
    AlertChange,
    AlertState,
    BranchCommit,
    Commit,
    CommitStatusUpdate,
    DetectionState,
    Job,
    JobReason,
)
from app.detection import service as detection_service
from app.detection.series import SeriesKey, load_series
from app.detection.service import rescan, scan_dirty
from app.jobs.queue import deliver_stored_runs
from tests.detection.builder import METRIC, SUITE, Builder, excursion_levels, step
from tests.support.service_api import SHA_A, claim, document, queue_jobs, raw, register


@pytest.fixture
def build(db):  # type: ignore[no-untyped-def]
    return Builder(db)


def key(build: Builder, platform: str = "rocm", metric: str = METRIC, branch: str = "main") -> SeriesKey:
    return SeriesKey(build.repository_id, branch, SUITE, metric, platform, f"fp-{platform}")


def changes(db) -> list[AlertChange]:  # type: ignore[no-untyped-def]
    with db.session() as session:
        rows = list(session.scalars(select(AlertChange).order_by(AlertChange.id)))
        for row in rows:
            _ = row.alert.state
        return rows


# ---------------------------------------------------------------- series and marking

def test_a_stored_results_document_marks_its_series_dirty(client, app, db):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app, "cpu")
    job = claim(client, headers).get_json()["job"]
    assert client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers).status_code == 201
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(DetectionState)) == 0  # marked by the delivery
    assert deliver_stored_runs(db) == 1
    with db.session() as session:
        states = list(session.scalars(select(DetectionState)))
    assert {s.description["key"]["metric"] for s in states} == {"output_throughput", "itl_p50", "items:gsm8k"}
    assert all(s.dirty for s in states)
    assert {s.description["key"]["branch"] for s in states} == {"main"}


def test_a_document_with_nan_is_refused_before_storage_and_marks_nothing(client, app, db):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app, "cpu")
    job = claim(client, headers).get_json()["job"]
    body = raw(document()).replace(b"1210.4", b"NaN")
    assert client.post(f"/api/v1/jobs/{job['id']}/complete", data=body, headers=headers).status_code == 422
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(DetectionState)) == 0


def test_points_follow_the_branch_history_not_the_order_results_arrived(build, db):
    shas = build.branch(5)
    for value in reversed(shas):                   # newest commit measured first
        build.result(value, "rocm", [float(shas.index(value))])
    build.result(shas[2], "rocm", [2.5])           # a rerun adds samples to the same point
    with db.session() as session:
        series = load_series(session, key(build))
    assert series.ordered_by == "branch"
    assert [p.sha for p in series.points] == shas
    assert [p.position for p in series.points] == [0, 1, 2, 3, 4]
    assert series.points[2].samples == [2.0, 2.5] and len(series.points[2].run_ids) == 2


def test_two_runs_of_one_series_leave_one_dirty_state_row(build, db):
    (value,) = build.branch(1)
    build.result(value, "rocm", [1.0])
    build.result(value, "rocm", [1.1])
    with db.session() as session:
        rows = list(session.scalars(select(DetectionState)))
    assert len(rows) == 1 and rows[0].dirty and rows[0].series_key == key(build).digest


def test_an_incremental_read_loads_only_the_most_recent_commits(build, db):
    shas = build.branch(12)
    for i, value in enumerate(shas):
        build.result(value, "rocm", [float(i)])
    with db.session() as session:
        recent = load_series(session, key(build), last=5)
    assert [p.sha for p in recent.points] == shas[-5:] and [p.position for p in recent.points] == [7, 8, 9, 10, 11]


def test_commits_dropped_by_a_force_push_leave_the_series(build, db):
    shas = build.branch(4)
    for i, value in enumerate(shas):
        build.result(value, "rocm", [float(i)])
    with db.session() as session:
        commit_id = session.scalar(select(Commit.id).where(Commit.sha == shas[3]))
        session.query(BranchCommit).filter(BranchCommit.commit_id == commit_id).update({"active": False})
    with db.session() as session:
        assert [p.sha for p in load_series(session, key(build)).points] == shas[:3]


def test_without_branch_history_points_follow_the_queue_order(build, db):
    first, second, third = "1" * 40, "2" * 40, "3" * 40
    for value in (first, second, third):
        build.result(value, "rocm", [1.0])
    with db.session() as session:
        series = load_series(session, key(build))
    assert series.ordered_by == "queue"
    assert [p.sha for p in series.points] == [first, second, third]
    with db.session() as session:
        assert [p.sha for p in load_series(session, key(build), last=2).points] == [second, third]


# ---------------------------------------------------------------- performance alerts

def two_platform_history(build: Builder, *, rocm_change: float, cuda_change: float, n: int = 40, at: int = 30,
                         cuda_until: int | None = None) -> list[str]:
    shas = build.branch(n)
    build.history(shas, "rocm", step(n, at, 1000.0, rocm_change), seed=1)
    cuda_shas = shas[:cuda_until] if cuda_until is not None else shas
    build.history(cuda_shas, "cuda", step(len(cuda_shas), at, 3000.0, cuda_change), seed=2)
    return shas


def test_a_rocm_only_slowdown_is_one_platform_specific_regression(build, db):
    shas = two_platform_history(build, rocm_change=-0.18, cuda_change=0.0)
    scan_dirty(db)
    (change,) = changes(db)
    assert change.platform == "rocm" and change.is_regression and change.classification == "platform_specific"
    assert change.relative_change == pytest.approx(-0.18, abs=0.02)
    assert change.ci_low < change.relative_change < change.ci_high and change.p_value < 1e-3
    assert change.suspected_commits == [shas[30]]
    assert change.alert.state == AlertState.new and change.alert.kind == "performance"
    with db.session() as session:
        alert = session.get(Alert, change.alert_id)
        assert (session.get(Commit, alert.good_commit_id).sha, session.get(Commit, alert.bad_commit_id).sha) == \
            (shas[29], shas[30])


def test_scanning_again_and_rescanning_do_not_duplicate_alerts(build, db):
    two_platform_history(build, rocm_change=-0.18, cuda_change=0.0)
    scan_dirty(db)
    report = rescan(db)
    assert report.created == [] and report.updated >= 1
    assert len(changes(db)) == 1
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(DetectionState).where(DetectionState.dirty)) == 0


def test_a_change_on_both_platforms_is_common_and_grouped_in_one_alert(build, db):
    two_platform_history(build, rocm_change=-0.15, cuda_change=-0.15)
    scan_dirty(db)
    rows = changes(db)
    assert sorted(c.platform for c in rows) == ["cuda", "rocm"]
    assert {c.classification for c in rows} == {"common"}
    assert len({c.alert_id for c in rows}) == 1


def test_the_suspects_span_the_unmeasured_commits_of_the_range(build, db):
    shas = build.branch(60)
    measured = shas[::2]                            # every other commit measured
    build.history(measured, "rocm", step(30, 20, 1000.0, -0.2), seed=3)
    scan_dirty(db)
    (change,) = changes(db)
    assert change.suspected_commits == [shas[39], shas[40]]


def test_an_inconclusive_change_queues_the_other_platform_at_both_ends(build, db):
    shas = two_platform_history(build, rocm_change=-0.18, cuda_change=0.0, cuda_until=25)
    report = scan_dirty(db)
    (change,) = changes(db)
    assert change.classification == "inconclusive" and change.details["missing"] == ["cuda"]
    with db.session() as session:
        jobs = list(session.scalars(select(Job).where(Job.reason == JobReason.confirm).order_by(Job.id)))
        assert [(session.get(Commit, j.commit_id).sha, j.platform) for j in jobs] == \
            [(shas[29], "cuda"), (shas[30], "cuda")]
    assert sorted(report.confirm_jobs) == [j.id for j in jobs]
    # The confirmation results arrive: the question answers itself.
    build.history([shas[29], shas[30]], "cuda", [3000.0, 3000.0], seed=4, repeats=5)
    scan_dirty(db)
    (change,) = changes(db)
    assert change.classification == "platform_specific"


def test_an_improvement_is_recorded_but_not_alarmed(build, db, settings):
    from app.core.config import use_settings
    shas = build.branch(40)
    build.history(shas, "rocm", step(40, 30, 1000.0, +0.2), seed=5)
    with use_settings(replace(settings, github_token="t")):
        scan_dirty(db)
    (change,) = changes(db)
    assert not change.is_regression and not change.alert.is_regression
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(CommitStatusUpdate)
                              .where(CommitStatusUpdate.state == "failure")) == 0


def test_a_new_regression_turns_the_bad_commit_status_to_failure(build, db, settings):
    from app.core.config import use_settings
    shas = two_platform_history(build, rocm_change=-0.18, cuda_change=0.0)
    with use_settings(replace(settings, github_token="t")):
        scan_dirty(db)
    with db.session() as session:
        (status,) = session.scalars(select(CommitStatusUpdate).where(CommitStatusUpdate.state == "failure"))
    assert status.sha == shas[30] and "rocm" in status.context
    assert status.description.startswith(f"{METRIC} -1") and status.description.endswith("on rocm (platform-specific)")


def test_a_later_change_that_restores_the_level_marks_the_regression_fixed(build, db):
    shas = build.branch(60)
    levels = [1000.0 if i < 25 or i >= 45 else 850.0 for i in range(60)]
    build.history(shas[:40], "rocm", levels[:40], seed=6)
    scan_dirty(db)
    (regression,) = changes(db)
    assert regression.is_regression and regression.alert.state == AlertState.new
    build.history(shas[40:], "rocm", levels[40:], seed=7)
    report = scan_dirty(db)
    rows = changes(db)
    assert [c.is_regression for c in rows] == [True, False]
    assert rows[0].alert.state == AlertState.fixed and report.fixed == [rows[0].alert_id]
    assert rows[1].details["restores"] == rows[0].id


def test_a_wrong_direction_metric_counts_increases_as_regressions(build, db):
    shas = build.branch(40)
    build.history(shas, "rocm", step(40, 30, 8.0, +0.25), seed=8, metric="itl_p50", direction="lower_is_better")
    scan_dirty(db)
    (change,) = changes(db)
    assert change.metric == "itl_p50" and change.is_regression and change.relative_change > 0


@pytest.mark.parametrize("levels", [
    [1000.0] * 5,                                      # too few points
    [1000.0] * 40,                                     # all equal
])
def test_bad_series_give_no_alert(build, db, levels):
    shas = build.branch(len(levels))
    for value, level in zip(shas, levels):
        build.result(value, "rocm", [level, level])
    report = scan_dirty(db)
    assert report.series >= 1 and changes(db) == []


# ---------------------------------------------------------------- accuracy and hazards

def vectors(correct: int, total: int = 200, flip_from: int = 0) -> list[int]:
    return [1 if (i + flip_from) % total < correct else 0 for i in range(total)]


def test_an_accuracy_drop_is_found_with_the_paired_exact_mcnemar_test(build, db):
    shas = build.branch(6)
    good = [1] * 160 + [0] * 40
    bad = [1] * 120 + [0] * 80                          # 40 items right before, wrong after
    for i, value in enumerate(shas):
        build.result(value, "rocm", items=good if i < 4 else bad, extra={"accuracy": [0.8]})
    scan_dirty(db)
    (change,) = [c for c in changes(db) if c.metric == "items:gsm8k"]
    assert change.alert.kind == "accuracy" and change.is_regression
    assert change.details["method"] == "mcnemar_exact" and change.details["discordant"] == [40, 0]
    assert change.p_value == pytest.approx(stats.binomtest(0, 40, 0.5).pvalue)
    assert change.details["difference"] == pytest.approx(-0.2)


def test_equal_accuracy_with_different_items_raises_nothing(build, db):
    shas = build.branch(6)
    for i, value in enumerate(shas):
        build.result(value, "rocm", items=vectors(160, flip_from=i * 3))
    scan_dirty(db)
    assert changes(db) == []


def test_hazards_arriving_out_of_order_make_one_alert_at_the_runs_first_commit(build, db):
    """Runners finish in any order: a run of commits with hazards seen first from its later
    commits is still one alert, moved back to the run's first commit when that one lands."""
    shas = build.branch(6)
    for i in (0, 3, 4):
        build.result(shas[i], "rocm-sim", [0.0 if i == 0 else 5.0], metric="hazards", direction="lower_is_better")
    scan_dirty(db)
    build.result(shas[2], "rocm-sim", [5.0], metric="hazards", direction="lower_is_better")
    build.result(shas[1], "rocm-sim", [0.0], metric="hazards", direction="lower_is_better")
    scan_dirty(db)
    (change,) = changes(db)
    assert change.suspected_commits == [shas[2]]
    with db.session() as session:
        assert session.get(Commit, session.get(Alert, change.alert_id).bad_commit_id).sha == shas[2]
    build.result(shas[5], "rocm-sim", [0.0], metric="hazards", direction="lower_is_better")
    scan_dirty(db)
    (change,) = changes(db)
    assert change.alert.state == AlertState.fixed


def test_hazards_from_the_branchs_first_commit_stay_one_change_scan_after_scan(build, db):
    """A platform racy from the start (its first measured commit, position 0) is one alert with
    one change however many later commits and scans repeat the count."""
    shas = build.branch(5)
    for value in shas:
        build.result(value, "rocm-sim", [30.0], metric="hazards", direction="lower_is_better")
        scan_dirty(db)
    (change,) = changes(db)
    assert change.details["bad_position"] == 0 and change.after_value == 30.0
    assert change.alert.state == AlertState.new


def test_a_hazard_count_above_zero_is_a_correctness_alert_until_it_returns_to_zero(build, db):
    shas = build.branch(6)
    for i, value in enumerate(shas[:4]):
        build.result(value, "cuda-sim", [0.0], metric="stream_hazards", direction="lower_is_better")
        build.result(value, "rocm-sim", [0.0 if i < 3 else 2.0], metric="stream_hazards",
                     direction="lower_is_better")
    scan_dirty(db)
    (change,) = changes(db)
    assert change.alert.kind == "correctness" and change.platform == "rocm-sim" and change.after_value == 2.0
    assert change.classification == "platform_specific"
    for value in shas[4:]:
        build.result(value, "rocm-sim", [0.0], metric="stream_hazards", direction="lower_is_better")
    scan_dirty(db)
    (change,) = changes(db)
    assert change.alert.state == AlertState.fixed


def test_the_detection_duty_is_registered_for_the_background_loop():
    from app.wiring import duties
    assert any(d.name == "detection" and d.run is scan_dirty for d in duties())
    assert detection_service.DUTIES[0].name == "detection"
    assert math.isfinite(detection_service.DUTIES[0].interval_s)


def test_a_metric_with_its_own_minimum_magnitude_ignores_smaller_changes(build, db):
    from app.detection.service import MIN_RELATIVE
    shas = build.branch(40)
    build.history(shas, "rocm", step(40, 30, 50.0, +0.04), cv=0.002, seed=9, metric="itl_p99",
                  direction="lower_is_better")
    build.history(shas, "rocm", step(40, 30, 8.0, +0.04), cv=0.002, seed=9, metric="itl_p50",
                  direction="lower_is_better")
    scan_dirty(db)
    assert MIN_RELATIVE["itl_p99"] > 0.04
    assert [c.metric for c in changes(db)] == ["itl_p50"]


def test_a_failing_series_stays_dirty_and_does_not_stop_the_others(build, db, monkeypatch):
    shas = build.branch(12)
    for value in shas:
        build.result(value, "rocm", [1000.0])
        build.result(value, "cuda", [3000.0])
    real = detection_service.scan_series

    def broken_on_rocm(session, series_key, *, full):  # type: ignore[no-untyped-def]
        if series_key.platform == "rocm":
            raise RuntimeError("boom")
        return real(session, series_key, full=full)

    monkeypatch.setattr(detection_service, "scan_series", broken_on_rocm)
    report = scan_dirty(db)
    assert report.series == 1
    with db.session() as session:
        dirty = {s.description["key"]["platform"]: s.dirty for s in session.scalars(select(DetectionState))}
    assert dirty == {"rocm": True, "cuda": False}


def test_a_result_stored_while_its_series_is_scanned_keeps_the_series_dirty(build, db, monkeypatch):
    shas = build.branch(12)
    for value in shas[:11]:
        build.result(value, "rocm", [1000.0])
    real = detection_service.scan_series

    def scan_while_a_run_arrives(session, series_key, *, full):  # type: ignore[no-untyped-def]
        build.result(shas[11], "rocm", [1000.0])     # another process completes a job meanwhile
        return real(session, series_key, full=full)

    monkeypatch.setattr(detection_service, "scan_series", scan_while_a_run_arrives)
    scan_dirty(db)
    with db.session() as session:
        (state,) = session.scalars(select(DetectionState))
    assert state.dirty and state.last_scanned_at is not None


def test_a_count_that_leaves_zero_is_recorded_without_infinite_numbers(build, db):
    shas = build.branch(30)
    for i, value in enumerate(shas):
        build.result(value, "rocm", [0.0, 0.0] if i < 20 else [5.0, 5.0], metric="retractions",
                     direction="lower_is_better")
    scan_dirty(db)
    (change,) = changes(db)
    assert change.is_regression and change.before_value == 0.0 and change.after_value == 5.0
    assert change.details["change"]["ci_low"] is None


def test_platforms_measured_at_different_commits_share_one_alert_narrowed_to_the_overlap(build, db):
    shas = build.branch(60)
    build.history(shas, "rocm", step(60, 41, 1000.0, -0.15), seed=10)
    every_third = shas[::3]                         # cuda measured at 0, 3, ..., 39, 42, ...
    build.history(every_third, "cuda", step(20, 14, 3000.0, -0.15), seed=11)
    scan_dirty(db)
    rows = changes(db)
    assert sorted(c.platform for c in rows) == ["cuda", "rocm"]
    assert len({c.alert_id for c in rows}) == 1
    with db.session() as session:
        alert = session.get(Alert, rows[0].alert_id)
        assert (session.get(Commit, alert.good_commit_id).sha, session.get(Commit, alert.bad_commit_id).sha) == \
            (shas[40], shas[41])
    cuda = next(c for c in rows if c.platform == "cuda")
    assert cuda.suspected_commits == [shas[40], shas[41], shas[42]]


def test_a_change_refined_by_later_data_moves_its_range_instead_of_opening_another(build, db):
    shas = build.branch(40)
    build.history(shas[:33], "rocm", step(33, 30, 1000.0, -0.2), seed=12)
    scan_dirty(db)
    (first,) = changes(db)
    with db.session() as session:
        change = session.get(AlertChange, first.id)
        change.details = {**change.details, "bad_position": 31, "good_position": 30}   # as if found one late
        change.suspected_commits = [shas[31]]
        change.alert.good_commit_id = session.scalar(select(Commit.id).where(Commit.sha == shas[30]))
        change.alert.bad_commit_id = session.scalar(select(Commit.id).where(Commit.sha == shas[31]))
    build.history(shas[33:], "rocm", step(7, 0, 800.0, 0.0), seed=13)
    scan_dirty(db)
    (refined,) = changes(db)
    assert refined.id == first.id and refined.details["bad_position"] == 30
    assert refined.suspected_commits == [shas[30]]
    with db.session() as session:
        alert = session.get(Alert, refined.alert_id)
        assert session.get(Commit, alert.bad_commit_id).sha == shas[30]


# ---------------------------------------------------------------- withdrawal and drift

def test_a_regression_that_more_data_no_longer_supports_is_withdrawn(build, db, settings):
    from app.core.config import use_settings
    levels = excursion_levels(40, [963.0, 964.0, 965.0], 20, seed=21)
    shas = build.branch(len(levels))
    with use_settings(replace(settings, github_token="t")):
        for value, level in zip(shas[:43], levels[:43]):
            build.result(value, "rocm", [level])
        scan_dirty(db)
        (change,) = changes(db)
        assert change.is_regression and change.alert.state == AlertState.new
        for value, level in zip(shas[43:], levels[43:]):
            build.result(value, "rocm", [level])
        report = scan_dirty(db)
    (change,) = changes(db)
    assert report.withdrawn == [change.id] and change.details["withdrawn"]["measured_after"] == 23
    assert change.alert.state == AlertState.invalid and change.alert.updated_by == "detector"
    assert change.alert.note.startswith("withdrawn by the detector")
    with db.session() as session:
        states = [(s.sha, s.state) for s in session.scalars(select(CommitStatusUpdate).order_by(CommitStatusUpdate.id))]
    assert states == [(shas[40], "failure"), (shas[40], "success")]


def test_a_regression_that_holds_is_never_withdrawn(build, db):
    shas = build.branch(80)
    levels = step(80, 30, 1000.0, -0.06)
    build.history(shas[:35], "rocm", levels[:35], seed=22)
    scan_dirty(db)
    for start in range(35, 80, 5):
        build.history(shas[start:start + 5], "rocm", levels[start:start + 5], seed=start)
        assert scan_dirty(db).withdrawn == []
    (change,) = changes(db)
    assert change.alert.state == AlertState.new and "withdrawn" not in change.details


def test_a_slow_accuracy_drift_becomes_one_alert_over_the_commits_that_drifted(build, db):
    shas = build.branch(12)
    for k, value in enumerate(shas):            # two more of 400 questions wrong at every commit
        build.result(value, "rocm", items=[0] * (2 * k) + [1] * (400 - 2 * k))
    scan_dirty(db)
    (change,) = changes(db)
    assert change.alert.kind == "accuracy" and change.is_regression and change.details["drift"] is True
    # p = 2 * 0.5**12 < 1e-3 first at six commits from the anchor (12 questions flipped).
    assert change.details["discordant"] == [12, 0] and change.p_value == pytest.approx(stats.binomtest(0, 12).pvalue)
    assert change.suspected_commits == shas[1:7]
    assert rescan(db).created == []


# ---------------------------------------------------------------- the duty's arrival check

def detection_due(db, since) -> bool:  # type: ignore[no-untyped-def]
    (duty,) = detection_service.DUTIES
    with db.session() as session:
        return duty.due(session, since)


def seconds_ago(seconds: float) -> datetime:
    return utcnow() - timedelta(seconds=seconds)


def mark_earlier(db, seconds: float) -> None:  # type: ignore[no-untyped-def]
    """Move every series' mark back, as if its run had arrived before the last pass."""
    with db.session() as session:
        for state in session.scalars(select(DetectionState)):
            state.marked_at = seconds_ago(seconds)


def test_a_series_marked_since_the_last_pass_makes_detection_due(build, db):
    build.result(build.branch(1)[0], "rocm", [1000.0])
    assert detection_due(db, None) and detection_due(db, seconds_ago(5))


def test_a_series_marked_before_the_last_pass_does_not(build, db):
    build.result(build.branch(1)[0], "rocm", [1000.0])
    mark_earlier(db, 10)
    assert not detection_due(db, seconds_ago(5))


def test_detection_is_not_due_again_within_a_second_of_its_last_pass(build, db):
    last_pass = seconds_ago(0.5)
    build.result(build.branch(1)[0], "rocm", [1000.0])  # marked after that pass
    assert not detection_due(db, last_pass)


def test_a_series_whose_scan_failed_waits_for_the_interval_not_for_arrivals(build, db, monkeypatch):
    build.result(build.branch(1)[0], "rocm", [1000.0])
    mark_earlier(db, 10)

    def broken(session, series_key, *, full):  # type: ignore[no-untyped-def]
        raise RuntimeError("a broken series")
    monkeypatch.setattr(detection_service, "scan_series", broken)
    scan_dirty(db)
    with db.session() as session:
        (state,) = session.scalars(select(DetectionState))
    assert state.dirty, "kept for the next regular pass"
    assert not detection_due(db, seconds_ago(5))
