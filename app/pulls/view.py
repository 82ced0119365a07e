"""What `GET /api/v1/pulls/<owner>/<repo>/<number>` answers (DESIGN.md contract) and the pull
request page shows: the newest comparison's state, head, base, rounds, verdicts and scopes,
plus the A/B jobs and the heads measured before."""
from __future__ import annotations

import statistics
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.clock import as_utc
from app.core.errors import NotFound
from app.core.models import (
    Commit,
    Job,
    Measurement,
    PullComparison,
    PullComparisonJob,
    PullRequest,
    Repository,
    Run,
    Suite,
)
from app.pulls import comparisons


def find(session: Session, repository_name: str, number: int) -> tuple[Repository, PullRequest]:
    repository = session.scalar(select(Repository).where(Repository.name == repository_name))
    if repository is None:
        raise NotFound(f"unknown repository {repository_name!r}")
    pull = session.scalar(select(PullRequest).where(PullRequest.repository_id == repository.id,
                                                    PullRequest.number == number))
    if pull is None:
        raise NotFound(f"pull request #{number} of {repository_name} has not been seen by Parallax")
    return repository, pull


def _sha(session: Session, commit_id: int | None) -> str | None:
    if commit_id is None:
        return None
    commit = session.get(Commit, commit_id)
    return commit.sha if commit is not None else None


def jobs_json(session: Session, comparison: PullComparison) -> list[dict[str, Any]]:
    rows = session.execute(select(PullComparisonJob, Job, Suite.name).join(Job, Job.id == PullComparisonJob.job_id)
                           .join(Suite, Suite.id == PullComparisonJob.suite_id)
                           .where(PullComparisonJob.comparison_id == comparison.id).order_by(Job.id))
    return [{"id": job.id, "side": link.side, "round": link.round, "platform": link.platform, "suite": suite,
             "state": job.state.value, "runner_id": job.runner_id, "failure_kind": job.failure_kind}
            for link, job, suite in rows]


def pull_json(session: Session, repository: Repository, pull: PullRequest) -> dict[str, Any]:
    current = comparisons.latest(session, pull.id)
    history = list(session.scalars(select(PullComparison).where(PullComparison.pull_request_id == pull.id)
                                   .order_by(PullComparison.id.desc())))
    verdicts = current.verdicts if current is not None else []
    return {
        "repository": repository.name, "number": pull.number, "title": pull.title, "pull_state": pull.state,
        "state": current.state if current is not None else "not_measured",
        "head": _sha(session, current.head_commit_id if current else pull.head_commit_id),
        "base": _sha(session, current.base_commit_id if current else pull.merge_base_commit_id),
        "rounds": max((v["rounds"] for v in verdicts), default=0),
        "conclusion": current.conclusion if current else None,
        "title_line": current.title if current else None,
        "accepted_by": current.accepted_by if current else None,
        "verdicts": [{k: v[k] for k in ("platform", "suite", "metric", "base_median", "head_median", "change", "ci",
                                        "p_value", "verdict", "rounds", "direction")} for v in verdicts],
        "classification": list(current.classification or []) if current else [],
        "notes": comparisons.runner_notes(session, current) if current else [],
        "jobs": jobs_json(session, current) if current else [],
        "comparisons": [{"id": c.id, "head": _sha(session, c.head_commit_id), "state": c.state,
                         "conclusion": c.conclusion, "title": c.title,
                         "created_at": as_utc(c.created_at).isoformat()} for c in history],
    }


def ab_samples(session: Session, comparison: PullComparison) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Per (platform, suite, metric): every A/B job's median and samples, in claim order."""
    rows = session.execute(select(PullComparisonJob, Job, Suite.name, Measurement)
                           .join(Job, Job.id == PullComparisonJob.job_id)
                           .join(Suite, Suite.id == PullComparisonJob.suite_id)
                           .join(Run, Run.job_id == Job.id).join(Measurement, Measurement.run_id == Run.id)
                           .where(PullComparisonJob.comparison_id == comparison.id).order_by(Job.id, Run.id))
    out: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for link, job, suite, measurement in rows:
        values = [float(x) for x in measurement.samples]
        out.setdefault((link.platform, suite, measurement.metric), []).append(
            {"job_id": job.id, "side": link.side, "round": link.round, "samples": values,
             "median": float(statistics.median(values)) if values else None})
    return out


def open_pulls(session: Session, limit: int = 50) -> list[dict[str, Any]]:
    """Open pull requests with their newest verdict, for the home page."""
    rows = session.execute(select(PullRequest, Repository.name).join(Repository, Repository.id == PullRequest.repository_id)
                           .where(PullRequest.state == "open").order_by(PullRequest.updated_at.desc()).limit(limit))
    out = []
    for pull, name in rows:
        current = comparisons.latest(session, pull.id)
        out.append({"repository": name, "number": pull.number, "title": pull.title,
                    "state": current.state if current else "not_measured",
                    "conclusion": current.conclusion if current else None,
                    "title_line": current.title if current else None})
    return out
