"""Storing an upload: the same `runs`/`measurements` rows a runner's `complete` writes, on a job
of the cell (commit x suite x platform), so detection, commit statuses and pull-request
verdicts follow through the same `run_stored` delivery. A queued job of the cell that no runner
has claimed is completed by the upload; otherwise a job with reason `upload` is recorded.
Everything is written in one transaction, after every check passed: a refused upload leaves
nothing behind. A retry (same idempotency key, same body) answers the run it stored first."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.auth.ci_tokens import CiScope, check_scope
from app.core.clock import utcnow
from app.core.errors import Conflict, Invalid
from app.core.models import CiUpload, Commit, Job, JobReason, JobState, Repository, Run, StoredRunHook, Suite
from app.core.series_epoch import bump_series_epoch
from app.git.mirror import CommitInfo, Mirror
from app.jobs.measurements import document_hash, store_run
from app.uploads import commits
from app.uploads.convert import results_document
from app.uploads.request import UploadRequest
from runners.adapters.registry import json_bytes
from runners.results import Limits, ResultsDocument, to_json

WRITE_ATTEMPTS = 5  # each retry follows a concurrent upload that committed some of the same commits


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


def _earlier(session: Session, repository_id: int, request: UploadRequest) -> Stored | None:
    """The upload this one repeats, if any; 409 when its key was used for a different body."""
    if request.idempotency_key is None:
        return None
    row = session.scalar(select(CiUpload).where(CiUpload.repository_id == repository_id,
                                                CiUpload.idempotency_key == request.idempotency_key))
    if row is None:
        return None
    if row.request_sha256 != request.digest:
        what = "Idempotency-Key" if request.idempotency_key.startswith("key:") else "ci.run_url, suite and platform"
        raise Conflict(f"this {what} was used by upload {row.id} (run {row.run_id}) with a different body; "
                       "send a new key for a new result", error="idempotency_conflict")
    run = session.get(Run, row.run_id)
    assert run is not None
    return Stored(run_id=run.id, job_id=run.job_id, commit_id=run.commit_id, created=False)


def _usable(session: Session, commit: Commit | None) -> bool:
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
                 limits: Limits) -> Stored:
    """Check, convert and store one upload (see the module docstring). `mirror` is the
    repository's git mirror (None: unseen commits are refused)."""
    check_scope(scope, request.repository, request.platform)
    repository = _repository(session, request.repository)
    suite = _suite(session, request)
    earlier = _earlier(session, repository.id, request)
    if earlier is not None:
        return earlier
    document = results_document(request, limits)
    raw = json_bytes(to_json(document))
    commit = commits.known_commit(session, repository, request.sha)
    repository_id, suite_id = repository.id, suite.id
    found = None
    if not _usable(session, commit):
        if mirror is None:
            raise Invalid(f"sha: commit {request.sha} is unknown and repository {repository.name!r} has no mirror",
                          extra={"field": "sha"})
        place = commits.Place(repository.name, repository.default_branch)
        session.rollback()  # no transaction stays open while git runs
        found = commits.look_up(mirror, place, request.sha)
    for attempt in range(1, WRITE_ATTEMPTS + 1):
        try:
            return _write(session, scope, request, document, raw, repository_id, suite_id, commit, found)
        except IntegrityError:
            session.rollback()
            earlier = _earlier(session, repository_id, request)
            if earlier is not None:  # a concurrent retry with the same key committed first
                return earlier
            if attempt == WRITE_ATTEMPTS:
                raise
            # Another upload of the same new commits committed them first; read them and go again.
            commit = session.scalar(select(Commit).where(Commit.repository_id == repository_id,
                                                         Commit.sha == request.sha))
    raise AssertionError("unreachable")


def _write(session: Session, scope: CiScope, request: UploadRequest, document: ResultsDocument, raw: bytes,
           repository_id: int, suite_id: int, commit: Commit | None,
           found: tuple[CommitInfo, int | None] | None) -> Stored:
    """The one transaction that stores an upload."""
    repository = session.get(Repository, repository_id)
    suite = session.get(Suite, suite_id)
    assert repository is not None and suite is not None
    placed = False
    if found is not None:
        commit, placed = commits.record(session, repository, *found)
    assert commit is not None
    job = _job(session, repository, commit, suite, request.platform)
    run = store_run(session, job, None, document, document_hash(raw))
    session.add(CiUpload(repository_id=repository.id, run_id=run.id, ci_token_id=scope.token_id,
                         idempotency_key=request.idempotency_key, request_sha256=request.digest,
                         provider=request.provider, run_url=request.run_url, adapter=request.adapter))
    session.add(StoredRunHook(run_id=run.id))
    session.flush()
    stored = Stored(run_id=run.id, job_id=job.id, commit_id=commit.id, created=True)
    if placed:  # last: the bump holds the repository row until the commit
        bump_series_epoch(session, [repository.id])
    session.commit()
    return stored
