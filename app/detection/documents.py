"""Alerts and their changes as JSON, the shape `GET /api/v1/alerts` answers and the
notifications carry (one writer, so the API and a webhook body agree)."""
from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.clock import as_utc
from app.core.models import Alert, AlertChange, Bisect, Commit, Job, JobState, Repository, Reproduction, ReproductionJob, Suite


def change_json(change: AlertChange) -> dict[str, Any]:
    return {"id": change.id, "suite": change.suite, "metric": change.metric, "platform": change.platform,
            "context_fingerprint": change.context_fingerprint, "direction": change.direction,
            "relative_change": change.relative_change, "ci": [change.ci_low, change.ci_high],
            "p_value": change.p_value, "before": change.before_value, "after": change.after_value,
            "classification": change.classification, "is_regression": change.is_regression,
            "platforms": change.details.get("platforms", [change.platform]),
            "suspected_commits": change.suspected_commits,
            "confirm_jobs": change.details.get("confirm_jobs", []),
            "restored_by": change.details.get("restored_by"),
            "withdrawn": change.details.get("withdrawn"),
            "reproduced": change.details.get("reproduced"),
            "not_reproduced": change.details.get("not_reproduced"),
            "drift": change.details.get("drift") if isinstance(change.details.get("drift"), dict) else None,
            "noise_changed": change.details.get("noise_changed")}


def alert_json(session: Session, alert: Alert) -> dict[str, Any]:
    def sha(commit_id: int | None) -> str | None:
        commit = session.get(Commit, commit_id) if commit_id is not None else None
        return commit.sha if commit is not None else None

    repository = session.get(Repository, alert.repository_id)
    return {"id": alert.id, "repository": repository.name if repository else None, "branch": alert.branch,
            "kind": alert.kind, "is_regression": alert.is_regression, "state": alert.state.value,
            "note": alert.note, "updated_by": alert.updated_by,
            "good": sha(alert.good_commit_id), "bad": sha(alert.bad_commit_id),
            "created_at": as_utc(alert.created_at).isoformat(),
            "updated_at": as_utc(alert.updated_at).isoformat(),
            "changes": [change_json(c) for c in sorted(alert.changes, key=lambda c: c.id)],
            "bisects": [bisect_link(session, b) for b in
                        session.scalars(select(Bisect).where(Bisect.alert_id == alert.id).order_by(Bisect.id))],
            "reproductions": [reproduction_json(session, r) for r in
                              session.scalars(select(Reproduction).where(Reproduction.alert_id == alert.id)
                                              .order_by(Reproduction.id))]}


def bisect_link(session: Session, bisect: Bisect) -> dict[str, Any]:
    culprit = session.get(Commit, bisect.culprit_commit_id) if bisect.culprit_commit_id is not None else None
    return {"id": bisect.id, "url": f"/api/v1/bisects/{bisect.id}", "state": bisect.state.value,
            "platform": bisect.platform, "metric": bisect.metric, "culprit": culprit.sha if culprit else None}


def reproduction_json(session: Session, reproduction: Reproduction) -> dict[str, Any]:
    """The alert's good and bad commits measured again (app.reproduce): outcome, verdicts, jobs."""
    suite = session.get(Suite, reproduction.suite_id)
    states = list(session.scalars(select(Job.state).join(ReproductionJob, ReproductionJob.job_id == Job.id)
                                  .where(ReproductionJob.reproduction_id == reproduction.id)))
    return {"id": reproduction.id, "suite": suite.name if suite else None, "platform": reproduction.platform,
            "state": reproduction.state, "rounds": reproduction.rounds, "runner_id": reproduction.runner_id,
            "reason": reproduction.reason, "verdicts": reproduction.verdicts,
            "jobs": {"queued": states.count(JobState.queued), "running": states.count(JobState.running),
                     "finished": sum(1 for s in states if s not in (JobState.queued, JobState.running))}}
