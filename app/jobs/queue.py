"""The job queue: enqueueing the matrix, race-free claiming with leases, heartbeats, logs,
idempotent completion, failure with retry, and reaping of expired leases.

Functions take a `Database` or `Session` and know nothing of Flask, so the CLI, the HTTP API,
webhook processing and bisect share them.
"""
from __future__ import annotations

import logging
import random
import time
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, event, exists, func, or_, select, update
from sqlalchemy import true as sa_true
from sqlalchemy.orm import Session, selectinload

from app.core import signals
from app.core.clock import utcnow
from app.core.db import Database, get_or_create, is_sqlite
from app.core.duties import Duty
from app.core.errors import Conflict, Forbidden, Invalid, NotFound
from app.core.limits import free_text
from app.core.models import (
    Commit,
    Job,
    JobAttempt,
    JobLog,
    JobReason,
    JobState,
    Repository,
    Run,
    Runner,
    StoredRunHook,
    Suite,
)
from app.jobs import wakeups
from app.jobs.measurements import document_hash, store_run
from runners.client import RESTARTED_REASON
from runners.results import DEFAULT_LIMITS, Limits, ResultsError, loads

log = logging.getLogger(__name__)
ACTIVE_STATES = (JobState.queued, JobState.running)


# ---------------------------------------------------------------- enqueue

def get_or_create_commit(session: Session, repository: Repository, sha: str) -> Commit:
    return get_or_create(session, Commit, repository_id=repository.id, sha=sha)


def enqueue(session: Session, repository: Repository, commit: Commit, suite: Suite, platform: str, *,
            reason: JobReason = JobReason.manual, priority: int = 0, force: bool = False,
            pull_request_id: int | None = None, bisect_id: int | None = None) -> tuple[Job, bool]:
    """Queue one cell (commit x suite x platform). Returns (job, created). Without `force`, an
    existing queued, running or succeeded job for the same cell is returned instead (dedupe);
    its priority is raised if the new request is more urgent."""
    if not force:
        existing = session.scalar(
            select(Job).where(Job.commit_id == commit.id, Job.suite_id == suite.id, Job.platform == platform,
                              Job.state.in_([*ACTIVE_STATES, JobState.succeeded]))
            .order_by(Job.id.desc()).limit(1))
        if existing is not None:
            if existing.state == JobState.queued and priority > existing.priority:
                existing.priority = priority
            return existing, False
    job = Job(repository_id=repository.id, commit_id=commit.id, suite_id=suite.id, platform=platform,
              reason=reason, priority=priority, max_attempts=suite.max_attempts,
              pull_request_id=pull_request_id, bisect_id=bisect_id)
    session.add(job)
    session.flush()
    announce(session, platform)
    signals.job_queued.send(session, job=job)
    return job, True


def announce(session: Session, platform: str) -> None:
    """Tell waiting claimers that a job for `platform` is claimable once this transaction
    commits: PostgreSQL `NOTIFY` (every process of every instance), SQLite a wake-up of this
    process's waiters after the commit and the signal file the other processes read
    (`wakeups.SignalWatcher`)."""
    if is_sqlite(session):
        platforms: set[str] = session.info.setdefault("parallax.announce", set())
        if not platforms:
            event.listen(session, "after_commit", _wake_local_waiters, once=True)
        platforms.add(platform)
    else:
        session.execute(select(func.pg_notify(wakeups.CHANNEL, platform)))


def _wake_local_waiters(session: Session) -> None:
    found = wakeups.for_engine(session.get_bind())
    platforms = session.info.pop("parallax.announce", set())
    for platform in platforms:
        found.board.wake(platform, found.fanout)
    if found.watcher is not None:  # the other processes on this database file
        wakeups.signal_other_processes(found.watcher.path, platforms)


def enqueue_matrix(session: Session, repository: Repository, sha: str, *, suite_name: str | None = None,
                   platform: str | None = None, reason: JobReason = JobReason.manual, priority: int = 0,
                   force: bool = False) -> list[tuple[Job, bool]]:
    """Queue the suites x platforms matrix for a commit, or one row/column/cell of it. A request
    that would queue nothing (a platform no suite runs on) is refused before anything is written."""
    suites = list(session.scalars(select(Suite).order_by(Suite.name)))
    if suite_name is not None:
        suites = [s for s in suites if s.name == suite_name]
        if not suites:
            raise NotFound(f"unknown suite {suite_name!r}; configured: "
                           f"{', '.join(s.name for s in session.scalars(select(Suite))) or 'none'}")
    if platform is not None and not any(platform in s.platforms for s in suites):
        known = sorted({p for s in suites for p in s.platforms})
        raise Invalid(f"platform: no suite runs on {platform!r} (platforms: {', '.join(known) or 'none'})",
                      extra={"field": "platform"})
    commit = get_or_create_commit(session, repository, sha)
    results = []
    for suite in suites:
        platforms = suite.platforms if platform is None else [platform]
        if platform is not None and platform not in suite.platforms:
            if suite_name is not None:
                raise Invalid(f"suite {suite.name!r} does not run on platform {platform!r} "
                              f"(its platforms: {', '.join(suite.platforms)})")
            continue
        for name in platforms:
            results.append(enqueue(session, repository, commit, suite, name, reason=reason,
                                   priority=priority, force=force))
    return results


# ---------------------------------------------------------------- claim

def reap_expired(session: Session) -> int:
    """Requeue running jobs whose lease expired (attempt + 1), or fail them past their attempt
    limit. Safe to run from many processes at once: each UPDATE re-checks the row's state."""
    moment = utcnow()
    expired = list(session.execute(
        select(Job.id, Job.attempt, Job.runner_id, Job.platform).where(Job.state == JobState.running,
                                                                       Job.lease_expires_at < moment)))
    count = 0
    for job_id, attempt, runner_id, platform in expired:
        retry = update(Job).where(Job.id == job_id, Job.state == JobState.running, Job.attempt == attempt,
                                  Job.lease_expires_at < moment)
        # A job whose cancel was requested ends cancelled instead of going back to the queue.
        result = session.execute(
            retry.where(Job.cancel_requested.is_(True))
            .values(state=JobState.cancelled, runner_id=None, lease_expires_at=None, finished_at=moment))
        if not result.rowcount:
            result = session.execute(
                retry.where(Job.attempt < Job.max_attempts)
                .values(state=JobState.queued, attempt=Job.attempt + 1, runner_id=None, lease_expires_at=None))
            if result.rowcount:
                announce(session, platform)
        if not result.rowcount:
            result = session.execute(
                retry.values(state=JobState.failed, runner_id=None, lease_expires_at=None, finished_at=moment,
                             failure_reason=f"lease expired on attempt {attempt}, the last allowed"))
        if result.rowcount:
            count += 1
            session.execute(update(JobAttempt).where(JobAttempt.job_id == job_id, JobAttempt.attempt == attempt)
                            .values(ended_at=moment, outcome="lease_expired"))
            log.info("lease expired", extra={"px_job": job_id, "px_attempt": attempt, "px_runner": runner_id})
    return count


def _labels_match(required: dict, labels: dict) -> bool:
    return all(str(labels.get(key)) == str(value) for key, value in required.items())


def try_claim(db: Database, runner_id: int, lease_s: int, *, platform: str, labels: dict[str, Any],
              claim_session: str | None = None) -> Job | None:
    """Claim the most urgent queued job for the runner's platform, or None. `platform` and
    `labels` are the runner's, which the caller has read already. With `claim_session` (the
    runner process's id), None also when the runner's latest claim came from another process: a
    long-poll that a dead process left waiting must not take a job its runner never hears of.

    PostgreSQL: `FOR UPDATE SKIP LOCKED`, so concurrent claimers pass over each other's rows.
    SQLite: the whole read-then-write runs in a `BEGIN IMMEDIATE` transaction (app.db), so
    claimers take turns."""
    with db.session() as session:
        query = (select(Job, Suite).join(Suite, Suite.id == Job.suite_id)
                 .where(Job.state == JobState.queued, Job.platform == platform,
                        or_(Job.pinned_runner_id.is_(None), Job.pinned_runner_id == runner_id))
                 .order_by(Job.priority.desc(), Job.id.asc()).limit(25))
        if claim_session is not None:  # in the same statement: no extra round trip per claim
            query = query.where(exists().where(Runner.id == runner_id, Runner.claim_session == claim_session))
        if not is_sqlite(session):
            query = query.with_for_update(skip_locked=True, of=Job)
        candidates = list(session.execute(query))
        # Besides the reaper duty: a claimer that finds nothing must see a lease that expired a
        # moment ago, not wait for the duty's next tick (one indexed query that usually finds
        # nothing; skipped while there is queued work, which the duty requeues behind).
        if not candidates and reap_expired(session):
            candidates = list(session.execute(query))
        for job, suite in candidates:
            if not _labels_match(suite.labels or {}, labels):
                continue
            moment = utcnow()
            job.state = JobState.running
            job.runner_id = runner_id
            job.lease_expires_at = moment + timedelta(seconds=lease_s)
            job.started_at = moment
            session.add(JobAttempt(job_id=job.id, attempt=job.attempt, runner_id=runner_id, claimed_at=moment))
            session.flush()
            signals.job_claimed.send(session, job=job)
            # Load what the claim response needs while the session is open, so the caller can
            # answer without going back to the database (a failure then would strand the job
            # until its lease expires): one statement puts the commit and repository in the
            # identity map, where `job.commit` and `job.repository` find them (the suite is
            # there already). The identity map holds objects weakly: keep them referenced.
            commit, repository = session.execute(
                select(Commit, Repository).join(Repository, sa_true())
                .where(Commit.id == job.commit_id, Repository.id == job.repository_id)).one()
            _ = (job.commit.sha, job.repository.url, job.suite.command, commit, repository)
            return job
    return None


def claim(db: Database, runner_id: int, *, lease_s: int, wait_s: float = 0.0, platform: str | None = None,
          labels: dict[str, Any] | None = None, poll_s: float | None = None, concurrency: int = 2,
          notify: bool = True, claim_session: str | None = None) -> Job | None:
    """Claim with long-poll: look at the queue, then sleep until woken (`app.jobs.wakeups`: a
    job for this platform was queued) or until the fallback poll, until `wait_s` has passed.

    A waiting claim holds no database connection. At most `concurrency` claim attempts of this
    process run at once; a claimer that got a job wakes the next waiter, since more may be
    queued. While this process LISTENs (PostgreSQL), a waiter sleeps until woken or until its
    wait is over: polling 500 waiters every few seconds would cost more than the claims. It
    polls every `poll_s` when nobody listens: SQLite, where other processes' enqueues are found
    only that way (default 1 s), or a PostgreSQL listener that is reconnecting (default 5 s).
    A listening waiter that reaches its deadline un-woken answers None without a last look.
    Jobs must be queued through `enqueue` (or requeued by this module) to wake waiters. With
    `notify` off the process does not LISTEN and waiters always poll."""
    found = wakeups.for_engine(db.engine, concurrency)
    if platform is None or labels is None:
        with db.session() as session:
            runner = session.get(Runner, runner_id)
            if runner is None:
                raise NotFound(f"runner {runner_id} does not exist")
            platform, labels = runner.platform, runner.labels or {}
    if poll_s is None:
        poll_s = 1.0 if is_sqlite(db.engine) else 5.0
    deadline = time.monotonic() + max(0.0, wait_s)
    if wait_s > 0 and notify:
        found.ensure_listening()
    with found.board.waiting(platform) as ticket:
        while True:
            # Past its deadline a claim gives up its turn rather than claim a job for a runner
            # that may have stopped listening; a claim without a wait still gets a look.
            if not found.attempts.acquire(timeout=max(deadline - time.monotonic(), 1.0)):
                return None
            try:
                job = try_claim(db, runner_id, lease_s, platform=platform, labels=labels,
                                claim_session=claim_session)
            finally:
                found.attempts.release()
            if job is not None:
                found.board.wake(platform, 1)
                return job
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            listening = notify and found.listening()
            woken = ticket.wait(remaining if listening else min(remaining, poll_s * random.uniform(0.8, 1.2)))
            if listening and not woken and found.listening():
                # Slept to the deadline with NOTIFY delivered all along and no wake-up: a last look
                # would find what the runner's next claim finds first thing, a moment later, and
                # it would cost an idle fleet two statements per renewal (500 runners renewing
                # 20 s waits: 25 a second). A reconnect in between wakes every waiter.
                return None


# ---------------------------------------------------------------- holder operations

def held_job(session: Session, runner: Runner, job_id: int, attempt: int | None = None,
             *, for_update: bool = True) -> Job:
    """The job, if this runner holds its current lease. 404 unknown, 403 never held by this
    runner, 409 held once but the lease was lost (expired, requeued, taken over)."""
    query = select(Job).where(Job.id == job_id)
    if for_update and not is_sqlite(session):
        query = query.with_for_update()
    job = session.scalar(query)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    return _require_holder(session, job, runner, attempt)


def _require_holder(session: Session, job: Job, runner: Runner, attempt: int | None) -> Job:
    """The job, if `runner` holds its current lease (see `held_job`)."""
    job_id = job.id
    # The state is what protects a succeeded job: it keeps `runner_id` (who ran it), so without
    # the state condition its runner could still heartbeat it or fail it back into the queue.
    holds = (job.state == JobState.running and job.runner_id == runner.id
             and (attempt is None or attempt == job.attempt))
    if holds:
        return job
    ever_held = session.scalar(select(func.count()).select_from(JobAttempt)
                               .where(JobAttempt.job_id == job_id, JobAttempt.runner_id == runner.id))
    if not ever_held:
        raise Forbidden(f"job {job_id} is not held by runner {runner.id}")
    raise Conflict(f"runner {runner.id} no longer holds the lease on job {job_id} "
                   f"(job is {job.state.value}, attempt {job.attempt})", error="lease_lost")


def heartbeat(session: Session, runner: Runner, job_id: int, lease_s: int, attempt: int | None = None) -> Job:
    job = held_job(session, runner, job_id, attempt)
    job.lease_expires_at = utcnow() + timedelta(seconds=lease_s)
    session.commit()
    return job


def append_log(session: Session, runner: Runner, job_id: int, text: str, cap_bytes: int,
               attempt: int | None = None) -> tuple[int, bool]:
    """Append a chunk; returns (bytes stored, truncated). Past the cap, chunks are dropped and a
    single marker line says so."""
    job = held_job(session, runner, job_id, attempt)
    data = free_text(text).encode("utf-8", errors="replace")
    room = cap_bytes - job.log_bytes
    if room <= 0:
        return 0, True
    truncated = len(data) > room
    if truncated:
        data = data[:room]
        marker = f"\n[parallax: log truncated at {cap_bytes} bytes]\n"
        stored = data.decode("utf-8", errors="ignore") + marker
    else:
        stored = data.decode("utf-8", errors="ignore")
    session.add(JobLog(job_id=job.id, attempt=job.attempt, text=stored))
    job.log_bytes = cap_bytes if truncated else job.log_bytes + len(data)
    session.commit()
    return len(data), truncated


def complete(session: Session, runner: Runner, job_id: int, raw: bytes, max_bytes: int,
             attempt: int | None = None, limits: Limits = DEFAULT_LIMITS) -> tuple[Run, bool]:
    """Store the results document of the held attempt. Returns (run, created). An identical
    retry after success returns the stored run (created False); anything else from a runner
    that no longer holds the lease is a 409; an invalid document is a 422 and stores nothing.

    The job row is locked, and read fresh, before anything is decided: concurrent identical
    completions then take turns, and each sees what the one before it stored."""
    digest = document_hash(raw)
    query = (select(Job, Suite.name).join(Suite, Suite.id == Job.suite_id).where(Job.id == job_id)
             .execution_options(populate_existing=True))
    if not is_sqlite(session):
        query = query.with_for_update(of=Job)
    row = session.execute(query).one_or_none()
    if row is None:
        raise NotFound(f"job {job_id} does not exist")
    job, suite_name = row
    if job.state == JobState.succeeded:
        run = session.scalar(select(Run).where(Run.job_id == job_id).order_by(Run.id.desc()).limit(1))
        if run is not None and run.runner_id == runner.id and run.document_sha256 == digest:
            return run, False
    job = _require_holder(session, job, runner, attempt)
    try:
        document = loads(raw, max_bytes=max_bytes, limits=limits)
    except ResultsError as exc:
        raise Invalid(str(exc), extra={"field": exc.field}) from exc
    if document.suite != suite_name:
        raise Invalid(f"suite: document is for suite {document.suite!r}, but job {job_id} runs {suite_name!r}",
                      extra={"field": "suite"})
    run = store_run(session, job, runner.id, document, digest)
    moment = utcnow()
    job.state = JobState.succeeded
    job.finished_at = moment
    job.lease_expires_at = None
    session.execute(update(JobAttempt).where(JobAttempt.job_id == job.id, JobAttempt.attempt == job.attempt)
                    .values(ended_at=moment, outcome="succeeded"))
    # The hooks (detection marks, commit status) run later, in `deliver_stored_runs`: run here,
    # every completion of a series would upsert that series' one detection row and hold its
    # lock until commit, so completions of the same series would take turns.
    session.add(StoredRunHook(run_id=run.id))
    session.commit()
    return run, True


def deliver_stored_runs(db: Database, limit: int = 200) -> int:
    """Send `signals.run_stored` for runs stored since the last delivery, oldest first, in one
    transaction that also deletes their `stored_run_hooks` rows: a crash before the commit
    leaves them to the next delivery, and a committed delivery is never repeated. Concurrent
    deliveries skip each other's rows (PostgreSQL) or take turns (SQLite). Returns the count."""
    with db.session() as session:
        query = select(StoredRunHook.run_id).order_by(StoredRunHook.run_id).limit(limit)
        if not is_sqlite(session):
            query = query.with_for_update(skip_locked=True)
        ids = list(session.scalars(query))
        if not ids:
            return 0
        runs = session.scalars(select(Run).where(Run.id.in_(ids)).order_by(Run.id)
                               .options(selectinload(Run.measurements), selectinload(Run.items)))
        for run in runs:
            signals.run_stored.send(session, run=run)
        session.execute(delete(StoredRunHook).where(StoredRunHook.run_id.in_(ids)))
    return len(ids)


def fail_back_running(session: Session, runner: Runner) -> list[int]:
    """A new process of `runner` claims (its `claim_session` changed): it runs one job at a time
    and has none yet, so a job still running on the runner was the dead process's. Each is failed
    back as retryable, as the runner does itself for an attempt it had recorded; this covers the
    one it could not record (killed between the claim's answer and its own record), which would
    otherwise wait out its lease. Returns the job ids."""
    ids = list(session.scalars(select(Job.id).where(Job.runner_id == runner.id, Job.state == JobState.running)))
    for job_id in ids:
        fail(session, runner, job_id, RESTARTED_REASON, retryable=True)
    return ids


# What a runner may say a failure was, besides an ordinary one: "build" — the suite's setup
# failed, so the commit could not be measured at all (bisect skips it, like `git bisect skip`).
FAILURE_KINDS = ("build",)


def fail(session: Session, runner: Runner, job_id: int, reason: str, retryable: bool,
         attempt: int | None = None, *, handback: bool = False, kind: str | None = None) -> Job:
    """Report a failed attempt: retried while attempts are left, else failed for good. A
    `handback` (the runner is shutting down) requeues without using up an attempt. `kind` is
    kept on the job (`failure_kind`)."""
    job = held_job(session, runner, job_id, attempt)
    moment = utcnow()
    reason = free_text(reason or "no reason given")[:10_000]
    if handback:
        job.max_attempts += 1
        outcome = "handed_back"
    elif job.cancel_requested:
        outcome = "cancelled"
    else:
        outcome = "retry" if retryable and job.attempt < job.max_attempts else "failed"
    session.execute(update(JobAttempt).where(JobAttempt.job_id == job.id, JobAttempt.attempt == job.attempt)
                    .values(ended_at=moment, outcome=outcome))
    job.failure_reason = reason
    job.failure_kind = kind
    job.lease_expires_at = None
    job.runner_id = None
    if outcome in ("retry", "handed_back"):
        job.state = JobState.queued
        job.attempt += 1
        announce(session, job.platform)
    elif outcome == "cancelled":
        job.state = JobState.cancelled
        job.finished_at = moment
    else:
        job.state = JobState.failed
        job.finished_at = moment
        signals.job_failed.send(session, job=job)
    session.commit()
    return job


def request_cancel(session: Session, job: Job) -> None:
    """Queued jobs are cancelled at once; running ones learn it from their next heartbeat, and
    end `cancelled` when their runner reports the stop (or their lease expires)."""
    if job.state == JobState.queued:
        job.state = JobState.cancelled
        job.finished_at = utcnow()
    elif job.state == JobState.running:
        job.cancel_requested = True


def queue_depth(session: Session) -> dict[str, int]:
    rows = session.execute(select(Job.platform, func.count()).where(Job.state == JobState.queued)
                           .group_by(Job.platform))
    return {platform: count for platform, count in rows}


def _reap(db: Database) -> int:
    with db.session() as session:
        return reap_expired(session)


def runs_stored_since(session: Session, since: datetime | None) -> bool:
    """A run stored since `since` waits for its `run_stored` hooks (the `due` check of the
    duties that deliver them)."""
    query = select(StoredRunHook.run_id)
    if since is not None:
        query = query.where(StoredRunHook.created_at > since)
    return session.scalar(query.limit(1)) is not None


DUTIES = [Duty("reaper", _reap, interval_s=5.0),
          Duty("stored-runs", deliver_stored_runs, interval_s=1.0, lease_s=60.0, due=runs_stored_since)]
