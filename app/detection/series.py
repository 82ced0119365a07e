"""Series: one comparable history (repository, branch, suite, metric, platform, context
fingerprint) and its points in the branch's first-parent order.

Points are ordered by `branch_commits.position` of the branch's active history, never by time.
Until a repository has any branch history (no push webhook or backfill yet), a series falls
back to the order in which each commit's first job was queued, and says so (`ordered_by`).
Each point keeps every raw sample of every run measured at that commit. Per-item correctness
vectors form their own series under the metric name `items:<name>`.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from sqlalchemy import false, func, select
from sqlalchemy.orm import Session

from app.core.models import Branch, BranchCommit, Commit, ItemResult, Job, Measurement, Repository, Run, Suite

ITEMS_PREFIX = "items:"
HAZARD_METRICS = frozenset({"hazards", "stream_hazards"})


@dataclass(frozen=True)
class SeriesKey:
    repository_id: int
    branch: str
    suite: str
    metric: str
    platform: str
    context_fingerprint: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()

    @property
    def is_items(self) -> bool:
        return self.metric.startswith(ITEMS_PREFIX)

    @property
    def is_hazard(self) -> bool:
        return self.metric in HAZARD_METRICS

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "SeriesKey":
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})


@dataclass
class SeriesPoint:
    commit_id: int
    sha: str
    position: int
    samples: list[float] = field(default_factory=list)
    run_ids: list[int] = field(default_factory=list)
    correct: list[list[int]] = field(default_factory=list)   # item vectors, one per run


@dataclass
class Series:
    key: SeriesKey
    ordered_by: str                      # "branch" (first-parent history) or "queue" (fallback)
    direction: str = "higher_is_better"
    unit: str = ""
    points: list[SeriesPoint] = field(default_factory=list)


def branch_positions(session: Session, repository_id: int, branch: str) -> dict[int, int] | None:
    """commit id -> position on the branch's active history; None when the branch has none."""
    branch_id = session.scalar(select(Branch.id).where(Branch.repository_id == repository_id,
                                                       Branch.name == branch))
    if branch_id is None:
        return None
    rows = session.execute(select(BranchCommit.commit_id, BranchCommit.position)
                           .where(BranchCommit.branch_id == branch_id, BranchCommit.active.is_(True))).all()
    return {commit_id: position for commit_id, position in rows} or None


def has_branch_history(session: Session, repository_id: int) -> bool:
    return session.scalar(select(BranchCommit.commit_id).join(Branch, Branch.id == BranchCommit.branch_id)
                          .where(Branch.repository_id == repository_id, BranchCommit.active.is_(True))
                          .limit(1)) is not None


def branches_of_commit(session: Session, repository: Repository, commit_id: int) -> list[str]:
    """Branches whose active history holds the commit; the default branch when the repository
    has no history yet (queue-order fallback); none for a commit only seen on a pull request."""
    if not has_branch_history(session, repository.id):
        return [repository.default_branch]
    return sorted(session.scalars(select(Branch.name).join(BranchCommit, BranchCommit.branch_id == Branch.id)
                                  .where(Branch.repository_id == repository.id, BranchCommit.commit_id == commit_id,
                                         BranchCommit.active.is_(True))))


def series_keys_for_run(session: Session, run: Run) -> list[SeriesKey]:
    commit = session.get(Commit, run.commit_id)
    suite = session.get(Suite, run.suite_id)
    if commit is None or suite is None:
        return []
    repository = session.get(Repository, commit.repository_id)
    assert repository is not None
    metrics = [m.metric for m in run.measurements] + [ITEMS_PREFIX + i.name for i in run.items]
    return [SeriesKey(repository.id, branch, suite.name, metric, run.platform, run.context_fingerprint)
            for branch in branches_of_commit(session, repository, commit.id) for metric in metrics]


def _queue_positions(session: Session, commit_ids: Iterable[int]) -> dict[int, int]:
    """Fallback order: commits ranked by their first queued job."""
    ids = list(set(commit_ids))
    if not ids:
        return {}
    rows = session.execute(select(Job.commit_id, func.min(Job.id)).where(Job.commit_id.in_(ids))
                           .group_by(Job.commit_id)).all()
    first = {commit_id: job_id for commit_id, job_id in rows}
    ordered = sorted(ids, key=lambda c: (first.get(c, 1 << 62), c))
    return {commit_id: rank for rank, commit_id in enumerate(ordered)}


def _active_branch_id(session: Session, repository_id: int, branch: str) -> int | None:
    branch_id = session.scalar(select(Branch.id).where(Branch.repository_id == repository_id, Branch.name == branch))
    if branch_id is None:
        return None
    active = session.scalar(select(BranchCommit.commit_id).where(BranchCommit.branch_id == branch_id,
                                                                 BranchCommit.active.is_(True)).limit(1))
    return branch_id if active is not None else None


def load_series(session: Session, key: SeriesKey, last: int | None = None) -> Series:
    """The series' points in order; with `last`, only the most recent `last` measured commits
    (incremental detection reads the window it re-examines, not the whole history)."""
    branch_id = _active_branch_id(session, key.repository_id, key.branch)
    series = Series(key=key, ordered_by="branch" if branch_id is not None else "queue")
    base = (select(Run.id, Run.commit_id, Commit.sha)
            .join(Commit, Commit.id == Run.commit_id).join(Suite, Suite.id == Run.suite_id)
            .where(Commit.repository_id == key.repository_id, Suite.name == key.suite,
                   Run.platform == key.platform, Run.context_fingerprint == key.context_fingerprint))
    if branch_id is not None:
        base = base.join(BranchCommit, (BranchCommit.commit_id == Run.commit_id) & (BranchCommit.branch_id == branch_id)
                         & BranchCommit.active.is_(True))
    if key.is_items:
        base = base.join(ItemResult, ItemResult.run_id == Run.id).where(
            ItemResult.name == key.metric[len(ITEMS_PREFIX):])
        series.unit, series.direction = "fraction correct", "higher_is_better"
    else:
        base = base.join(Measurement, Measurement.run_id == Run.id).where(Measurement.metric == key.metric)
    positions: dict[int, int] = {}
    if last is not None:
        if branch_id is not None:
            # Walk the branch from its head and probe each commit for a run of the series: the
            # planner stops after `last` hits (index scans), where joining every run of the
            # series first read all 50,000 of a long history (bench/history_scale.py).
            suite_id = select(Suite.id).where(Suite.name == key.suite).scalar_subquery()
            measured = select(Run.id).where(Run.commit_id == BranchCommit.commit_id, Run.suite_id == suite_id,
                                            Run.platform == key.platform,
                                            Run.context_fingerprint == key.context_fingerprint)
            if key.is_items:
                measured = measured.join(ItemResult, ItemResult.run_id == Run.id).where(
                    ItemResult.name == key.metric[len(ITEMS_PREFIX):])
            else:
                measured = measured.join(Measurement, Measurement.run_id == Run.id).where(Measurement.metric == key.metric)
            recent_rows = session.execute(
                select(BranchCommit.commit_id, BranchCommit.position)
                .where(BranchCommit.branch_id == branch_id, BranchCommit.active.is_(True), measured.exists())
                .order_by(BranchCommit.position.desc()).limit(last)).all()
            positions = {commit_id: position for commit_id, position in recent_rows}
            # The window is every measured commit from its oldest position on: a range, not an
            # IN list of thousands of ids (measured: 5,000 ids cost the planner more than the read).
            base = base.where(BranchCommit.position >= min(positions.values())) if positions else base.where(false())
        else:
            measured = set(session.scalars(base.with_only_columns(Run.commit_id).distinct()))
            order = _queue_positions(session, measured)
            keep = sorted(measured, key=lambda c: order[c])[-last:]
            positions = {c: order[c] for c in keep}
            base = base.where(Run.commit_id.in_(keep))
    # The whole history on a branch: positions come with the rows (one query, not two).
    inline_positions = branch_id is not None and last is None
    if key.is_items:
        query = base.add_columns(ItemResult.correct)
    else:
        query = base.add_columns(Measurement.samples, Measurement.direction, Measurement.unit)
    if inline_positions:
        query = query.add_columns(BranchCommit.position)
    rows = session.execute(query.order_by(Run.id)).all()
    if rows and not key.is_items:
        series.direction, series.unit = rows[-1][4], rows[-1][5]
    if inline_positions:
        positions = {row[1]: row[-1] for row in rows}
    if branch_id is None and last is None:
        positions = _queue_positions(session, (row[1] for row in rows))
    points: dict[int, SeriesPoint] = {}
    for row in rows:
        run_id, commit_id, sha = row[0], row[1], row[2]
        point = points.get(commit_id)
        if point is None:
            point = points[commit_id] = SeriesPoint(commit_id=commit_id, sha=sha, position=positions[commit_id])
        point.run_ids.append(run_id)
        if key.is_items:
            vector = [1 if v else 0 for v in row[3]]
            point.correct.append(vector)
            if vector:
                point.samples.append(sum(vector) / len(vector))
        else:
            point.samples.extend(map(float, row[3]))
    series.points = sorted(points.values(), key=lambda p: p.position)
    return series


def series_keys(session: Session, repository_id: int | None = None) -> list[SeriesKey]:
    """Every series with data (for a full re-scan), on every branch with history or the
    default branch of a repository without any."""
    measurement_rows = (select(Commit.repository_id, Suite.name, Measurement.metric, Run.platform,
                               Run.context_fingerprint)
                        .join(Run, Run.commit_id == Commit.id).join(Suite, Suite.id == Run.suite_id)
                        .join(Measurement, Measurement.run_id == Run.id).distinct())
    item_rows = (select(Commit.repository_id, Suite.name, ItemResult.name, Run.platform, Run.context_fingerprint)
                 .join(Run, Run.commit_id == Commit.id).join(Suite, Suite.id == Run.suite_id)
                 .join(ItemResult, ItemResult.run_id == Run.id).distinct())
    if repository_id is not None:
        measurement_rows = measurement_rows.where(Commit.repository_id == repository_id)
        item_rows = item_rows.where(Commit.repository_id == repository_id)
    found = [(r, s, m, p, f) for r, s, m, p, f in session.execute(measurement_rows)]
    found += [(r, s, ITEMS_PREFIX + m, p, f) for r, s, m, p, f in session.execute(item_rows)]
    branches: dict[int, list[str]] = {}
    keys = []
    for repo_id, suite, metric, platform, fingerprint in sorted(found):
        if repo_id not in branches:
            repository = session.get(Repository, repo_id)
            assert repository is not None
            names = list(session.scalars(select(Branch.name).where(Branch.repository_id == repo_id)
                                         .order_by(Branch.name))) if has_branch_history(session, repo_id) else []
            branches[repo_id] = names or [repository.default_branch]
        keys.extend(SeriesKey(repo_id, b, suite, metric, platform, fingerprint) for b in branches[repo_id])
    return keys


def sibling_series(session: Session, key: SeriesKey, last: int | None = None) -> dict[str, Series]:
    """The same suite and metric on the same branch, one series per other platform (the context
    fingerprint with the most measured commits on that platform, since devices differ)."""
    rows = session.execute(select(Run.platform, Run.context_fingerprint, func.count(func.distinct(Run.commit_id)))
                           .join(Commit, Commit.id == Run.commit_id).join(Suite, Suite.id == Run.suite_id)
                           .where(Commit.repository_id == key.repository_id, Suite.name == key.suite,
                                  Run.platform != key.platform)
                           .group_by(Run.platform, Run.context_fingerprint)).all()
    best: dict[str, tuple[int, str]] = {}
    for platform, fingerprint, count in rows:
        if platform not in best or (count, fingerprint) > best[platform]:
            best[platform] = (count, fingerprint)
    return {platform: load_series(session, SeriesKey(key.repository_id, key.branch, key.suite, key.metric,
                                                     platform, fingerprint), last=last)
            for platform, (_, fingerprint) in sorted(best.items())}
