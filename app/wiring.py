"""How the areas are put together, in one place used by every entry point (`create_app`, the
CLI, `parallax serve`): who listens to the queue's signals, and which background duties exist.

The queue announces state changes as signals (`app.core.signals`) without knowing who listens;
detection marks series for a scan and the GitHub outbox queues commit statuses. Both receivers
run inside the queue's transaction.
"""
from __future__ import annotations

from app.bisect import service as bisect
from app.core import signals
from app.core.duties import Duty
from app.detection import service as detection
from app.github import ingest
from app.github import status as github_status
from app.jobs import queue
from app.pulls import comparisons as pulls
from app.pulls import outbox as pull_outbox


def connect() -> None:
    """Subscribe the areas to the queue's signals (idempotent: a receiver is connected once)."""
    signals.job_queued.connect(github_status.on_job_queued)
    signals.run_stored.connect(detection.on_run_stored)
    signals.run_stored.connect(github_status.on_run_stored)
    signals.job_failed.connect(github_status.on_job_failed)
    signals.job_claimed.connect(pulls.on_job_claimed)
    signals.run_stored.connect(pulls.on_run_stored)
    signals.job_failed.connect(pulls.on_job_failed)


def duties() -> list[Duty]:
    """Every background duty: lease reaping, webhook processing, commit statuses, detection, bisect."""
    return [*queue.DUTIES, *ingest.DUTIES, *github_status.DUTIES, *detection.DUTIES, *bisect.DUTIES,
            *pulls.DUTIES, *pull_outbox.DUTIES]
