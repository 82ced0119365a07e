"""What happens after the queue changes state: the seam where detection and GitHub statuses
hook in. Each function runs inside the caller's transaction and must stay cheap (mark work for
the background workers; never call out over the network here)."""
from __future__ import annotations

import importlib
import importlib.util

from sqlalchemy.orm import Session

from app.models import Job, Run


def _optional(module_name: str):  # type: ignore[no-untyped-def]
    if importlib.util.find_spec(module_name) is None:
        return None
    return importlib.import_module(module_name)


def job_queued(session: Session, job: Job) -> None:
    """A new job was queued (a commit status can go to pending)."""
    module = _optional("app.github_status")
    if module is not None:
        module.on_job_queued(session, job)


def run_stored(session: Session, run: Run) -> None:
    """A results document was stored: mark the series for detection, queue a status update."""
    for name in ("app.detection_service", "app.github_status"):
        module = _optional(name)
        if module is not None:
            module.on_run_stored(session, run)


def job_failed(session: Session, job: Job) -> None:
    """A job failed for good (no retry left)."""
    module = _optional("app.github_status")
    if module is not None:
        module.on_job_failed(session, job)
