"""Bisects as a service: starting one (checked against git), the `bisect` duty that drives the
rounds through the job queue, stepping into a merged branch, confirmation on the other
platforms, automatic bisects for alerts, and the JSON the API returns.

The duty is stateless between ticks: each tick reads every sample of the range's commits
(runs of the suite on the platform, whatever queued them) and asks `search.decide` again. It
queues a round only when the previous one has landed, at `BISECT_PRIORITY` (above every
routine tier), with one job per commit the decision names.
"""
from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session, object_session

from app.bisect.search import Decision, Point, decide
from app.bisect.stats import Verdict, compare, noise_scale, standardised
from app.core import signals
from app.core.clock import as_utc, utcnow
from app.core.config import Settings, current_settings
from app.core.db import Database, get_or_create
from app.core.duties import Duty
from app.core.errors import Conflict, Invalid, NotFound
from app.core.models import (
    Alert,
    AlertChange,
    AlertState,
    Bisect,
    BisectState,
    Commit,
    CommitParent,
    Job,
    JobReason,
    JobState,
    Measurement,
    Repository,
    Run,
    Runner,
    Suite,
)
from app.core.shas import is_sha
from app.detection.service import config_for, noise_floors
from app.git.commit_graph import commits_by_sha, record_commits
from app.git.mirror import GitError, Mirror
from app.jobs.coverage import no_runner_note
from app.jobs.matrix import TIER_DEFAULT_BRANCH, TIER_SPAN
from app.jobs.queue import enqueue, request_cancel

log = logging.getLogger(__name__)

BISECT_PRIORITY = TIER_DEFAULT_BRANCH + TIER_SPAN + 100_000_000  # above every routine job
MAX_RANGE = 2000             # commits in one first-parent range
DEFAULT_EFFECT = 0.05        # relative change sought when neither the caller nor an alert says
RUNNER_SEEN = timedelta(minutes=10)
CONFIRM_JOBS = 3             # per commit and platform, when the verdict stays unclear
OPEN_ALERTS = (AlertState.new, AlertState.acknowledged)


@dataclass(frozen=True)
class BisectRequest:
    repository: Any
    suite: Any
    metric: Any
    platform: Any
    good: Any
    bad: Any
    effect: Any = None
    alert_id: int | None = None


def _text(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"{field}: required, a non-empty string", extra={"field": field})
    return value


def _sha(value: Any, field: str) -> str:
    if not is_sha(value):
        raise Invalid(f"{field}: must be a full 40-character lowercase hex commit SHA, got {value!r}",
                      extra={"field": field})
    return str(value)


def mirror_for(settings: Settings, repository: Repository) -> Mirror:
    return Mirror.for_repository(settings.data_dir, repository.name, repository.url)


def first_parent_range(mirror: Mirror, good: str, bad: str) -> list[str]:
    """good, then bad's first-parent chain down to good, oldest first. 422 when good is not on
    that chain (an ancestor only through a merged branch) or the range is too long."""
    chain = mirror.rev_list(bad, [good], first_parent=True, max_count=MAX_RANGE + 1)
    if len(chain) > MAX_RANGE:
        raise Invalid(f"bad: more than {MAX_RANGE} first-parent commits after good; bisect a shorter range",
                      extra={"field": "bad"})
    oldest = mirror.commit_info(chain[-1:])[0]
    if not oldest.parents or oldest.parents[0] != good:
        raise Invalid(f"good: {good[:12]} is an ancestor of bad only through a merged branch, not on bad's "
                      f"first-parent history; pick good from that history", extra={"field": "good"})
    return [good, *reversed(chain)]


@dataclass(frozen=True)
class Checked:
    """A request that passed the catalogue checks (no git yet)."""
    repository: Repository
    suite: Suite
    metric: str
    platform: str
    good: str
    bad: str
    effect: float


def check(session: Session, request: BisectRequest) -> Checked:
    """The checks that need only the database: a 422 naming the field, nothing stored."""
    repo_name = _text(request.repository, "repository")
    repository = session.scalar(select(Repository).where(Repository.name == repo_name))
    if repository is None:
        raise Invalid(f"repository: unknown repository {repo_name!r}", extra={"field": "repository"})
    suite_name = _text(request.suite, "suite")
    suite = session.scalar(select(Suite).where(Suite.name == suite_name))
    if suite is None:
        known = ", ".join(session.scalars(select(Suite.name).order_by(Suite.name))) or "none"
        raise Invalid(f"suite: unknown suite {suite_name!r} (configured: {known})", extra={"field": "suite"})
    metric = _text(request.metric, "metric")
    platform = _text(request.platform, "platform")
    if platform not in (suite.platforms or []):
        raise Invalid(f"platform: suite {suite.name!r} does not run on {platform!r} "
                      f"(its platforms: {', '.join(suite.platforms or [])})", extra={"field": "platform"})
    stored = stored_metrics(session, repository, suite)
    if stored and metric not in stored:
        raise Invalid(f"metric: suite {suite.name!r} has no metric {metric!r} stored for {repository.name} "
                      f"(stored: {', '.join(stored)})", extra={"field": "metric"})
    good, bad = _sha(request.good, "good"), _sha(request.bad, "bad")
    if good == bad:
        raise Invalid("bad: good and bad are the same commit; there is nothing between them to search",
                      extra={"field": "bad"})
    effect = DEFAULT_EFFECT if request.effect is None else request.effect
    if not isinstance(effect, (int, float)) or isinstance(effect, bool) or not 0 < abs(effect) < 10:
        raise Invalid(f"effect: a relative change such as 0.08, got {effect!r}", extra={"field": "effect"})
    return Checked(repository, suite, metric, platform, good, bad, abs(float(effect)))


def git_range(settings: Settings, repository: Repository, good: str, bad: str) -> tuple[list[str], list[Any]]:
    """Fetch the mirror and read the first-parent range good..bad with its commits' details:
    slow I/O, run outside any transaction and never inside a request. 422 naming the field."""
    mirror = mirror_for(settings, repository)
    try:
        mirror.fetch(extra=[good, bad])
    except GitError as exc:
        raise Invalid(f"repository: cannot fetch {repository.name}: {exc}", extra={"field": "repository"}) from exc
    for field, sha in (("good", good), ("bad", bad)):
        if not mirror.has_commit(sha):
            raise Invalid(f"{field}: commit {sha} is not in {repository.name}", extra={"field": field})
    if not mirror.is_ancestor(good, bad):
        raise Invalid(f"good: {good[:12]} is not an ancestor of bad {bad[:12]}", extra={"field": "good"})
    commits = first_parent_range(mirror, good, bad)
    return commits, mirror.commit_info(commits)


def start(session: Session, settings: Settings, request: BisectRequest) -> Bisect:
    """Check the request against the catalogue and git, store the bisect (running); the duty
    queues its first round. Every refusal is a 422 naming the field, with nothing stored. Runs
    git: for the command line and the duty, never a request (see `request`)."""
    checked = check(session, request)
    commits, infos = git_range(settings, checked.repository, checked.good, checked.bad)
    known = record_commits(session, checked.repository, infos)
    bisect = Bisect(repository_id=checked.repository.id, suite=checked.suite.name, metric=checked.metric,
                    platform=checked.platform, good_commit_id=known[checked.good].id, bad_commit_id=known[checked.bad].id,
                    state=BisectState.running, effect=checked.effect, alert_id=request.alert_id,
                    stages=[{"kind": "first_parent", "commits": commits}], steps=[], result={})
    session.add(bisect)
    session.flush()
    log.info("bisect started", extra={"px_bisect": bisect.id, "px_commits": len(commits)})
    return bisect


def submit(session: Session, request: BisectRequest) -> Bisect:
    """What `POST /api/v1/bisects` does: the database checks only (422 naming the field), then
    the bisect is stored `pending` and the bisect duty checks it against git (`resolve_pending`),
    so the request never waits on a fetch. Good and bad are recorded as commits known only by
    their SHA until the duty reads them from git."""
    checked = check(session, request)
    ends = {sha: get_or_create(session, Commit, repository_id=checked.repository.id, sha=sha)
            for sha in (checked.good, checked.bad)}
    bisect = Bisect(repository_id=checked.repository.id, suite=checked.suite.name, metric=checked.metric,
                    platform=checked.platform, good_commit_id=ends[checked.good].id, bad_commit_id=ends[checked.bad].id,
                    state=BisectState.pending, effect=checked.effect, alert_id=request.alert_id,
                    stages=[], steps=[], result={"good": checked.good, "bad": checked.bad})
    session.add(bisect)
    session.flush()
    log.info("bisect requested", extra={"px_bisect": bisect.id})
    return bisect


def resolve_pending(db: Database, settings: Settings) -> dict[int, str]:
    """Check each pending bisect against git (fetching outside any transaction: on SQLite one
    holds the write lock), then start it, or end it failed with the field that was wrong."""
    with db.session() as session:
        pending = [(b.id, b.repository_id, b.result.get("good"), b.result.get("bad")) for b in session.scalars(
            select(Bisect).where(Bisect.state == BisectState.pending).order_by(Bisect.id))]
        repositories = {r.id: r for r in session.scalars(select(Repository))}
    outcome: dict[int, str] = {}
    for bisect_id, repository_id, good, bad in pending:
        repository = repositories[repository_id]
        try:
            commits, infos = git_range(settings, repository, good, bad)
            failure = None
        except Invalid as exc:
            commits, infos, failure = [], [], exc
        with db.session() as session:
            bisect = session.get(Bisect, bisect_id)
            if bisect is None or bisect.state != BisectState.pending:
                continue
            if failure is not None:
                bisect.result = {**bisect.result, "field": failure.extra.get("field")}
                outcome[bisect_id] = _finish(bisect, BisectState.failed, failure.detail)
                continue
            record_commits(session, session.get(Repository, repository_id), infos)
            bisect.stages = [{"kind": "first_parent", "commits": commits}]
            bisect.state, bisect.updated_at = BisectState.running, utcnow()
            outcome[bisect_id] = "running"
            log.info("bisect started", extra={"px_bisect": bisect_id, "px_commits": len(commits)})
    return outcome


def stored_metrics(session: Session, repository: Repository, suite: Suite) -> list[str]:
    """The metric names stored for a suite's runs in a repository; empty when nothing is stored
    yet (then a bisect's first round is the first measurement and the name cannot be checked)."""
    return list(session.scalars(
        select(Measurement.metric).distinct().join(Run, Run.id == Measurement.run_id)
        .join(Commit, Commit.id == Run.commit_id)
        .where(Run.suite_id == suite.id, Commit.repository_id == repository.id).order_by(Measurement.metric)))


def cancel(session: Session, bisect_id: int, actor: str) -> Bisect:
    """Stop a pending or running bisect: its queued jobs are cancelled, its running ones are told at their
    next heartbeat (`queue.request_cancel`), and the duty never steps it again."""
    bisect = session.get(Bisect, bisect_id)
    if bisect is None:
        raise NotFound(f"bisect {bisect_id} does not exist")
    if bisect.state not in (BisectState.pending, BisectState.running):
        raise Conflict(f"bisect {bisect_id} is already {bisect.state.value}; only a pending or running bisect can be cancelled")
    for job in session.scalars(select(Job).where(Job.bisect_id == bisect.id,
                                                 Job.state.in_([JobState.queued, JobState.running]))):
        request_cancel(session, job)
    _finish(bisect, BisectState.cancelled, f"cancelled by {actor}")
    return bisect


# ---------------------------------------------------------------- reading the range

def _points(session: Session, bisect: Bisect, suite: Suite, shas: Sequence[str], platform: str) -> list[Point]:
    repository = session.get(Repository, bisect.repository_id)
    assert repository is not None
    commits = commits_by_sha(session, repository, shas)
    ids = {commits[sha].id: i for i, sha in enumerate(shas) if sha in commits}
    points = [Point() for _ in shas]
    for commit_id, samples in session.execute(
            select(Run.commit_id, Measurement.samples).join(Measurement, Measurement.run_id == Run.id)
            .where(Run.commit_id.in_(list(ids)), Run.suite_id == suite.id, Run.platform == platform,
                   Measurement.metric == bisect.metric).order_by(Run.id)):
        point = points[ids[commit_id]]
        point.samples += [float(x) for x in samples]
        point.jobs += 1
    finished: dict[int, bool] = {}
    for commit_id, state in session.execute(
            select(Job.commit_id, Job.state).where(Job.commit_id.in_(list(ids)), Job.suite_id == suite.id,
                                                   Job.platform == platform)):
        point = points[ids[commit_id]]
        if state in (JobState.queued, JobState.running):
            point.pending += 1
        elif state in (JobState.failed, JobState.succeeded):
            finished[commit_id] = True
    for commit_id, index in ids.items():
        # Finished jobs but no samples of the metric: the commit cannot be measured (skip it).
        if finished.get(commit_id) and not points[index].samples and not points[index].pending:
            points[index].failed = True
    return points


def seen_runners(session: Session, platform: str) -> int:
    """Enabled runners of the platform seen within `RUNNER_SEEN`."""
    since = utcnow() - RUNNER_SEEN
    return int(session.scalar(select(func.count()).select_from(Runner).where(
        Runner.platform == platform, Runner.disabled.is_(False), Runner.last_seen_at >= since)) or 0)


def free_runners(session: Session, platform: str) -> int:
    """Runners of the platform seen lately (the search's parallelism R), at least one."""
    return max(1, seen_runners(session, platform))


def _queue(session: Session, bisect: Bisect, suite: Suite, shas: Sequence[str], platform: str) -> list[int]:
    repository = session.get(Repository, bisect.repository_id)
    assert repository is not None
    commits = commits_by_sha(session, repository, shas)
    ids = []
    for sha in shas:
        job, _ = enqueue(session, repository, commits[sha], suite, platform, reason=JobReason.bisect,
                         priority=BISECT_PRIORITY, force=True, bisect_id=bisect.id)
        ids.append(job.id)
    return ids


def _decision_json(shas: Sequence[str], decision: Decision) -> dict[str, Any]:
    def change(c: Any) -> dict[str, Any]:
        out = {"good": shas[c.left], "bad": shas[c.right], "culprit": shas[c.culprit] if c.culprit is not None else None,
               "candidates": [shas[i] for i in c.candidates], "p_value": c.comparison.p_value,
               "relative_change": c.comparison.relative_change}
        if c.effect is not None:
            out.update(relative_change=c.effect.relative_change, ci_low=c.effect.ci_low, ci_high=c.effect.ci_high,
                       before=c.effect.before, after=c.effect.after)
        return out

    return {
        "outcome": decision.outcome, "reason": decision.reason, "noise": decision.noise,
        "standardised_effect": decision.standardised_effect,
        "pairs": [{"left": shas[p.left], "right": shas[p.right], "verdict": p.comparison.verdict.value,
                   "p_value": p.comparison.p_value, "p_mwu": p.comparison.p_mwu, "p_ks": p.comparison.p_ks,
                   "same_above": p.comparison.same_above, "relative_change": p.comparison.relative_change}
                  for p in decision.pairs],
        "changes": [change(c) for c in decision.changes],
        "skipped": [shas[i] for i in decision.skipped],
        "unresolved": [[shas[a], shas[b]] for a, b in decision.unresolved],
    }


# ---------------------------------------------------------------- the duty

def advance(session: Session, bisect: Bisect) -> str:
    """One step of one running bisect: queue the next round, move to the next stage, or finish.
    Returns what happened (for logs and tests)."""
    suite = session.scalar(select(Suite).where(Suite.name == bisect.suite))
    if suite is None:
        return _finish(bisect, BisectState.failed, f"suite {bisect.suite!r} is no longer configured")
    stages = [dict(s) for s in bisect.stages]
    stage = stages[-1]
    if stage["kind"] == "confirm":
        return _confirm(session, bisect, suite, stages)
    shas: list[str] = stage["commits"]
    points = _points(session, bisect, suite, shas, bisect.platform)
    decision = decide(points, bisect.effect, free_runners(session, bisect.platform))
    if decision.outcome == "waiting":
        return "waiting"
    decision = replace(decision, reason=_commits_named(decision.reason, shas))
    stage["decision"] = _decision_json(shas, decision)
    bisect.stages = stages
    bisect.updated_at = utcnow()
    if not decision.finished:
        wanted = [shas[i] for i in decision.measure]
        jobs = _queue(session, bisect, suite, wanted, bisect.platform)
        bisect.steps = [*bisect.steps, {"round": len(bisect.steps) + 1, "stage": len(stages) - 1,
                                        "commits": wanted, "jobs": jobs, "queued_at": utcnow().isoformat()}]
        return "queued"
    changes = stage["decision"]["changes"]
    if decision.outcome == "culprit":
        culprit = changes[0]["culprit"]
        merged = None if stage["kind"] != "first_parent" else _merged_branch(session, bisect, culprit)
        if merged:
            bisect.stages = [*stages, {"kind": "merged_branch", "merge": culprit, "commits": merged}]
            return "stepped into merged branch"
        bisect.culprit_commit_id = _commit_id(session, bisect, culprit)
        others = [p for p in (suite.platforms or []) if p != bisect.platform]
        if others:
            parent = changes[0]["good"]
            bisect.stages = [*stages, {"kind": "confirm", "commits": [parent, culprit], "platforms": others}]
            return _confirm(session, bisect, suite, bisect.stages)
        return _finish(bisect, BisectState.done, decision.reason)
    if decision.outcome == "not_monotonic":
        named = [c["culprit"] for c in changes if c["culprit"]]
        if named:
            bisect.culprit_commit_id = _commit_id(session, bisect, named[0])
        return _finish(bisect, BisectState.done, decision.reason)
    if decision.outcome == "no_change":
        return _finish(bisect, BisectState.done, decision.reason)
    return _finish(bisect, BisectState.failed, decision.reason)


def _commits_named(reason: str, shas: Sequence[str]) -> str:
    """The search speaks in positions of the range (0 = good); people read commits."""
    def name(match: re.Match[str]) -> str:
        index = int(match.group(2))
        return match.group(1) + (shas[index][:12] if 0 <= index < len(shas) else match.group(2))
    reason = re.sub(r"(culprit at |between |and |, |\()(\d+)\b(?!\.\d|%| commits| changes)", name, reason)
    return re.sub(r"(->)(\d+)\b", name, reason).replace("culprit at ", "culprit ")


def _commit_id(session: Session, bisect: Bisect, sha: str) -> int:
    repository = session.get(Repository, bisect.repository_id)
    assert repository is not None
    return commits_by_sha(session, repository, [sha])[sha].id


def _merged_branch(session: Session, bisect: Bisect, merge: str) -> list[str] | None:
    """For a merge culprit: the merge-base, the merged branch's first-parent chain, and the merge
    itself, oldest first (the search then finds the branch commit, or the merge when the change
    comes from the two sides together). None for an ordinary commit."""
    commit_id = _commit_id(session, bisect, merge)
    if session.scalar(select(func.count()).select_from(CommitParent).where(CommitParent.commit_id == commit_id)) < 2:
        return None
    repository = session.get(Repository, bisect.repository_id)
    assert repository is not None
    mirror = mirror_for(current_settings(), repository)
    info = mirror.commit_info([merge])[0]
    first, second = info.parents[0], info.parents[1]
    base = mirror.merge_base(first, second)
    if base is None:
        return None
    branch = list(reversed(mirror.rev_list(second, [base], first_parent=True, max_count=MAX_RANGE)))
    commits = [base, *branch, merge]
    record_commits(session, repository, mirror.commit_info(commits))
    return commits


def _confirm(session: Session, bisect: Bisect, suite: Suite, stages: list[dict[str, Any]]) -> str:
    """Measure the culprit and its parent on the other platforms: changed there too, or not.
    A platform changed when its two commits differ the way the bisected platform's did: the same
    direction, and by at least the least change detection counts there (the metric's minimum,
    or the suite's `min_change` for that platform when larger). A significant difference below
    that, or the other way, is the platform not changing like the bisected one, as detection's
    classification reads it too."""
    stage = dict(stages[-1])
    parent, culprit = stage["commits"]
    first = next(s for s in stages if s["kind"] != "confirm" and s.get("decision", {}).get("outcome") == "culprit"
                 and s["decision"]["changes"] and s["decision"]["changes"][0]["culprit"] == culprit)
    bisected = float(first["decision"]["changes"][0]["relative_change"])
    floors = noise_floors(session, suite.name)
    verdicts: dict[str, Any] = {}
    wanted: list[tuple[str, str]] = []
    for platform in stage["platforms"]:
        points = _points(session, bisect, suite, [parent, culprit], platform)
        if any(p.pending for p in points):
            return "waiting"
        missing = [sha for sha, p in zip((parent, culprit), points) if not p.samples and not p.failed]
        if any(p.failed for p in points):
            verdicts[platform] = {"verdict": "failed", "detail": "could not be measured"}
            continue
        if missing:
            wanted += [(platform, sha) for sha in missing]
            continue
        sigma = noise_scale([p.samples for p in points])
        d = standardised(bisect.effect, float(sorted(points[0].samples)[len(points[0].samples) // 2]), sigma)
        result = compare(points[0].samples, points[1].samples, d)
        if result.verdict == Verdict.unknown and min(p.jobs for p in points) < CONFIRM_JOBS:
            wanted += [(platform, sha) for sha, p in zip((parent, culprit), points) if p.jobs < CONFIRM_JOBS]
            continue
        verdict = {"different": "changed", "same": "unchanged"}.get(result.verdict.value, "inconclusive")
        least = config_for(bisect.metric, floors.get(platform, 0.0)).min_relative
        note = None
        moved = f"moved {100 * result.relative_change:+.1f} %"
        if verdict == "changed" and math.copysign(1, result.relative_change) != math.copysign(1, bisected):
            verdict, note = "unchanged", f"{moved}, the other way"
        elif verdict == "changed" and abs(result.relative_change) < least:
            verdict, note = "unchanged", f"{moved}, below the {100 * least:g} % this platform counts as a change"
        verdicts[platform] = {"verdict": verdict, "p_value": result.p_value, "relative_change": result.relative_change,
                              "samples": [points[0].samples, points[1].samples], **({"note": note} if note else {})}
    if wanted:
        jobs = []
        for platform, sha in wanted:
            jobs += _queue(session, bisect, suite, [sha], platform)
        bisect.steps = [*bisect.steps, {"round": len(bisect.steps) + 1, "stage": len(stages) - 1,
                                        "commits": [sha for _, sha in wanted],
                                        "platforms": [p for p, _ in wanted], "jobs": jobs,
                                        "queued_at": utcnow().isoformat()}]
        return "queued"
    changed = sorted(p for p, v in verdicts.items() if v["verdict"] == "changed")
    unchanged = sorted(p for p, v in verdicts.items() if v["verdict"] == "unchanged")
    if not changed and unchanged and len(unchanged) == len(verdicts):
        scope = f"{bisect.platform}-only"
    elif changed and len(changed) == len(verdicts):
        scope = "all platforms"
    else:
        scope = "inconclusive"
    stage["confirmation"] = {"scope": scope, "platforms": verdicts}
    bisect.stages = [*stages[:-1], stage]
    return _finish(bisect, BisectState.done, f"{first['decision']['reason']}; {scope}")


def _finish(bisect: Bisect, state: BisectState, reason: str) -> str:
    bisect.state = state
    bisect.reason = reason
    bisect.finished_at = bisect.updated_at = utcnow()
    log.info("bisect finished", extra={"px_bisect": bisect.id, "px_state": state.value})
    session = object_session(bisect)
    if state == BisectState.done and session is not None:
        signals.bisect_done.send(session, bisect=bisect)
    return state.value


def start_for_alerts(session: Session) -> list[int]:
    """Automatic bisects: each open or fixed regression whose range holds more than one commit
    not measured on its platform gets one bisect (its largest change), seeking the alert's own
    magnitude. A regression already fixed by a later commit is bisected too: which commit
    caused it is still the maintainer's question (results can arrive after the fix did)."""
    started = []
    wanted = (*OPEN_ALERTS, AlertState.fixed)
    alerts = session.scalars(select(Alert).where(Alert.state.in_(wanted), Alert.is_regression.is_(True),
                                                 Alert.kind == "performance", Alert.good_commit_id.is_not(None))
                             .where(~select(Bisect.id).where(Bisect.alert_id == Alert.id).exists()))
    for alert in list(alerts):
        changes = [c for c in alert.changes if c.is_regression and c.relative_change]
        if not changes:
            continue
        change: AlertChange = max(changes, key=lambda c: abs(c.relative_change))
        suspects = list(change.suspected_commits or [])
        suite = session.scalar(select(Suite).where(Suite.name == change.suite))
        if suite is None:
            continue
        measured = set(session.scalars(select(Commit.sha).join(Run, Run.commit_id == Commit.id).where(
            Commit.repository_id == alert.repository_id, Commit.sha.in_(suspects), Run.suite_id == suite.id,
            Run.platform == change.platform)))
        if len([s for s in suspects if s not in measured]) <= 1:
            continue
        good = session.get(Commit, alert.good_commit_id)
        bad = session.get(Commit, alert.bad_commit_id)
        repository = session.get(Repository, alert.repository_id)
        assert good is not None and bad is not None and repository is not None
        try:
            with session.begin_nested():
                bisect = start(session, current_settings(), BisectRequest(
                    repository.name, change.suite, change.metric, change.platform, good.sha, bad.sha,
                    effect=abs(change.relative_change), alert_id=alert.id))
            started.append(bisect.id)
        except Invalid as exc:
            log.warning("no automatic bisect for alert", extra={"px_alert": alert.id, "px_reason": exc.detail})
    return started


def run_duty(db: Database) -> dict[str, Any]:
    """The `bisect` duty: requested bisects checked against git, automatic bisects for new
    alerts, then one step of every running one."""
    resolved = resolve_pending(db, current_settings())
    with db.session() as session:
        started = start_for_alerts(session)
        session.commit()
        ids = list(session.scalars(select(Bisect.id).where(Bisect.state == BisectState.running).order_by(Bisect.id)))
        # Most ticks find most rounds still out: one query skips those bisects without reading
        # every sample of their ranges (`advance` would wait for these jobs too).
        out = set(session.scalars(select(Job.bisect_id).distinct().where(
            Job.bisect_id.in_(ids), Job.state.in_([JobState.queued, JobState.running])))) if ids else set()
    steps = {bisect_id: "waiting" for bisect_id in ids if bisect_id in out}
    for bisect_id in (i for i in ids if i not in out):
        with db.session() as session:
            bisect = session.get(Bisect, bisect_id)
            if bisect is None or bisect.state != BisectState.running:
                continue
            try:
                steps[bisect_id] = advance(session, bisect)
                session.commit()
            except Exception:
                log.exception("bisect step failed", extra={"px_bisect": bisect_id})
                session.rollback()
    return {"resolved": resolved, "started": started, "steps": steps}


def _round_landed(session: Session, since: datetime | None) -> bool:
    """A running bisect's job finished since the last pass: its next round may be due."""
    query = (select(Job.id).join(Bisect, Bisect.id == Job.bisect_id)
             .where(Bisect.state == BisectState.running, Job.finished_at.is_not(None)))
    if since is not None:
        query = query.where(Job.finished_at > since)
    return session.scalar(query.limit(1)) is not None


DUTIES = [Duty("bisect", run_duty, interval_s=1.0, lease_s=120.0, due=_round_landed)]


# ---------------------------------------------------------------- JSON

def bisect_json(session: Session, bisect: Bisect) -> dict[str, Any]:
    """State, rounds, every tested commit with its samples and verdict, the culprit with its
    effect and interval, the other platforms' confirmation, runner jobs spent."""
    repository = session.get(Repository, bisect.repository_id)
    suite = session.scalar(select(Suite).where(Suite.name == bisect.suite))
    assert repository is not None
    job_states = dict(session.execute(select(Job.id, Job.state).where(Job.bisect_id == bisect.id)).all())
    stages_out = []
    culprit_out = None
    confirmation = None
    for stage in bisect.stages:
        if stage["kind"] == "confirm":
            confirmation = stage.get("confirmation")
            continue
        shas = stage["commits"]
        decision = stage.get("decision", {})
        verdict_of = {p["right"]: p for p in decision.get("pairs", [])}
        points = _points(session, bisect, suite, shas, bisect.platform) if suite else [Point() for _ in shas]
        tested = [{"sha": sha, "index": i, "samples": p.samples, "jobs": p.jobs, "skipped": p.failed,
                   "verdict": verdict_of.get(sha, {}).get("verdict"), "p_value": verdict_of.get(sha, {}).get("p_value")}
                  for i, (sha, p) in enumerate(zip(shas, points)) if p.samples or p.failed]
        stages_out.append({"kind": stage["kind"], "good": shas[0], "bad": shas[-1], "size": len(shas) - 1,
                           "merge": stage.get("merge"), "outcome": decision.get("outcome"),
                           "tested": tested, "changes": decision.get("changes", []),
                           "skipped": decision.get("skipped", []), "unresolved": decision.get("unresolved", [])})
    if bisect.culprit_commit_id is not None:
        commit = session.get(Commit, bisect.culprit_commit_id)
        assert commit is not None
        found = next((c for s in reversed(stages_out) for c in s["changes"] if c["culprit"] == commit.sha), {})
        culprit_out = {"sha": commit.sha, "summary": commit.summary, "author": commit.author,
                       **{k: found.get(k) for k in ("relative_change", "ci_low", "ci_high", "p_value", "before",
                                                    "after", "good")}}
    rounds = [{**step, "finished": all(job_states.get(j) in (JobState.succeeded, JobState.failed,
                                                            JobState.cancelled) for j in step["jobs"])}
              for step in bisect.steps]
    return {
        "id": bisect.id, "repository": repository.name, "suite": bisect.suite, "metric": bisect.metric,
        "platform": bisect.platform, "effect": bisect.effect, "alert_id": bisect.alert_id,
        "good": stages_out[0]["good"] if stages_out else bisect.result.get("good"),
        "bad": stages_out[0]["bad"] if stages_out else bisect.result.get("bad"),
        "state": bisect.state.value, "reason": bisect.reason, "field": bisect.result.get("field"),
        "culprit": culprit_out,
        "changes": [c for s in stages_out for c in s["changes"]],
        "monotonic": not any(s["outcome"] == "not_monotonic" for s in stages_out),
        "confirmation": confirmation, "rounds": rounds, "stages": stages_out,
        "runner_jobs": len(job_states),
        "note": no_runner_note(session, bisect.platform) if bisect.state in (BisectState.pending, BisectState.running) else None,
        "created_at": as_utc(bisect.created_at).isoformat(),
        "finished_at": bisect.finished_at and as_utc(bisect.finished_at).isoformat(),
    }
