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
from app.jobs import artifacts, queue
from app.notify import outbox as notify_outbox
from app.notify import sender as notify_sender
from app.pulls import comparisons as pulls
from app.pulls import outbox as pull_outbox
from app.reproduce import service as reproduce
from app.retention import prune
from app.uploads import queued as queued_uploads


def connect() -> None:
    """Subscribe the areas to the queue's signals (idempotent: a receiver is connected once)."""
    signals.job_queued.connect(github_status.on_job_queued)
    signals.run_stored.connect(detection.on_run_stored)
    signals.run_stored.connect(github_status.on_run_stored)
    signals.job_failed.connect(github_status.on_job_failed)
    signals.alert_opened.connect(notify_outbox.on_alert_opened)
    signals.alert_fixed.connect(notify_outbox.on_alert_fixed)
    signals.alert_withdrawn.connect(notify_outbox.on_alert_withdrawn)
    signals.bisect_done.connect(notify_outbox.on_bisect_done)
    signals.pull_request_verdict.connect(notify_outbox.on_pull_request_verdict)
    signals.job_claimed.connect(pulls.on_job_claimed)
    signals.run_stored.connect(pulls.on_run_stored)
    signals.job_failed.connect(pulls.on_job_failed)
    signals.job_claimed.connect(reproduce.on_job_claimed)


def duties() -> list[Duty]:
    """Every background duty: lease reaping, webhook processing, commit statuses, detection, bisect,
    alert reproduction, pull-request comparisons and their GitHub outbox, notifications, artifact
    and sample retention, and uploads of commits the service had not seen."""
    return [*queue.DUTIES, *ingest.DUTIES, *github_status.DUTIES, *detection.DUTIES, *bisect.DUTIES, *reproduce.DUTIES,
            *pulls.DUTIES, *pull_outbox.DUTIES, *notify_sender.DUTIES, *artifacts.DUTIES, *prune.DUTIES,
            *queued_uploads.DUTIES]
