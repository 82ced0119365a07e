"""Storing an upload: the same `runs`/`measurements` rows a runner's `complete` writes, on a job
of the cell (commit x suite x platform), so detection, commit statuses and pull-request
verdicts follow through the same `run_stored` delivery. A queued job of the cell that no runner
has claimed is completed by the upload; otherwise a job with reason `upload` is recorded.
Everything is written in one transaction, after every check passed: a refused upload leaves
nothing behind. A retry (same idempotency key, same body) answers the run it stored first.

No git runs here: an upload of a commit the service has not seen is checked in full, then kept
as a `queued_uploads` row and answered 202; the `uploads` duty (app/uploads/queued.py) reads the
commit from the mirror and stores it through the same one transaction (`write_upload`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.auth.ci_tokens import CiScope, check_scope
from app.core.clock import utcnow
from app.core.errors import APIError, Conflict, Invalid
from app.core.models import CiUpload, Commit, Job, JobReason, JobState, QueuedUpload, Repository, Run, StoredRunHook, Suite
from app.core.series_epoch import bump_series_epoch
from app.git.mirror import CommitInfo, Mirror
from app.jobs.measurements import document_hash, store_run
from app.uploads import commits
from app.uploads.convert import results_document
from app.uploads.request import UploadRequest
from runners.adapters.registry import json_bytes
from runners.results import Limits, ResultsDocument, to_json

WRITE_ATTEMPTS = 5  # each retry follows a concurrent upload that committed some of the same commits
QUEUED_PENDING, QUEUED_STORED, QUEUED_FAILED = "pending", "stored", "failed"


@dataclass(frozen=True)
class Stored:
    run_id: int
    job_id: int
    commit_id: int
    created: bool


def _suite(session: Session, request: UploadRequest) -> Suite:
    suites = list(session.scalars(select(Suite).order_by(Suite.name)))
    suite = next((s for s in suites if s.name == request.suite), None)
    if suite is None:
        raise Invalid(f"suite: unknown suite {request.suite!r}; known: {', '.join(s.name for s in suites) or 'none'}",
                      extra={"field": "suite", "known": [s.name for s in suites]})
    if request.platform not in suite.platforms:
        raise Invalid(f"platform: suite {suite.name!r} does not run on {request.platform!r}; its platforms: "
                      f"{', '.join(suite.platforms)}", extra={"field": "platform", "known": list(suite.platforms)})
    return suite


def _repository(session: Session, name: str) -> Repository:
    repository = session.scalar(select(Repository).where(Repository.name == name))
    if repository is None:
        known = list(session.scalars(select(Repository.name).order_by(Repository.name)))
        raise Invalid(f"repository: unknown repository {name!r}; known: {', '.join(known) or 'none'}",
                      extra={"field": "repository", "known": known})
    return repository


@dataclass(frozen=True)
class Origin:
    """Where an upload came from and what makes a retry of it one: as its `ci_uploads` row keeps it."""
    token_id: int | None
    idempotency_key: str | None  # "key:<header>" or "ci:<hash of run URL, suite, platform>"
    digest: str
    provider: str | None
    run_url: str | None
    adapter: str | None

    @classmethod
    def of(cls, scope: CiScope, request: UploadRequest) -> "Origin":
        return cls(scope.token_id, request.idempotency_key, request.digest, request.provider, request.run_url,
                   request.adapter)


@dataclass(frozen=True)
class Queued:
    """An upload of an unseen commit, left to the `uploads` duty (202); `created` is False for a
    retry of one already queued."""
    upload_id: int
    created: bool


def _conflict(what_id: str, key: str) -> Conflict:
    what = "Idempotency-Key" if key.startswith("key:") else "ci.run_url, suite and platform"
    return Conflict(f"this {what} was used by {what_id} with a different body; send a new key for a new result",
                    error="idempotency_conflict")


def earlier_upload(session: Session, repository_id: int, origin: Origin) -> Stored | None:
    """The upload this one repeats, if any; 409 when its key was used for a different body."""
    if origin.idempotency_key is None:
        return None
    row = session.scalar(select(CiUpload).where(CiUpload.repository_id == repository_id,
                                                CiUpload.idempotency_key == origin.idempotency_key))
    if row is None:
        return None
    if row.request_sha256 != origin.digest:
        raise _conflict(f"upload {row.id} (run {row.run_id})", origin.idempotency_key)
    run = session.get(Run, row.run_id)
    assert run is not None
    return Stored(run_id=run.id, job_id=run.job_id, commit_id=run.commit_id, created=False)


def _earlier_queued(session: Session, repository_id: int, origin: Origin) -> Queued | None:
    """The queued upload this one repeats, if any (409 when its key was used for a different
    body). A failed one is queued again: its failure may have been a repository that could not
    be fetched for a while."""
    if origin.idempotency_key is None:
        return None
    row = session.scalar(select(QueuedUpload).where(QueuedUpload.repository_id == repository_id,
                                                    QueuedUpload.idempotency_key == origin.idempotency_key))
    if row is None:
        return None
    if row.request_sha256 != origin.digest:
        raise _conflict(f"queued upload {row.id}", origin.idempotency_key)
    if row.state == QUEUED_FAILED:
        row.state, row.error_status, row.error, row.finished_at = QUEUED_PENDING, None, None, None
        session.commit()
        return Queued(upload_id=row.id, created=True)
    return Queued(upload_id=row.id, created=False)


def usable_commit(session: Session, commit: Commit | None) -> bool:
    """A commit the service can place without git: read from git already, or queued for."""
    if commit is None:
        return False
    return commit.graph_loaded or session.scalar(select(Job.id).where(Job.commit_id == commit.id).limit(1)) is not None


def _job(session: Session, repository: Repository, commit: Commit, suite: Suite, platform: str) -> Job:
    """A queued, unclaimed job of the cell, completed by this upload; else a new upload job."""
    moment = utcnow()
    queued = session.scalar(select(Job.id).where(Job.commit_id == commit.id, Job.suite_id == suite.id,
                                                 Job.platform == platform, Job.state == JobState.queued)
                            .order_by(Job.id).limit(1))
    if queued is not None:
        # Conditional: a runner that claims it at the same moment keeps it, and this upload
        # records its own job instead.
        taken = session.execute(update(Job).where(Job.id == queued, Job.state == JobState.queued)
                                .values(state=JobState.succeeded, started_at=moment, finished_at=moment))
        if taken.rowcount == 1:
            job = session.get(Job, queued, populate_existing=True)
            assert job is not None
            return job
    job = Job(repository_id=repository.id, commit_id=commit.id, suite_id=suite.id, platform=platform,
              state=JobState.succeeded, reason=JobReason.upload, max_attempts=1, started_at=moment,
              finished_at=moment)
    session.add(job)
    session.flush()
    return job


def store_upload(session: Session, scope: CiScope, request: UploadRequest, *, mirror: Mirror | None,
                 limits: Limits) -> Stored | Queued:
    """Check, convert and store one upload (see the module docstring), without running git: an
    upload of a commit the service has not seen is queued for the `uploads` duty
    (app/uploads/queued.py) once every other check passed. `mirror` is the repository's git
    mirror (None: unseen commits are refused)."""
    check_scope(scope, request.repository, request.platform)
    repository = _repository(session, request.repository)
    suite = _suite(session, request)
    origin = Origin.of(scope, request)
    earlier = earlier_upload(session, repository.id, origin)
    if earlier is not None:
        return earlier
    document = results_document(request, limits)
    raw = json_bytes(to_json(document))
    queued = _earlier_queued(session, repository.id, origin)
    if queued is not None:
        return queued
    commit = commits.known_commit(session, repository, request.sha)
    if not usable_commit(session, commit):
        if mirror is None:
            raise Invalid(f"sha: commit {request.sha} is unknown and repository {repository.name!r} has no mirror",
                          extra={"field": "sha"})
        return _queue(session, origin, request, raw, repository.id)
    return write_upload(session, origin, request.sha, request.platform, document, raw, repository.id, suite.id, None)


def _queue(session: Session, origin: Origin, request: UploadRequest, raw: bytes, repository_id: int) -> Queued | Stored:
    row = QueuedUpload(repository_id=repository_id, ci_token_id=origin.token_id, idempotency_key=origin.idempotency_key,
                       request_sha256=origin.digest, sha=request.sha, suite=request.suite, platform=request.platform,
                       document=raw.decode(), provider=origin.provider, run_url=origin.run_url, adapter=origin.adapter,
                       state=QUEUED_PENDING, created=True)
    session.add(row)
    try:
        session.flush()
        queued = Queued(upload_id=row.id, created=True)
        session.commit()
        return queued
    except IntegrityError:  # a concurrent retry with the same key queued it first
        session.rollback()
        found = earlier_upload(session, repository_id, origin) or _earlier_queued(session, repository_id, origin)
        assert found is not None
        return found


def write_upload(session: Session, origin: Origin, sha: str, platform: str, document: ResultsDocument, raw: bytes,
                 repository_id: int, suite_id: int, found: tuple[CommitInfo, int | None] | None,
                 queued_id: int | None = None) -> Stored:
    """Store an upload in one transaction (retried when a concurrent upload committed some of the
    same new commits first); `found` is the commit as git gave it, for one not stored yet.
    With `queued_id`, the queued upload is marked stored in the same transaction."""
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        commit = session.scalar(select(Commit).where(Commit.repository_id == repository_id, Commit.sha == sha))
        try:
            return _write(session, origin, platform, document, raw, repository_id, suite_id, commit, found, queued_id)
        except IntegrityError:
            session.rollback()
            earlier = earlier_upload(session, repository_id, origin)
            if earlier is not None:  # a concurrent retry with the same key committed first
                if queued_id is not None:
                    finish_queued(session, queued_id, run_id=earlier.run_id, created=False)
                    session.commit()
                return earlier
            if attempt == WRITE_ATTEMPTS:
                raise
            # Another upload of the same new commits committed them first; read them and go again.
    raise AssertionError("unreachable")


def _write(session: Session, origin: Origin, platform: str, document: ResultsDocument, raw: bytes,
           repository_id: int, suite_id: int, commit: Commit | None,
           found: tuple[CommitInfo, int | None] | None, queued_id: int | None) -> Stored:
    """The one transaction that stores an upload."""
    repository = session.get(Repository, repository_id)
    suite = session.get(Suite, suite_id)
    assert repository is not None and suite is not None
    placed = False
    if found is not None:
        commit, placed = commits.record(session, repository, *found)
    assert commit is not None
    job = _job(session, repository, commit, suite, platform)
    run = store_run(session, job, None, document, document_hash(raw))
    session.add(CiUpload(repository_id=repository.id, run_id=run.id, ci_token_id=origin.token_id,
                         idempotency_key=origin.idempotency_key, request_sha256=origin.digest,
                         provider=origin.provider, run_url=origin.run_url, adapter=origin.adapter))
    session.add(StoredRunHook(run_id=run.id))
    if queued_id is not None:
        finish_queued(session, queued_id, run_id=run.id, created=True)
    session.flush()
    stored = Stored(run_id=run.id, job_id=job.id, commit_id=commit.id, created=True)
    if placed:  # last: the bump holds the repository row until the commit
        bump_series_epoch(session, [repository.id])
    session.commit()
    return stored


def finish_queued(session: Session, queued_id: int, *, run_id: int | None = None, created: bool = False,
                  failure: APIError | None = None) -> None:
    """Record a queued upload's outcome (in the caller's transaction): stored, or the failure the
    request would have answered."""
    values: dict[str, Any] = {"finished_at": utcnow()}
    if failure is None:
        values.update(state=QUEUED_STORED, run_id=run_id, created=created)
    else:
        values.update(state=QUEUED_FAILED, error_status=failure.status,
                      error={"error": failure.error, "detail": failure.detail, **failure.extra})
    session.execute(update(QueuedUpload).where(QueuedUpload.id == queued_id, QueuedUpload.state == QUEUED_PENDING)
                    .values(**values))
