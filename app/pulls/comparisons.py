"""A pull request's head measured against its merge-base, as interleaved A/B rounds.

For each suite with `pull_requests = true` and each of its platforms, a comparison queues
`START_ROUNDS` rounds of ordinary jobs, base then head, in that order and at one priority, so
a runner claims them alternately. The first claim of a (platform, suite) pins the rest of the
pair's jobs to that runner (`Job.pinned_runner_id`), so machine-to-machine differences cancel.
The "pull-requests" duty evaluates comparisons marked dirty by stored runs and failed jobs:
while a metric is inconclusive it adds a round (pinned to the same runner) up to the suite's
`pr_max_rounds`; once every pair is decided it stores the verdicts, the classification and
the conclusion, queues the check run, the comment and the per-platform statuses, and sends
`signals.pull_request_verdict`. A newer head supersedes the comparison (its queued jobs are
cancelled, its results kept); closing the pull request cancels what is queued.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from app.core import signals
from app.core.clock import utcnow
from app.core.config import Settings, current_settings, use_settings
from app.core.db import Database, is_sqlite
from app.core.duties import Duty
from app.core.models import (
    Commit,
    ItemResult,
    Job,
    JobReason,
    JobState,
    Measurement,
    PullComparison,
    PullComparisonJob,
    PullRequest,
    Repository,
    Run,
    Runner,
    Suite,
)
from app.github import status as github_status
from app.jobs.coverage import no_runner_note
from app.jobs.matrix import pull_request_priority
from app.jobs.queue import deliver_stored_runs, enqueue, runs_stored_since
from app.pulls import outbox, report
from app.pulls.verdicts import (
    START_ROUNDS,
    MetricVerdict,
    classify,
    compare_items,
    compare_levels,
    look_alpha,
    wants_round,
)

log = logging.getLogger(__name__)

OPEN_STATES = ("measuring", "done")


@dataclass
class Group:
    """One platform x suite of a comparison: its jobs by side and round."""
    platform: str
    suite: Suite
    jobs: dict[tuple[str, int], Job] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return max((r for _, r in self.jobs), default=0)

    def active(self) -> bool:
        return any(j.state in (JobState.queued, JobState.running) for j in self.jobs.values())

    def runner_id(self) -> int | None:
        ran = [j for j in self.jobs.values() if j.runner_id is not None or j.pinned_runner_id is not None]
        latest = max(ran, key=lambda j: j.id, default=None)
        return None if latest is None else latest.runner_id or latest.pinned_runner_id


def pr_suites(session: Session) -> list[Suite]:
    return list(session.scalars(select(Suite).where(Suite.pull_requests.is_(True)).order_by(Suite.name)))


def pr_platforms(suite: Suite) -> list[str]:
    """The platforms a suite compares pull requests on (`pr_platforms`, else all of its own)."""
    return [p for p in suite.platforms if p in suite.pr_platforms] if suite.pr_platforms else list(suite.platforms)


def latest(session: Session, pull_id: int) -> PullComparison | None:
    return session.scalar(select(PullComparison).where(PullComparison.pull_request_id == pull_id)
                          .order_by(PullComparison.id.desc()).limit(1))


def platforms_of(session: Session, comparison: PullComparison) -> list[str]:
    return sorted(set(session.scalars(select(PullComparisonJob.platform)
                                      .where(PullComparisonJob.comparison_id == comparison.id))))


def runner_notes(session: Session, comparison: PullComparison) -> list[dict[str, str]]:
    """While measuring: one plain note per platform of the comparison that has no runner."""
    if comparison.state != "measuring":
        return []
    notes = []
    for platform in platforms_of(session, comparison):
        note = no_runner_note(session, platform, waiting="this pull request's A/B jobs",
                              commits="its head and merge-base")
        if note is not None:
            notes.append({"platform": platform, "note": note})
    return notes


def _queue_round(session: Session, comparison: PullComparison, repository: Repository, suite: Suite, platform: str,
                 round_: int, priority: int, pin: int | None) -> int:
    commits = {"base": session.get(Commit, comparison.base_commit_id), "head": session.get(Commit, comparison.head_commit_id)}
    queued = 0
    for side in ("base", "head"):
        commit = commits[side]
        assert commit is not None
        job, _ = enqueue(session, repository, commit, suite, platform, reason=JobReason.pull_request,
                         priority=priority, force=True, pull_request_id=comparison.pull_request_id)
        job.pinned_runner_id = pin
        session.add(PullComparisonJob(job_id=job.id, comparison_id=comparison.id, suite_id=suite.id,
                                      platform=platform, side=side, round=round_))
        queued += 1
    return queued


def start(session: Session, repository: Repository, pull: PullRequest, head: Commit, merge_base: Commit | None,
          *, rerun: bool = False, only_platform: str | None = None) -> tuple[PullComparison, int]:
    """Measure `head` against `merge_base` (a redelivery of a head already being compared
    changes nothing, unless it is a `rerun`). Older heads are superseded. With `only_platform`
    the other platforms keep their jobs from the comparison before. Returns (comparison, jobs queued)."""
    previous = latest(session, pull.id)
    base_id = merge_base.id if merge_base is not None else None
    if (not rerun and previous is not None and previous.head_commit_id == head.id
            and previous.base_commit_id == base_id and previous.state in OPEN_STATES):
        return previous, 0
    _stop_open(session, pull.id, "superseded")
    comparison = PullComparison(pull_request_id=pull.id, head_commit_id=head.id, base_commit_id=base_id,
                                state="measuring", dirty=True,
                                check_run_id=previous.check_run_id if previous and previous.head_commit_id == head.id else None)
    session.add(comparison)
    session.flush()
    queued = 0
    if merge_base is not None:
        priority = pull_request_priority()
        for suite in pr_suites(session):
            for platform in pr_platforms(suite):
                if only_platform is not None and platform != only_platform and previous is not None:
                    _copy_jobs(session, previous, comparison, suite, platform)
                    continue
                for round_ in range(1, START_ROUNDS + 1):
                    queued += _queue_round(session, comparison, repository, suite, platform, round_, priority, None)
    comparison.title = "measuring base against head" if merge_base is not None else "merge-base unknown"
    _publish(session, comparison, status="in_progress")
    return comparison, queued


def _copy_jobs(session: Session, source: PullComparison, target: PullComparison, suite: Suite, platform: str) -> None:
    for link in session.scalars(select(PullComparisonJob).where(
            PullComparisonJob.comparison_id == source.id, PullComparisonJob.suite_id == suite.id,
            PullComparisonJob.platform == platform)):
        session.add(PullComparisonJob(job_id=link.job_id, comparison_id=target.id, suite_id=suite.id,
                                      platform=platform, side=link.side, round=link.round))


def _stop_open(session: Session, pull_id: int, state: str) -> int:
    """Supersede or close the open comparisons of a pull request: queued jobs are cancelled
    (running ones finish; every stored result is kept). Returns the jobs cancelled."""
    cancelled = 0
    query = select(PullComparison).where(PullComparison.pull_request_id == pull_id, PullComparison.state.in_(OPEN_STATES))
    if not is_sqlite(session):
        query = query.with_for_update()  # an evaluation in progress finishes first
    for comparison in session.scalars(query):
        was_measuring = comparison.state == "measuring"
        comparison.state, comparison.dirty, comparison.updated_at = state, False, utcnow()
        # One conditional UPDATE: a job a runner claims meanwhile is running, and stays so.
        ids = select(PullComparisonJob.job_id).where(PullComparisonJob.comparison_id == comparison.id)
        result = session.execute(update(Job).where(Job.id.in_(ids), Job.state == JobState.queued)
                                 .values(state=JobState.cancelled, finished_at=utcnow())
                                 .execution_options(synchronize_session=False))
        cancelled += result.rowcount
        if was_measuring:
            comparison.conclusion = "neutral"
            comparison.title = f"{state}: measuring stopped"
            outbox.queue_check_run(session, comparison, status="completed", conclusion="neutral",
                                   title=comparison.title, summary=comparison.summary or comparison.title)
    return cancelled


def close(session: Session, pull: PullRequest) -> int:
    return _stop_open(session, pull.id, "closed")


# ---------------------------------------------------------------- signal receivers

def _link(session: Session, job_id: int) -> PullComparisonJob | None:
    return session.scalar(select(PullComparisonJob).where(PullComparisonJob.job_id == job_id)
                          .order_by(PullComparisonJob.comparison_id.desc()).limit(1))


def on_job_claimed(session: Session, job: Job) -> None:
    """Pin the rest of this platform x suite's A/B jobs to the runner that took the first one."""
    if job.pull_request_id is None or job.runner_id is None:
        return
    link = _link(session, job.id)
    if link is None:
        return
    siblings = select(PullComparisonJob.job_id).where(PullComparisonJob.comparison_id == link.comparison_id,
                                                      PullComparisonJob.suite_id == link.suite_id,
                                                      PullComparisonJob.platform == link.platform)
    session.execute(update(Job).where(Job.id.in_(siblings), Job.state == JobState.queued,
                                      Job.pinned_runner_id.is_(None))
                    .values(pinned_runner_id=job.runner_id).execution_options(synchronize_session=False))


def _mark(session: Session, job_id: int) -> None:
    comparison_ids = select(PullComparisonJob.comparison_id).where(PullComparisonJob.job_id == job_id)
    session.execute(update(PullComparison).where(PullComparison.id.in_(comparison_ids),
                                                 PullComparison.state == "measuring")
                    .values(dirty=True).execution_options(synchronize_session=False))


def on_run_stored(session: Session, run: Run) -> None:
    _mark(session, run.job_id)


def on_job_failed(session: Session, job: Job) -> None:
    if job.pull_request_id is not None:
        _mark(session, job.id)


# ---------------------------------------------------------------- evaluation

def _groups(session: Session, comparison: PullComparison) -> list[Group]:
    groups: dict[tuple[str, int], Group] = {}
    rows = session.execute(select(PullComparisonJob, Job, Suite).join(Job, Job.id == PullComparisonJob.job_id)
                           .join(Suite, Suite.id == PullComparisonJob.suite_id)
                           .where(PullComparisonJob.comparison_id == comparison.id)
                           .order_by(PullComparisonJob.job_id))
    for link, job, suite in rows:
        group = groups.setdefault((link.platform, suite.id), Group(link.platform, suite))
        group.jobs[(link.side, link.round)] = job
    return sorted(groups.values(), key=lambda g: (g.suite.name, g.platform))


def _samples(session: Session, jobs: Iterable[Job]) -> dict[int, tuple[dict[str, Measurement], dict[str, list[int]]]]:
    ids = [j.id for j in jobs if j.state == JobState.succeeded]
    out: dict[int, tuple[dict[str, Measurement], dict[str, list[int]]]] = {}
    if not ids:
        return out
    runs = {run.job_id: run for run in session.scalars(select(Run).where(Run.job_id.in_(ids)).order_by(Run.id))}
    run_ids = [r.id for r in runs.values()]
    measurements = list(session.scalars(select(Measurement).where(Measurement.run_id.in_(run_ids))))
    items = list(session.scalars(select(ItemResult).where(ItemResult.run_id.in_(run_ids))))
    by_run = {r.id: job_id for job_id, r in runs.items()}
    for job_id in runs:
        out[job_id] = ({}, {})
    for m in measurements:
        out[by_run[m.run_id]][0][m.metric] = m
    for item in items:
        out[by_run[item.run_id]][1][item.name] = [int(x) for x in item.correct]
    return out


def group_verdicts(session: Session, group: Group, max_rounds: int | None = None) -> list[MetricVerdict]:
    """Base against head for every metric of the group's jobs, over the rounds both sides measured;
    alpha is shared over the looks up to `max_rounds` (default: the suite's `pr_max_rounds`)."""
    data = _samples(session, group.jobs.values())
    rounds = sorted({r for _, r in group.jobs})
    sides: dict[str, list[tuple[dict[str, Measurement], dict[str, list[int]]]]] = {"base": [], "head": []}
    for r in rounds:
        base, head = group.jobs.get(("base", r)), group.jobs.get(("head", r))
        if base is None or head is None or base.id not in data or head.id not in data:
            continue  # a round counts only when both sides were measured
        sides["base"].append(data[base.id])
        sides["head"].append(data[head.id])
    if not sides["base"]:
        return []
    item_names = sorted({n for _, items in sides["base"] + sides["head"] for n in items})
    metrics: dict[str, str] = {}
    for measurements, _ in sides["base"] + sides["head"]:
        for name, m in measurements.items():
            metrics.setdefault(name, m.direction)
    out = []
    alpha = look_alpha(group.suite.pr_max_rounds if max_rounds is None else max_rounds)
    for name, direction in sorted(metrics.items()):
        if name == "accuracy" and item_names:
            continue  # the per-question vectors answer it, paired
        base = [[float(x) for x in ms[name].samples] for ms, _ in sides["base"] if name in ms]
        head = [[float(x) for x in ms[name].samples] for ms, _ in sides["head"] if name in ms]
        out.append(compare_levels(group.platform, group.suite.name, name, direction, base, head, alpha,
                                  floor=(group.suite.min_change or {}).get(group.platform, 0.0)))
    for name in item_names:
        base_items = [items.get(name, []) for _, items in sides["base"]]
        head_items = [items.get(name, []) for _, items in sides["head"]]
        out.append(compare_items(group.platform, group.suite.name, name, base_items, head_items, alpha))
    return out


def _json_number(value: float) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def verdict_json(v: MetricVerdict) -> dict[str, Any]:
    return {"platform": v.platform, "suite": v.suite, "metric": v.metric, "direction": v.direction,
            "base_median": _json_number(v.base_median), "head_median": _json_number(v.head_median),
            "change": _json_number(v.change),
            "ci": [_json_number(v.ci[0]), _json_number(v.ci[1])] if all(map(math.isfinite, v.ci)) else None,
            "p_value": _json_number(v.p_value), "verdict": v.verdict, "rounds": v.rounds}


@dataclass
class Evaluation:
    verdicts: list[dict[str, Any]]
    classification: list[dict[str, Any]]
    rounds: dict[str, int]
    problems: list[str]
    build_failed: list[str]
    pending: bool
    queued: int = 0
    measuring: list[str] = field(default_factory=list)  # "platform/suite" of the pairs still undecided


def evaluate_one(session: Session, comparison: PullComparison) -> Evaluation:
    """Verdicts so far; adds a round where a pair is inconclusive and has rounds left."""
    pull = session.get(PullRequest, comparison.pull_request_id)
    assert pull is not None
    repository = session.get(Repository, pull.repository_id)
    assert repository is not None
    verdicts: list[MetricVerdict] = []
    problems: list[str] = []
    build_failed: list[str] = []
    rounds: dict[str, int] = {}
    pending = False
    queued = 0
    measuring: list[str] = []
    if comparison.base_commit_id is None:
        problems.append("merge-base unknown (the base branch is not in the repository): nothing to compare against")
    for group in _groups(session, comparison):
        key = f"{group.platform}/{group.suite.name}"
        failed = [(side, j) for (side, _), j in group.jobs.items() if j.state == JobState.failed]
        builds = sorted({side for side, j in failed if j.failure_kind == "build"})
        if "head" in builds:
            build_failed.append(key)
            problems.append(f"head fails to build on {group.platform} ({group.suite.name})")
            continue
        if "base" in builds:
            problems.append(f"merge-base fails to build on {group.platform} ({group.suite.name}); nothing to compare")
            continue
        found = group_verdicts(session, group)
        rounds[key] = min((v.rounds for v in found), default=0)
        verdicts += found
        if group.active():
            pending = True
            measuring.append(key)
            continue
        if wants_round(found, group.rounds, group.suite.pr_max_rounds):
            queued += _queue_round(session, comparison, repository, group.suite, group.platform, group.rounds + 1,
                                   pull_request_priority(), group.runner_id())
            pending = True
            measuring.append(key)
        elif failed and not found:
            problems.append(f"{len(failed)} job(s) failed on {group.platform} ({group.suite.name}): "
                            f"{(failed[0][1].failure_reason or 'no reason').splitlines()[0][:120]}")
    scopes = [s.as_json() for s in classify(verdicts)]
    return Evaluation([verdict_json(v) for v in verdicts], scopes, rounds, problems, build_failed,
                      pending and not build_failed, queued, measuring)


def conclude(evaluation: Evaluation, accepted_by: str | None) -> tuple[str, str]:
    """(conclusion, title) of a finished comparison."""
    if evaluation.build_failed:
        return "failure", "head fails to build on " + ", ".join(evaluation.build_failed)
    bad = report.worst(evaluation.verdicts, "worse")
    if bad is not None:
        found = report.finding(bad, evaluation.classification)
        if accepted_by:
            return "success", f"accepted by @{accepted_by}: {found}"
        return "failure", found
    open_ = [v for v in evaluation.verdicts if v["verdict"] == "inconclusive"]
    if open_ or evaluation.problems:
        first = open_[0] if open_ else None
        what = f"{first['platform']} {first['metric']} inconclusive at the round cap" if first else evaluation.problems[0]
        return "neutral", what
    good = report.worst(evaluation.verdicts, "better")
    if good is not None:
        return "success", "faster or better: " + report.finding(good, evaluation.classification)
    platforms = sorted({v["platform"] for v in evaluation.verdicts})
    return "success", f"no change beyond noise on {', '.join(platforms) or 'any platform'}"


def _publish(session: Session, comparison: PullComparison, *, status: str, problems: list[str] | None = None,
             progress: Evaluation | None = None) -> None:
    """Queue the check run, the comment and the per-platform statuses for the current state.
    With `progress` (an in-progress evaluation): only the decided pairs' verdicts, the pairs
    still measuring, and no statuses (they stay pending until the end)."""
    settings = current_settings()
    pull = session.get(PullRequest, comparison.pull_request_id)
    head = session.get(Commit, comparison.head_commit_id)
    base = session.get(Commit, comparison.base_commit_id) if comparison.base_commit_id else None
    assert pull is not None and head is not None
    repository = session.get(Repository, pull.repository_id)
    assert repository is not None
    link = f"{settings.public_url}/pulls/{pull.number}?repository={repository.name}"
    evaluation_rounds = {f"{v['platform']}/{v['suite']}": v["rounds"] for v in comparison.verdicts or []}
    verdicts, classification = comparison.verdicts or [], comparison.classification or []
    if progress is not None:
        # A pair still measuring has no verdict yet, and scope needs every platform's.
        verdicts = [v for v in verdicts if f"{v['platform']}/{v['suite']}" not in progress.measuring]
        classification = []
    comparison.summary = report.summary(head=head.sha, base=base.sha if base else None, rounds=evaluation_rounds,
                                        verdicts=verdicts, classification=classification,
                                        problems=problems or [], accepted_by=comparison.accepted_by, link=link,
                                        notes=[n["note"] for n in runner_notes(session, comparison)],
                                        measuring=progress.measuring if progress is not None else ())
    title = comparison.title or "measuring"
    outbox.queue_check_run(session, comparison, status=status,
                           conclusion=comparison.conclusion if status == "completed" else None,
                           title=title, summary=comparison.summary, details_url=link)
    outbox.queue_comment(session, pull, report.comment(title, comparison.conclusion if status == "completed" else None,
                                                       comparison.summary))
    if status == "in_progress" and base is not None and progress is None:
        for suite in pr_suites(session):
            for platform in pr_platforms(suite):
                github_status.set_status(session, repository_id=repository.id, sha=head.sha, platform=platform,
                                         suite=suite.name, state="pending",
                                         description=f"measuring against base {base.sha[:8]} (A/B rounds)")
    if status == "completed":
        by_group: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for v in comparison.verdicts or []:
            by_group.setdefault((v["platform"], v["suite"]), []).append(v)
        for (platform, suite), found in sorted(by_group.items()):
            state, description = report.status_description(found, base.sha if base else None)
            github_status.set_status(session, repository_id=repository.id, sha=head.sha, platform=platform,
                                     suite=suite, state=state, description=description, clears_failure=True)


def finish(session: Session, comparison: PullComparison, evaluation: Evaluation) -> None:
    comparison.conclusion, comparison.title = conclude(evaluation, comparison.accepted_by)
    comparison.state = "done"
    _publish(session, comparison, status="completed", problems=evaluation.problems)
    pull = session.get(PullRequest, comparison.pull_request_id)
    signals.pull_request_verdict.send(session, pull=pull)


def _pair_rounds(verdicts: Iterable[dict[str, Any]]) -> dict[str, int]:
    rounds: dict[str, int] = {}
    for v in verdicts:
        key = f"{v['platform']}/{v['suite']}"
        rounds[key] = min(rounds.get(key, v["rounds"]), v["rounds"])
    return rounds


def publish_progress(session: Session, comparison: PullComparison, evaluation: Evaluation) -> None:
    """The in-progress check run and comment with the verdicts decided so far and the pairs
    still measuring (the outbox sends only the newest, so GitHub is not flooded)."""
    total = len(_groups(session, comparison))
    comparison.title = f"measuring: {total - len(evaluation.measuring)} of {total} platform × suite pairs decided"
    _publish(session, comparison, status="in_progress", problems=evaluation.problems, progress=evaluation)


def evaluate(session: Session, comparison: PullComparison) -> Evaluation:
    before = _pair_rounds(comparison.verdicts or [])
    evaluation = evaluate_one(session, comparison)
    comparison.verdicts, comparison.classification = evaluation.verdicts, evaluation.classification
    comparison.dirty, comparison.updated_at = False, utcnow()
    if evaluation.pending:
        if _pair_rounds(evaluation.verdicts) != before:  # a round was evaluated since the last write
            publish_progress(session, comparison, evaluation)
        return evaluation
    finish(session, comparison, evaluation)
    return evaluation


def accept(session: Session, comparison: PullComparison, who: str) -> None:
    comparison.accepted_by = who
    if comparison.state == "done":
        finish(session, comparison, evaluate_one(session, comparison))


def evaluate_dirty(db: Database, settings: Settings, limit: int = 20) -> int:
    """The duty: evaluate comparisons whose jobs changed, one transaction each."""
    with use_settings(settings):
        with db.session() as session:
            ids = list(session.scalars(select(PullComparison.id).where(PullComparison.dirty.is_(True),
                                                                       PullComparison.state == "measuring")
                                       .order_by(PullComparison.id).limit(limit)))
        for comparison_id in ids:
            with db.session() as session:
                # Locked (PostgreSQL): a new push superseding it meanwhile waits, then sees the result.
                comparison = session.get(PullComparison, comparison_id, with_for_update=not is_sqlite(session))
                if comparison is None or not comparison.dirty or comparison.state != "measuring":
                    continue
                evaluate(session, comparison)
    return len(ids)


def release_pins(session: Session, settings: Settings) -> int:
    """Unpin queued A/B jobs whose runner is disabled or has not been seen for three leases:
    another runner of the platform takes them (pairing on one machine is lost, the verdict is not)."""
    cutoff = utcnow() - timedelta(seconds=3 * settings.lease_s)
    gone = select(Runner.id).where(or_(Runner.disabled.is_(True), Runner.last_seen_at.is_(None),
                                       Runner.last_seen_at < cutoff))
    result = session.execute(update(Job).where(Job.state == JobState.queued, Job.pinned_runner_id.in_(gone))
                             .values(pinned_runner_id=None).execution_options(synchronize_session=False))
    return result.rowcount


def _duty(db: Database) -> int:
    deliver_stored_runs(db)  # runs stored since the last delivery mark their comparisons first
    settings = current_settings()
    with db.session() as session:
        release_pins(session, settings)
    return evaluate_dirty(db, settings)


def _results_arrived(session: Session, since: datetime | None) -> bool:
    """A run stored since the last pass (this duty delivers the hooks first), or a comparison a
    failed job marked: the next verdict or round should not wait out the interval."""
    return (runs_stored_since(session, since) or session.scalar(
        select(PullComparison.id).where(PullComparison.dirty.is_(True), PullComparison.state == "measuring")
        .limit(1)) is not None)


DUTIES = [Duty("pull-requests", _duty, interval_s=1.0, lease_s=120.0, due=_results_arrived)]
