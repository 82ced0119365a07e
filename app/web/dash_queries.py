"""Windowed reads behind the dashboard: a page reads the rows it shows and, for a change, the
one measured commit before them, never a whole series.

A "series" here is (suite, platform, context fingerprint, metric) on a branch's first-parent
history; without branch history a repository falls back to the order jobs were queued.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.models import Branch, BranchCommit, Commit, Job, Measurement, Repository, Run, Suite


@dataclass
class Reading:
    """One (commit, suite, platform, fingerprint, metric): every sample of the commit's runs."""

    commit_id: int
    suite: str
    suite_id: int
    platform: str
    fingerprint: str
    metric: str
    unit: str
    direction: str
    samples: list[float] = field(default_factory=list)
    simulated: bool = False


def branch_id(session: Session, repository: Repository, name: str | None = None) -> int | None:
    return session.scalar(select(Branch.id).where(Branch.repository_id == repository.id,
                                                  Branch.name == (name or repository.default_branch)))


def _first_jobs():  # type: ignore[no-untyped-def]
    """Each commit's first job id: the queue order of commits without branch history."""
    return select(Job.commit_id, func.min(Job.id).label("first")).group_by(Job.commit_id)


def positions(session: Session, branch: int | None, commit_ids: list[int]) -> dict[int, int]:
    """Where each commit stands in series order: its branch position, or without branch history
    the id of its first job (the order commits were queued)."""
    if not commit_ids:
        return {}
    if branch is None:
        return dict(session.execute(_first_jobs().where(Job.commit_id.in_(commit_ids))).all())
    return dict(session.execute(select(BranchCommit.commit_id, BranchCommit.position)
                                .where(BranchCommit.branch_id == branch, BranchCommit.active.is_(True),
                                       BranchCommit.commit_id.in_(commit_ids))).all())


def recent_commits(session: Session, repository: Repository, limit: int) -> tuple[list[Commit], int | None]:
    """The default branch's newest commits in first-parent order (newest first), or, without
    branch history, the commits with the newest jobs; and the branch id when there is one."""
    branch = branch_id(session, repository)
    if branch is not None:
        commits = list(session.scalars(
            select(Commit).join(BranchCommit, BranchCommit.commit_id == Commit.id)
            .where(BranchCommit.branch_id == branch, BranchCommit.active.is_(True))
            .order_by(BranchCommit.position.desc()).limit(limit)))
        if commits:
            return commits, branch
    return _commits_of_newest_jobs(session, repository, limit), None


def _commits_of_newest_jobs(session: Session, repository: Repository, limit: int) -> list[Commit]:
    """Walk the repository's jobs newest first, in growing windows, until `limit` distinct commits
    are found: a commit's jobs are queued together, so the first window nearly always suffices,
    and the page never groups every job the repository ever had."""
    window = 16 * limit
    while True:
        rows = session.scalars(select(Job.commit_id).where(Job.repository_id == repository.id)
                               .order_by(Job.id.desc()).limit(window)).all()
        newest_first = list(dict.fromkeys(rows))
        if len(newest_first) >= limit or len(rows) < window:
            break
        window *= 8
    wanted = newest_first[:limit]
    by_id = {c.id: c for c in session.scalars(select(Commit).where(Commit.id.in_(wanted)))}
    return [by_id[i] for i in wanted]


def readings(session: Session, commit_ids: list[int], metric: str | None = None) -> list[Reading]:
    """Every measurement of the given commits (optionally one metric), samples of repeated runs
    of one cell pooled, in the order the results documents listed them."""
    if not commit_ids:
        return []
    query = (select(Run.commit_id, Suite.name, Suite.id, Run.platform, Run.context_fingerprint, Run.simulated,
                    Measurement.metric, Measurement.unit, Measurement.direction, Measurement.samples)
             .join(Suite, Suite.id == Run.suite_id).join(Measurement, Measurement.run_id == Run.id)
             .where(Run.commit_id.in_(commit_ids)).order_by(Run.id, Measurement.id))
    if metric is not None:
        query = query.where(Measurement.metric == metric)
    found: dict[tuple[int, str, str, str, str], Reading] = {}
    for commit_id, suite, suite_id, platform, fingerprint, simulated, name, unit, direction, samples in session.execute(query):
        key = (commit_id, suite, platform, fingerprint, name)
        reading = found.get(key)
        if reading is None:
            reading = found[key] = Reading(commit_id, suite, suite_id, platform, fingerprint, name, unit, direction,
                                           simulated=simulated)
        reading.samples.extend(float(v) for v in samples)
    return list(found.values())


def previous_samples(session: Session, branch: int | None, reading: Reading, position: int | None
                     ) -> tuple[list[float], int | None]:
    """Samples and commit id of the last measured commit before `position` on the branch, for the
    same suite, platform, fingerprint and metric (one indexed query, newest first, limit 1);
    without branch history, `position` is the queue order from `positions`."""
    if position is None:
        return [], None
    query = (select(Run.commit_id).join(Measurement, Measurement.run_id == Run.id)
             .where(Run.suite_id == reading.suite_id, Run.platform == reading.platform,
                    Run.context_fingerprint == reading.fingerprint, Measurement.metric == reading.metric))
    commit_id = _previous_commit(session, query, branch, position)
    if commit_id is None:
        return [], None
    return _samples_at(session, commit_id, reading).get(reading.metric, []), commit_id


def previous_readings(session: Session, branch: int | None, found: list[Reading], position: int | None
                      ) -> dict[tuple[str, str, str, str], tuple[list[float], int | None]]:
    """For every reading of one commit, the samples of the last measured commit before it: one
    look-up per (suite, platform, fingerprint) for the commit, one for its samples of every
    metric; only a metric that commit lacks is looked up on its own."""
    result: dict[tuple[str, str, str, str], tuple[list[float], int | None]] = {}
    groups: dict[tuple[int, str, str], list[Reading]] = defaultdict(list)
    for reading in found:
        groups[(reading.suite_id, reading.platform, reading.fingerprint)].append(reading)
    for (suite_id, platform, fingerprint), members in groups.items():
        query = select(Run.commit_id).where(Run.suite_id == suite_id, Run.platform == platform,
                                            Run.context_fingerprint == fingerprint)
        commit_id = _previous_commit(session, query, branch, position) if position is not None else None
        samples = _samples_at(session, commit_id, members[0]) if commit_id is not None else {}
        for reading in members:
            key = (reading.suite, reading.platform, reading.fingerprint, reading.metric)
            if commit_id is None:
                result[key] = ([], None)                 # nothing of this series was measured before
            elif reading.metric in samples:
                result[key] = (samples[reading.metric], commit_id)
            else:
                result[key] = previous_samples(session, branch, reading, position)
    return result


def _previous_commit(session: Session, query, branch: int | None, position: int) -> int | None:  # type: ignore[no-untyped-def]
    if branch is None:
        first = _first_jobs().subquery()
        query = query.join(first, first.c.commit_id == Run.commit_id).where(first.c.first < position) \
            .order_by(first.c.first.desc())
    else:
        query = query.join(BranchCommit, (BranchCommit.commit_id == Run.commit_id) & (BranchCommit.branch_id == branch)
                           & BranchCommit.active.is_(True)).where(BranchCommit.position < position) \
            .order_by(BranchCommit.position.desc())
    return session.scalar(query.limit(1))


def _samples_at(session: Session, commit_id: int, like: Reading) -> dict[str, list[float]]:
    """Every metric's samples at `commit_id` for the series of `like` (runs pooled)."""
    found: dict[str, list[float]] = defaultdict(list)
    for metric, samples in session.execute(
            select(Measurement.metric, Measurement.samples).join(Run, Run.id == Measurement.run_id)
            .where(Run.commit_id == commit_id, Run.suite_id == like.suite_id, Run.platform == like.platform,
                   Run.context_fingerprint == like.fingerprint)):
        found[metric].extend(float(v) for v in samples)
    return found


def headline_metrics(all_readings: list[Reading]) -> dict[str, str]:
    """Per suite, the metric its results documents list first (e.g. decode throughput)."""
    headline: dict[str, str] = {}
    for reading in all_readings:
        headline.setdefault(reading.suite, reading.metric)
    return headline


def group_by_series(all_readings: list[Reading]) -> dict[tuple[str, str, str, str], list[Reading]]:
    grouped: dict[tuple[str, str, str, str], list[Reading]] = defaultdict(list)
    for reading in all_readings:
        grouped[(reading.suite, reading.platform, reading.fingerprint, reading.metric)].append(reading)
    return grouped
