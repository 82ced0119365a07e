"""What happens after the queue changes state: the seam where detection and GitHub statuses
hook in. Each function runs inside the caller's transaction and must stay cheap (mark work for
the background workers; never call out over the network here)."""
from __future__ import annotations

from sqlalchemy.orm import Session

from app import detection_service, github_status
from app.models import Job, Run


def job_queued(session: Session, job: Job) -> None:
    """A new job was queued (a commit status can go to pending)."""
    github_status.on_job_queued(session, job)


def run_stored(session: Session, run: Run) -> None:
    """A results document was stored: mark the series for detection, queue a status update."""
    detection_service.on_run_stored(session, run)
    github_status.on_run_stored(session, run)


def job_failed(session: Session, job: Job) -> None:
    """A job failed for good (no retry left)."""
    github_status.on_job_failed(session, job)
