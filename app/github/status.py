"""Commit statuses on GitHub, through an outbox.

Queue hooks (`on_job_queued`, `on_run_stored`, `on_job_failed`; `on_run_stored` runs in the
queue's delivery of stored runs, after the completing transaction) and detection (`set_status`)
only insert rows into `commit_status_updates` inside the caller's transaction; the sender duty
POSTs them to `{github_api_url}/repos/{owner}/{repo}/statuses/{sha}` later, so GitHub being
slow or down never blocks ingestion. Context `parallax/<platform>/<suite>`; `target_url` is the
commit's dashboard page. Only with a token and an owner/name repository. A failure (regression)
is sticky: a later pending or success for the same commit and context is not sent. The newest
row per (commit, context) wins; older unsent ones are marked superseded. Network errors and 5xx
are retried with exponential backoff; `Retry-After` and `X-RateLimit-Remaining: 0` +
`X-RateLimit-Reset` push every waiting row back to the time GitHub names.
"""
from __future__ import annotations

import logging
import random
import re
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import requests
from sqlalchemy import and_, select, update
from sqlalchemy.orm import Session

from app.core.clock import utcnow
from app.core.config import Settings, current_settings, use_settings
from app.core.db import Database
from app.core.duties import Duty
from app.core.models import CommitStatusUpdate, Job, JobReason, Measurement, Repository, Run, Suite
from app.core.outbox import claim
from app.github import app_auth
from app.jobs import queue

log = logging.getLogger(__name__)

STATES = ("pending", "success", "failure", "error")
OWNER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+$")
MAX_ATTEMPTS = 8
BACKOFF_BASE_S = 5.0
BACKOFF_MAX_S = 1800.0
CLAIM_S = 120.0
# Jobs Parallax queues for its own questions (bisect steps, history, cross-platform confirmation
# at older commits) post no status: the commit's author did not ask for them.
SILENT_REASONS = (JobReason.bisect, JobReason.backfill, JobReason.confirm, JobReason.reproduce)


def enabled_for(settings: Settings, repository_name: str) -> bool:
    return app_auth.enabled(settings) and bool(OWNER_NAME_RE.match(repository_name))


# ---------------------------------------------------------------- outbox

def context_name(platform: str, suite: str) -> str:
    return f"parallax/{platform}/{suite}"


def set_status(session: Session, *, repository_id: int, sha: str, platform: str, suite: str, state: str,
               description: str, clears_failure: bool = False) -> None:
    """Queue a commit status. A "failure" (regression flagged) already recorded for this commit
    and context is sticky: later "pending", "success" or "error" updates for it are dropped,
    unless `clears_failure` says the regression itself was withdrawn by the detector."""
    if state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}, got {state!r}")
    settings = current_settings()
    if not app_auth.enabled(settings):
        return
    repository = session.get(Repository, repository_id)
    if repository is None or not enabled_for(settings, repository.name):
        return
    context = context_name(platform, suite)
    if state != "failure" and not clears_failure:
        failed = session.scalar(select(CommitStatusUpdate.id).where(
            CommitStatusUpdate.repository_id == repository_id, CommitStatusUpdate.sha == sha,
            CommitStatusUpdate.context == context, CommitStatusUpdate.state == "failure").limit(1))
        if failed is not None:
            return
    session.add(CommitStatusUpdate(
        repository_id=repository_id, sha=sha, context=context, state=state,
        description=_shorten(description), target_url=f"{settings.public_url}/commits/{sha}",
        next_attempt_at=utcnow()))


def _shorten(text: str, limit: int = 140) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _job_cell(session: Session, job: Job) -> tuple[str, str]:
    suite = job.suite if job.suite is not None else session.get(Suite, job.suite_id)
    sha = job.commit.sha
    return sha, suite.name


def _silent(job: Job) -> bool:
    """Parallax's own questions, and a pull request's A/B jobs (its comparison posts the verdict)."""
    return job.reason in SILENT_REASONS or job.pull_request_id is not None


def on_job_queued(session: Session, job: Job) -> None:
    if _silent(job):
        return
    sha, suite = _job_cell(session, job)
    set_status(session, repository_id=job.repository_id, sha=sha, platform=job.platform, suite=suite,
               state="pending", description=f"queued: {suite} on {job.platform}")


def headline(measurements: list[Measurement]) -> str:
    """The number that matters: the run's first metric, as the median of its samples."""
    if not measurements:
        return "measured"
    first = min(measurements, key=lambda m: m.id or 0)
    value = statistics.median(float(x) for x in first.samples)
    return " ".join(part for part in (first.metric, _format(value), first.unit, "(median)") if part)


def _format(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def on_run_stored(session: Session, run: Run) -> None:
    job = session.get(Job, run.job_id)
    if job is None or _silent(job):
        return
    sha, suite = _job_cell(session, job)
    measurements = list(run.measurements)
    set_status(session, repository_id=job.repository_id, sha=sha, platform=run.platform, suite=suite,
               state="success", description=headline(measurements))


def on_job_failed(session: Session, job: Job) -> None:
    if _silent(job):
        return
    sha, suite = _job_cell(session, job)
    reason = (job.failure_reason or "").strip().splitlines()[0] if (job.failure_reason or "").strip() else "no reason given"
    set_status(session, repository_id=job.repository_id, sha=sha, platform=job.platform, suite=suite,
               state="error", description=f"job failed after {job.attempt} attempt(s): {reason}")


# ---------------------------------------------------------------- sender

@dataclass
class SendReport:
    sent: int = 0
    superseded: int = 0
    retried: int = 0
    gave_up: int = 0
    rate_limited_until: datetime | None = None
    errors: list[str] = field(default_factory=list)


def _backoff(attempts: int) -> timedelta:
    delay = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(0, attempts - 1))
    return timedelta(seconds=delay * random.uniform(0.8, 1.2))


def _rate_limit_until(response: requests.Response, moment: datetime) -> datetime | None:
    """When GitHub says to wait: `Retry-After` (seconds) or an exhausted rate limit's reset."""
    if response.status_code not in (403, 429):
        return None
    retry_after = response.headers.get("Retry-After")
    if retry_after is not None:
        try:
            return moment + timedelta(seconds=max(1.0, float(retry_after)))
        except ValueError:
            pass
    if response.headers.get("X-RateLimit-Remaining") == "0":
        try:
            reset = datetime.fromtimestamp(int(response.headers["X-RateLimit-Reset"]), tz=timezone.utc)
        except (KeyError, ValueError):
            reset = moment + timedelta(seconds=60)
        return max(reset, moment + timedelta(seconds=1))
    if response.status_code == 429:
        return moment + timedelta(seconds=60)
    return None


def _claim(db: Database, row_id: int, moment: datetime) -> bool:
    return claim(db, CommitStatusUpdate, row_id, moment=moment, lease_s=CLAIM_S,
                 still_due=(CommitStatusUpdate.sent_at.is_(None), CommitStatusUpdate.attempts < MAX_ATTEMPTS))


def _superseded(session: Session, row: CommitStatusUpdate) -> bool:
    newer = session.scalar(select(CommitStatusUpdate.id).where(
        CommitStatusUpdate.repository_id == row.repository_id, CommitStatusUpdate.sha == row.sha,
        CommitStatusUpdate.context == row.context, CommitStatusUpdate.id > row.id).limit(1))
    if newer is None:
        return False
    if row.state == "failure":  # sticky: only a newer failure (a newer description) replaces it
        return session.scalar(select(CommitStatusUpdate.id).where(
            CommitStatusUpdate.repository_id == row.repository_id, CommitStatusUpdate.sha == row.sha,
            CommitStatusUpdate.context == row.context, CommitStatusUpdate.id > row.id,
            CommitStatusUpdate.state == "failure").limit(1)) is not None
    return True


def send_due(db: Database, settings: Settings, *, limit: int = 200, budget_s: float = 20.0,
             timeout: tuple[float, float] = (5.0, 10.0), http: requests.Session | None = None) -> SendReport:
    """Send the due outbox rows, oldest first, within `budget_s` seconds."""
    report = SendReport()
    if not app_auth.enabled(settings):
        return report
    # Runs stored since the last delivery have not queued their "success" yet: queue it first,
    # so a "pending" that it supersedes is not sent in its place.
    with use_settings(settings):
        queue.deliver_stored_runs(db)
    started = time.monotonic()
    moment = utcnow()
    with db.session() as session:
        due = list(session.execute(
            select(CommitStatusUpdate.id, Repository.name, Repository.id)
            .join(Repository, Repository.id == CommitStatusUpdate.repository_id)
            .where(CommitStatusUpdate.sent_at.is_(None), CommitStatusUpdate.attempts < MAX_ATTEMPTS,
                   CommitStatusUpdate.next_attempt_at <= moment)
            .order_by(CommitStatusUpdate.id).limit(limit)))
    http = http or requests.Session()
    for row_id, repository_name, repository_id in due:
        if time.monotonic() - started > budget_s:
            break
        if not OWNER_NAME_RE.match(repository_name):
            continue
        moment = utcnow()
        if not _claim(db, row_id, moment):
            continue
        with db.session() as session:
            row = session.get(CommitStatusUpdate, row_id)
            assert row is not None
            if _superseded(session, row):
                row.sent_at, row.last_error = moment, "superseded by a newer status for this commit and context"
                report.superseded += 1
                continue
            body = {"state": row.state, "context": row.context, "description": row.description,
                    "target_url": row.target_url}
            url = f"{settings.github_api_url}/repos/{repository_name}/statuses/{row.sha}"
            attempts = row.attempts
            installation_id = app_auth.installation_for(session, repository_id)
        try:
            headers = app_auth.headers(settings, installation_id, http=http, timeout=timeout)
            response = http.post(url, json=body, headers=headers, timeout=timeout)
        except (requests.RequestException, app_auth.MissingInstallation) as exc:
            _retry(db, row_id, attempts, f"{type(exc).__name__}: {exc}", report)
            continue
        if 200 <= response.status_code < 300:
            with db.session() as session:
                session.execute(update(CommitStatusUpdate).where(CommitStatusUpdate.id == row_id)
                                .values(sent_at=utcnow(), last_error=None))
            report.sent += 1
            continue
        until = _rate_limit_until(response, utcnow())
        if until is not None:
            _pause_all(db, row_id, until, f"rate limited ({response.status_code}); waiting until {until.isoformat()}")
            report.rate_limited_until = until
            break
        message = f"HTTP {response.status_code}: {response.text[:500]}"
        if response.status_code >= 500 or response.status_code in (408, 409):
            _retry(db, row_id, attempts, message, report)
        else:
            with db.session() as session:  # 4xx other than rate limits will not get better by retrying
                session.execute(update(CommitStatusUpdate).where(CommitStatusUpdate.id == row_id)
                                .values(attempts=MAX_ATTEMPTS, last_error=message))
            report.gave_up += 1
            report.errors.append(message)
    return report


def _retry(db: Database, row_id: int, attempts: int, message: str, report: SendReport) -> None:
    with db.session() as session:
        session.execute(update(CommitStatusUpdate).where(CommitStatusUpdate.id == row_id)
                        .values(next_attempt_at=utcnow() + _backoff(attempts), last_error=message))
    if attempts >= MAX_ATTEMPTS:
        report.gave_up += 1
    else:
        report.retried += 1
    report.errors.append(message)
    log.warning("commit status not sent", extra={"px_status": row_id, "px_error": message})


def _pause_all(db: Database, row_id: int, until: datetime, message: str) -> None:
    """A rate limit applies to the token, not the row: every waiting row waits; this attempt
    does not count against the row's limit."""
    with db.session() as session:
        session.execute(update(CommitStatusUpdate).where(CommitStatusUpdate.id == row_id)
                        .values(attempts=CommitStatusUpdate.attempts - 1, last_error=message))
        session.execute(update(CommitStatusUpdate)
                        .where(and_(CommitStatusUpdate.sent_at.is_(None), CommitStatusUpdate.next_attempt_at < until))
                        .values(next_attempt_at=until))


DUTIES = [Duty("github-statuses", lambda db: send_due(db, current_settings()), interval_s=2.0, lease_s=60.0)]
