"""Files a job uploads beside its results document (`POST /api/v1/jobs/<id>/artifacts`): a
simulator's stream timeline, a `torch.profiler` trace. Stored in their own table, never in the
measurements; each is capped (`max_artifact_bytes`, 413 past it, which leaves the job and its
results alone), and the `artifact-retention` duty deletes those older than
`artifact_retention_days`.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.core.clock import utcnow
from app.core.config import current_settings
from app.core.db import Database
from app.core.duties import Duty
from app.core.errors import Conflict, Invalid, PayloadTooLarge
from app.core.models import JobArtifact, Run, Runner
from app.jobs import queue

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MAX_PER_ATTEMPT = 16
TIMELINE = "timeline.json"


@dataclass(frozen=True)
class ArtifactInfo:
    id: int
    job_id: int
    attempt: int
    name: str
    content_type: str
    size_bytes: int
    sha256: str

    def as_json(self) -> dict[str, object]:
        return {"id": self.id, "job_id": self.job_id, "attempt": self.attempt, "name": self.name,
                "content_type": self.content_type, "size_bytes": self.size_bytes, "sha256": self.sha256,
                "url": f"/api/v1/jobs/{self.job_id}/artifacts/{self.name}?attempt={self.attempt}"}


def _info(row: JobArtifact) -> ArtifactInfo:
    return ArtifactInfo(row.id, row.job_id, row.attempt, row.name, row.content_type, row.size_bytes, row.sha256)


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise Invalid(f"name: must be 1-128 characters of letters, digits, '.', '_' or '-', not starting with "
                      f"'.' or '-', got {name!r}", extra={"field": "name"})
    return name


def store(session: Session, runner: Runner, job_id: int, name: str, data: bytes, content_type: str,
          max_bytes: int, attempt: int | None = None) -> tuple[ArtifactInfo, bool]:
    """Keep one file of the attempt the runner holds. The same bytes again answer with the stored
    row (an upload retried after a lost reply); other bytes under a taken name are a 409."""
    check_name(name)
    if len(data) > max_bytes:
        raise PayloadTooLarge(f"artifact {name!r} is {len(data)} bytes, over the limit of {max_bytes} "
                              "(PARALLAX_MAX_ARTIFACT_BYTES); the job's results are not affected")
    job = queue.held_job(session, runner, job_id, attempt)
    digest = hashlib.sha256(data).hexdigest()
    existing = session.scalar(select(JobArtifact).where(JobArtifact.job_id == job.id, JobArtifact.attempt == job.attempt,
                                                        JobArtifact.name == name))
    if existing is not None:
        if existing.sha256 == digest:
            return _info(existing), False
        raise Conflict(f"artifact {name!r} of job {job.id} attempt {job.attempt} is already stored with other content")
    count = len(session.scalars(select(JobArtifact.id).where(JobArtifact.job_id == job.id,
                                                              JobArtifact.attempt == job.attempt)).all())
    if count >= MAX_PER_ATTEMPT:
        raise Invalid(f"name: at most {MAX_PER_ATTEMPT} artifacts per job attempt", extra={"field": "name"})
    row = JobArtifact(job_id=job.id, attempt=job.attempt, name=name, content_type=content_type[:128] or
                      "application/octet-stream", size_bytes=len(data), sha256=digest, data=data)
    session.add(row)
    session.commit()
    return _info(row), True


def listed(session: Session, job_id: int) -> list[ArtifactInfo]:
    """Every stored artifact of the job, newest attempt first."""
    rows = session.execute(select(JobArtifact.id, JobArtifact.job_id, JobArtifact.attempt, JobArtifact.name,
                                  JobArtifact.content_type, JobArtifact.size_bytes, JobArtifact.sha256)
                           .where(JobArtifact.job_id == job_id)
                           .order_by(JobArtifact.attempt.desc(), JobArtifact.name)).all()
    return [ArtifactInfo(*row) for row in rows]


def fetch(session: Session, job_id: int, name: str, attempt: int | None = None) -> JobArtifact | None:
    query = select(JobArtifact).where(JobArtifact.job_id == job_id, JobArtifact.name == name)
    if attempt is not None:
        query = query.where(JobArtifact.attempt == attempt)
    return session.scalar(query.order_by(JobArtifact.attempt.desc()).limit(1))


def of_run(session: Session, run: Run, name: str) -> JobArtifact | None:
    """The artifact the attempt that produced `run` uploaded under `name`."""
    return fetch(session, run.job_id, name, run.attempt)


def prune(session: Session, retention_days: float) -> int:
    """Delete artifacts older than the retention; returns how many."""
    cutoff = utcnow() - timedelta(days=retention_days)
    result = session.execute(delete(JobArtifact).where(JobArtifact.created_at < cutoff))
    session.commit()
    return int(result.rowcount or 0)


def _prune_duty(db: Database) -> int:
    with db.session() as session:
        return prune(session, current_settings().artifact_retention_days)


DUTIES = [Duty("artifact-retention", _prune_duty, interval_s=3600.0, lease_s=600.0)]
