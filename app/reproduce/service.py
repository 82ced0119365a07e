"""An alert's good and bad commits measured again before the alert stands.

A regression found in a commit series compares runs made minutes or days apart, on whichever
runner took each job; a machine that slows down for a while (a noisy neighbour, thermal limits)
looks exactly like a regression there. So each new performance regression is measured again as
a pull request is: for each suite x platform of its regressions, `START_ROUNDS` interleaved A/B
rounds (good, then bad) at `REPRODUCE_PRIORITY`, pinned to the runner that claims the first job,
and one more round while a verdict is inconclusive, up to `reproduce_max_rounds`
(`PARALLAX_REPRODUCE_MAX_ROUNDS`; 0 turns this off). The verdicts are the pull-request verdicts'
(`app.pulls.verdicts.compare_levels`: Welch's t on the jobs' log levels, the detector's minimum
change and the suite's noise floor):

- `reproduced`: some regression is worse again. The alert stands, with the numbers.
- `not_reproduced`: every regression of the pair is unchanged (or better). Those changes are
  marked; an alert nobody has triaged whose regressions are all withdrawn or not reproduced
  becomes `invalid` (by "reproduce") with the numbers in its note, the bad commit's failing
  status is cleared, and its automatic bisect is cancelled.
- `inconclusive` after the last round, or `failed` when a side could not be measured: the
  alert stands as detection left it.

Platforms no runner measures (a suite's results uploaded from CI) are `skipped`, with the reason.
"""
from __future__ import annotations

import logging
import math
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any, Sequence

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.bisect import service as bisect_service
from app.core import signals
from app.core.clock import utcnow
from app.core.config import REPRODUCE_START_ROUNDS, Settings, current_settings
from app.core.db import Database
from app.core.duties import Duty
from app.core.models import (
    Alert,
    AlertChange,
    AlertState,
    Bisect,
    BisectState,
    Commit,
    Job,
    JobReason,
    JobState,
    Repository,
    Reproduction,
    ReproductionJob,
    Runner,
    Suite,
)
from app.github import status as github_status
from app.jobs.matrix import TIER_DEFAULT_BRANCH, TIER_SPAN
from app.jobs.queue import enqueue, request_cancel
from app.pulls.comparisons import Group, group_verdicts
from app.pulls.verdicts import MetricVerdict

log = logging.getLogger(__name__)

START_ROUNDS = REPRODUCE_START_ROUNDS
# Above bisects (TIER_DEFAULT_BRANCH + TIER_SPAN + 100_000_000): a reproduction is a few jobs,
# and a regression that does not reproduce needs no bisect.
REPRODUCE_PRIORITY = TIER_DEFAULT_BRANCH + TIER_SPAN + 200_000_000
# An alert older than this is not measured again (an upgrade does not re-measure history).
MAX_AGE = timedelta(days=1)
# Nobody has triaged the alert: detection's own states and changes only.
_UNTRIAGED_BY = (None, "detector")


# ---------------------------------------------------------------- starting

def _regressions(alert: Alert) -> dict[tuple[str, str], list[AlertChange]]:
    """The alert's standing regressions by (suite, platform)."""
    groups: dict[tuple[str, str], list[AlertChange]] = defaultdict(list)
    for change in alert.changes:
        if change.is_regression and not (change.details or {}).get("withdrawn"):
            groups[(change.suite, change.platform)].append(change)
    return groups


def _queue_round(session: Session, reproduction: Reproduction, repository: Repository, suite: Suite) -> None:
    reproduction.rounds += 1
    for side, commit_id in (("good", reproduction.good_commit_id), ("bad", reproduction.bad_commit_id)):
        commit = session.get(Commit, commit_id)
        assert commit is not None
        job, _ = enqueue(session, repository, commit, suite, reproduction.platform, reason=JobReason.reproduce,
                         priority=REPRODUCE_PRIORITY, force=True)
        job.pinned_runner_id = reproduction.runner_id
        session.add(ReproductionJob(reproduction_id=reproduction.id, job_id=job.id, side=side,
                                    round=reproduction.rounds))


def start_for_alerts(session: Session, settings: Settings, now: datetime | None = None) -> list[int]:
    """One reproduction per (suite, platform) of each new or fixed performance regression alert
    of the last `MAX_AGE` that has none yet. Returns the ids of those that queued jobs."""
    if settings.reproduce_max_rounds == 0:
        return []
    now = now or utcnow()
    alerts = session.scalars(select(Alert).where(
        Alert.kind == "performance", Alert.is_regression.is_(True), Alert.good_commit_id.is_not(None),
        Alert.state.in_((AlertState.new, AlertState.fixed)), Alert.created_at >= now - MAX_AGE).order_by(Alert.id))
    started = []
    for alert in list(alerts):
        seen = set(session.execute(select(Suite.name, Reproduction.platform)
                                   .join(Suite, Suite.id == Reproduction.suite_id)
                                   .where(Reproduction.alert_id == alert.id)).all())
        repository = session.get(Repository, alert.repository_id)
        assert repository is not None and alert.good_commit_id is not None
        for (suite_name, platform) in sorted(_regressions(alert)):
            if (suite_name, platform) in seen:
                continue
            suite = session.scalar(select(Suite).where(Suite.name == suite_name))
            if suite is None:
                continue
            reproduction = Reproduction(alert_id=alert.id, suite_id=suite.id, platform=platform,
                                        good_commit_id=alert.good_commit_id, bad_commit_id=alert.bad_commit_id,
                                        state="measuring", rounds=0, verdicts=[])
            session.add(reproduction)
            session.flush()
            if platform not in (suite.platforms or []):
                _finish(reproduction, "skipped", f"no runner measures {suite_name} on {platform} "
                                                 f"(its results are uploaded); the alert stands as detected")
                continue
            for _ in range(START_ROUNDS):
                _queue_round(session, reproduction, repository, suite)
            started.append(reproduction.id)
            log.info("alert measured again", extra={"px_alert": alert.id, "px_platform": platform,
                                                    "px_suite": suite_name})
    return started


# ---------------------------------------------------------------- signal receivers

def on_job_claimed(session: Session, job: Job) -> None:
    """Pin the rest of the reproduction's jobs to the runner that took the first one."""
    if job.reason != JobReason.reproduce or job.runner_id is None:
        return
    reproduction_id = session.scalar(select(ReproductionJob.reproduction_id).where(ReproductionJob.job_id == job.id))
    if reproduction_id is None:
        return
    siblings = select(ReproductionJob.job_id).where(ReproductionJob.reproduction_id == reproduction_id)
    session.execute(update(Job).where(Job.id.in_(siblings), Job.state == JobState.queued,
                                      Job.pinned_runner_id.is_(None))
                    .values(pinned_runner_id=job.runner_id).execution_options(synchronize_session=False))
    session.execute(update(Reproduction).where(Reproduction.id == reproduction_id, Reproduction.runner_id.is_(None))
                    .values(runner_id=job.runner_id).execution_options(synchronize_session=False))


# ---------------------------------------------------------------- evaluation

def _group(session: Session, reproduction: Reproduction, suite: Suite) -> Group:
    """The reproduction's jobs as a pull-request comparison's pair: good as the base, bad as the head."""
    rows = session.execute(select(ReproductionJob, Job).join(Job, Job.id == ReproductionJob.job_id)
                           .where(ReproductionJob.reproduction_id == reproduction.id))
    return Group(reproduction.platform, suite,
                 {("base" if link.side == "good" else "head", link.round): job for link, job in rows})


def _verdict_json(v: MetricVerdict) -> dict[str, Any]:
    def number(x: float) -> float | None:
        return x if math.isfinite(x) else None
    return {"metric": v.metric, "direction": v.direction, "good_median": number(v.base_median),
            "bad_median": number(v.head_median), "change": number(v.change),
            "ci": [number(v.ci[0]), number(v.ci[1])], "p_value": number(v.p_value), "verdict": v.verdict,
            "rounds": v.rounds}


def _finish(reproduction: Reproduction, state: str, reason: str) -> str:
    reproduction.state, reproduction.reason, reproduction.updated_at = state, reason, utcnow()
    return state


def _percent(change: float | None) -> str:
    return "n/a" if change is None else f"{change * 100:+.1f} %"


def _summary(found: Sequence[dict[str, Any]], runner: str) -> str:
    return "; ".join(f"{v['metric']} {_percent(v['change'])} (95 % interval {_percent(v['ci'][0])} to "
                     f"{_percent(v['ci'][1])}) over {v['rounds']} A/B rounds on {runner}" for v in found)


def evaluate(session: Session, reproduction: Reproduction, settings: Settings) -> str:
    """One look at a measuring reproduction whose jobs have all finished: its outcome, or one more
    round. Where a person marked the alert invalid or won't-fix, its outstanding jobs are cancelled."""
    alert = session.get(Alert, reproduction.alert_id)
    suite = session.get(Suite, reproduction.suite_id)
    assert alert is not None and suite is not None
    group = _group(session, reproduction, suite)
    if alert.state in (AlertState.invalid, AlertState.wont_fix):
        for job in group.jobs.values():
            if job.state in (JobState.queued, JobState.running):
                request_cancel(session, job)
        return _finish(reproduction, "cancelled", f"the alert was marked {alert.state.value} while it was measured again")
    changes = _regressions(alert).get((suite.name, reproduction.platform), [])
    if not changes:
        return _finish(reproduction, "cancelled", "no standing regression is left on this suite and platform")
    max_rounds = max(settings.reproduce_max_rounds, START_ROUNDS)
    metrics = {c.metric for c in changes}
    found = [v for v in group_verdicts(session, group, max_rounds) if v.metric in metrics]
    reproduction.verdicts = [_verdict_json(v) for v in found]
    reproduction.updated_at = utcnow()
    named = session.get(Runner, reproduction.runner_id) if reproduction.runner_id is not None else None
    runner = f"runner {named.name}" if named is not None else "one runner"
    worse = [v for v in reproduction.verdicts if v["verdict"] == "worse"]
    if worse:
        for change in changes:
            change.details = {**change.details, "reproduced": next(
                (v for v in reproduction.verdicts if v["metric"] == change.metric), None)}
        return _finish(reproduction, "reproduced", "reproduced: " + _summary(worse, runner))
    if {v.metric for v in found} == metrics and all(v.verdict in ("unchanged", "better") for v in found):
        _withdraw(session, alert, reproduction, changes, _summary(reproduction.verdicts, runner))
        return "not_reproduced"
    measured = min((v.rounds for v in found), default=0)
    for side, name in (("base", "good"), ("head", "bad")):
        states = [job.state for (s, _), job in group.jobs.items() if s == side]
        if len(states) >= START_ROUNDS and all(state in (JobState.failed, JobState.cancelled) for state in states):
            return _finish(reproduction, "failed", f"every job on the {name} commit failed ({len(states)}); "
                                                   "the alert stands as detected")
    if reproduction.rounds < max_rounds:
        repository = session.get(Repository, alert.repository_id)
        assert repository is not None
        _queue_round(session, reproduction, repository, suite)
        return "measuring"
    if measured < 2:
        failed = sum(1 for job in group.jobs.values() if job.state == JobState.failed)
        return _finish(reproduction, "failed", f"only {measured} of {reproduction.rounds} A/B rounds measured both "
                                               f"commits ({failed} jobs failed); the alert stands as detected")
    return _finish(reproduction, "inconclusive", f"inconclusive after {reproduction.rounds} A/B rounds: "
                                                 + _summary(reproduction.verdicts, runner) + "; the alert stands as detected")


def _withdraw(session: Session, alert: Alert, reproduction: Reproduction, changes: Sequence[AlertChange],
              summary: str) -> None:
    _finish(reproduction, "not_reproduced", "not reproduced: " + summary)
    for change in changes:
        change.details = {**change.details, "not_reproduced": next(
            (v for v in reproduction.verdicts if v["metric"] == change.metric), None)}
    bad = session.get(Commit, alert.bad_commit_id)
    assert bad is not None
    for change in changes:
        github_status.set_status(session, repository_id=alert.repository_id, sha=bad.sha, platform=change.platform,
                                 suite=change.suite, state="success", clears_failure=True,
                                 description=f"{change.metric} regression not reproduced when measured again")
    regressions = [c for c in alert.changes if c.is_regression]
    if (alert.state not in (AlertState.new, AlertState.fixed) or alert.updated_by not in _UNTRIAGED_BY
            or not all(c.details.get("withdrawn") or c.details.get("not_reproduced") for c in regressions)):
        return
    alert.state, alert.updated_by, alert.updated_at = AlertState.invalid, "reproduce", utcnow()
    alert.note = f"not reproduced when measured again: {summary}"
    signals.alert_withdrawn.send(session, alert=alert)
    for bisect_id in session.scalars(select(Bisect.id).where(
            Bisect.alert_id == alert.id, Bisect.state.in_([BisectState.pending, BisectState.running]))):
        bisect_service.cancel(session, bisect_id, "reproduce (the alert did not reproduce)")
    log.info("alert not reproduced", extra={"px_alert": alert.id, "px_platform": reproduction.platform})


# ---------------------------------------------------------------- the duty

def run_duty(db: Database) -> dict[str, Any]:
    """The `reproduce` duty: reproductions for new alerts, then one look at every measuring one
    whose jobs have all finished or whose alert a person closed."""
    settings = current_settings()
    with db.session() as session:
        started = start_for_alerts(session, settings)
        session.commit()
        ids = list(session.scalars(select(Reproduction.id).where(Reproduction.state == "measuring")
                                   .order_by(Reproduction.id)))
        out = set(session.scalars(select(ReproductionJob.reproduction_id).distinct()
                                  .join(Job, Job.id == ReproductionJob.job_id)
                                  .where(ReproductionJob.reproduction_id.in_(ids),
                                         Job.state.in_([JobState.queued, JobState.running])))) if ids else set()
        # A person closed the alert meanwhile: stop at once, not after its queued rounds.
        stopped = set(session.scalars(select(Reproduction.id).join(Alert, Alert.id == Reproduction.alert_id)
                                      .where(Reproduction.id.in_(ids),
                                             Alert.state.in_([AlertState.invalid, AlertState.wont_fix])))) if ids else set()
    outcomes: dict[int, str] = {}
    for reproduction_id in (i for i in ids if i not in out or i in stopped):
        with db.session() as session:
            reproduction = session.get(Reproduction, reproduction_id)
            if reproduction is None or reproduction.state != "measuring":
                continue
            outcomes[reproduction_id] = evaluate(session, reproduction, settings)
            session.commit()
    return {"started": started, "outcomes": outcomes}


def _due(session: Session, since: datetime | None) -> bool:
    """A performance alert changed, or a reproduction's job finished, since the last pass."""
    if since is None:
        return True
    changed = select(Alert.id).where(Alert.kind == "performance", Alert.updated_at > since).limit(1)
    finished = (select(Job.id).join(ReproductionJob, ReproductionJob.job_id == Job.id)
                .where(Job.finished_at > since).limit(1))
    return session.scalar(changed) is not None or session.scalar(finished) is not None


DUTIES = [Duty("reproduce", run_duty, interval_s=1.0, lease_s=120.0, due=_due)]

