"""The commit page (jobs on every platform, every metric with its change and verdict against the
previous measured commit), the job log page, and compare: two commits side by side, every
suite x metric x platform with the change, its 95 % interval and a verdict."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from flask import abort, render_template, request
from scipy import stats
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.clock import as_utc
from app.core.models import Alert, Bisect, CiUpload, Commit, Job, JobLog, Run, Runner
from app.detection.detector import DEFAULT_CONFIG
from app.jobs import artifacts
from app.web.dash_common import (
    Thresholds,
    arg_required,
    arg_sha,
    commit_or_404,
    is_worse,
    median,
    relative,
    repository_or_404,
    verdict_of,
)
from app.web.dash_queries import Reading, branch_id, positions, previous_readings, readings
from app.web.session import request_session


@dataclass
class Comparison:
    suite: str
    metric: str
    platform: str
    unit: str
    direction: str
    before: float | None
    after: float | None
    n_before: int
    n_after: int
    change: float | None
    ci: tuple[float, float] | None
    p_value: float | None
    verdict: str


def compare_samples(before: list[float], after: list[float], direction: str) -> tuple[
        float | None, tuple[float, float] | None, float | None, str]:
    """Relative change of the medians, a 95 % interval of the relative mean difference (Welch's
    standard error), the Mann-Whitney U p-value, and a verdict with the detector's thresholds:
    worse/better when p < alpha and the change is at least its minimum magnitude."""
    mid_before, mid_after = median(before), median(after)
    change = relative(mid_after, mid_before)
    if change is None or len(before) < 2 or len(after) < 2:
        return change, None, None, "too few samples" if change is not None else "missing"
    a, b = np.asarray(before), np.asarray(after)
    scale = abs(float(mid_before))
    spread = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    delta = float(b.mean() - a.mean())
    ci = ((delta - 1.96 * spread) / scale, (delta + 1.96 * spread) / scale)
    if np.ptp(np.concatenate([a, b])) == 0.0:
        p_value = 1.0
    else:
        p_value = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    if p_value < DEFAULT_CONFIG.alpha and abs(change) >= DEFAULT_CONFIG.min_relative:
        verdict = "worse" if is_worse(change, direction) else "better"
    else:
        verdict = "no change"
    return change, ci, p_value, verdict


def commit_page(sha: str) -> str:
    session = request_session()
    commit = commit_or_404(session, sha)
    repository = commit.repository
    jobs = list(session.scalars(select(Job).where(Job.commit_id == commit.id).order_by(Job.id)))
    runner_ids = {j.runner_id for j in jobs if j.runner_id is not None}
    runners = {r.id: r for r in session.scalars(select(Runner).where(Runner.id.in_(runner_ids)))} if runner_ids else {}
    branch = branch_id(session, repository)
    position = positions(session, branch, [commit.id]).get(commit.id)
    alerts = list(session.scalars(select(Alert).where(Alert.bad_commit_id == commit.id).order_by(Alert.id)))
    flagged = {(c.suite, c.metric, c.platform): c for a in alerts for c in a.changes}
    suites: dict[str, dict[str, Any]] = {}
    threshold = Thresholds(session)
    found = readings(session, [commit.id])
    previous = previous_readings(session, branch, found, position)
    for reading in found:
        table = suites.setdefault(reading.suite, {"platforms": [], "metrics": {}})
        if reading.platform not in table["platforms"]:
            table["platforms"].append(reading.platform)
        entry = table["metrics"].setdefault(reading.metric, {"unit": reading.unit, "direction": reading.direction,
                                                             "cells": {}})
        if reading.platform in entry["cells"]:
            continue
        before, before_id = previous[(reading.suite, reading.platform, reading.fingerprint, reading.metric)]
        value = median(reading.samples)
        change = relative(value, median(before))
        alert_change = flagged.get((reading.suite, reading.metric, reading.platform))
        least = threshold(reading.suite, reading.platform, reading.metric)
        verdict = verdict_of(alert_change.is_regression if alert_change else None, change, reading.direction, least)
        entry["cells"][reading.platform] = {
            "median": value, "min": min(reading.samples), "max": max(reading.samples), "n": len(reading.samples),
            "change": change, "verdict": verdict, "before_id": before_id, "simulated": reading.simulated,
            # Shaded past the detector's own minimum magnitude; the verdict says whether it is confirmed.
            "worse": change is not None and abs(change) >= least and is_worse(change, reading.direction)}
    before_ids = {c["before_id"] for t in suites.values() for e in t["metrics"].values() for c in e["cells"].values()}
    before_shas = _shas(session, {i for i in before_ids if i is not None})
    bisects = list(session.scalars(select(Bisect).where(Bisect.alert_id.in_([a.id for a in alerts])))) if alerts else []
    return render_template("commit.html", commit=commit, repository=repository, jobs=jobs, runners=runners,
                           uploads=_uploads(session, [j.id for j in jobs]),
                           suites=suites, alerts=alerts, bisects=bisects, before_shas=before_shas,
                           branch=repository.default_branch, durations={j.id: _duration(j) for j in jobs})


def _uploads(session: Session, job_ids: list[int]) -> dict[int, CiUpload]:
    """Where the uploaded runs of these jobs came from (CI provider and run), by job id."""
    if not job_ids:
        return {}
    rows = session.execute(select(Run.job_id, CiUpload).join(CiUpload, CiUpload.run_id == Run.id)
                           .where(Run.job_id.in_(job_ids)))
    return {job_id: upload for job_id, upload in rows}


def _shas(session: Session, ids: set[int]) -> dict[int, str]:
    if not ids:
        return {}
    return dict(session.execute(select(Commit.id, Commit.sha).where(Commit.id.in_(ids))).all())


def _duration(job: Job) -> float | None:
    started, finished = as_utc(job.started_at), as_utc(job.finished_at)
    return (finished - started).total_seconds() if started and finished else None


def job_page(job_id: int) -> str:
    session = request_session()
    job = session.get(Job, job_id)
    if job is None:
        abort(404, description=f"job {job_id} does not exist")
    log = "".join(session.scalars(select(JobLog.text).where(JobLog.job_id == job_id).order_by(JobLog.id)))
    runner = session.get(Runner, job.runner_id) if job.runner_id else None
    return render_template("job.html", job=job, log=log, runner=runner, duration=_duration(job),
                           artifacts=artifacts.listed(session, job_id))


def compare_page() -> str:
    session = request_session()
    repository = repository_or_404(session, arg_required("repository", "the repository's name"))
    sha_a, sha_b = arg_sha("a", required=True), arg_sha("b", required=True)
    assert sha_a is not None and sha_b is not None
    commit_a, commit_b = commit_or_404(session, sha_a, repository), commit_or_404(session, sha_b, repository)
    platforms_arg = request.args.get("platform", "").strip()
    by_key: dict[tuple[str, str, str], dict[int, Reading]] = {}
    for reading in readings(session, [commit_a.id, commit_b.id]):
        if platforms_arg and reading.platform != platforms_arg:
            continue
        by_key.setdefault((reading.suite, reading.metric, reading.platform), {}).setdefault(reading.commit_id, reading)
    rows = []
    for (suite, metric, platform), pair in sorted(by_key.items()):
        a, b = pair.get(commit_a.id), pair.get(commit_b.id)
        known = a or b
        assert known is not None
        before, after = (a.samples if a else []), (b.samples if b else [])
        change, ci, p_value, verdict = compare_samples(before, after, known.direction)
        if a is None or b is None:
            verdict = f"measured only at {'B' if a is None else 'A'}"
        rows.append(Comparison(suite, metric, platform, known.unit, known.direction, median(before), median(after),
                               len(before), len(after), change, ci, p_value, verdict))
    return render_template("compare.html", repository=repository, a=commit_a, b=commit_b, rows=rows)
