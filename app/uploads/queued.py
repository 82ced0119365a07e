"""The `uploads` duty: finishes the uploads of commits the service had not seen (issue 30: no
request runs git). `POST /api/v1/runs` checked everything else, kept the validated document in
`queued_uploads` and answered 202; here the commit is read from the repository's mirror (fetched
when it lacks the SHA) outside any transaction, then the upload is stored through the same one
transaction as a direct upload (`store.write_upload`), which also marks the queued row `stored`.
A refusal (a SHA the repository does not have: 422; a repository that cannot be fetched: 503)
marks it `failed` with the answer the request would have given, and stores nothing else.
`GET /api/v1/uploads/<id>` reads the outcome (`queued_json`)."""
from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app.core import limits
from app.core.clock import as_utc
from app.core.config import Settings, current_settings
from app.core.db import Database
from app.core.duties import Duty
from app.core.errors import APIError, Invalid
from app.core.models import QueuedUpload, Repository, Run, Suite
from app.git.mirror import Mirror
from app.uploads import commits
from app.uploads.store import QUEUED_PENDING, Origin, earlier_upload, finish_queued, usable_commit, write_upload
from runners.results import ResultsError, validate

log = logging.getLogger(__name__)
BATCH = 20  # queued uploads per tick of the duty


def finish_pending(db: Database, settings: Settings) -> dict[int, str]:
    """Finish the oldest pending uploads; returns each one's new state."""
    with db.session() as session:
        ids = list(session.scalars(select(QueuedUpload.id).where(QueuedUpload.state == QUEUED_PENDING)
                                   .order_by(QueuedUpload.id).limit(BATCH)))
    return {queued_id: _finish(db, settings, queued_id) for queued_id in ids}


def _finish(db: Database, settings: Settings, queued_id: int) -> str:
    with db.session() as session:
        row = session.get(QueuedUpload, queued_id)
        if row is None or row.state != QUEUED_PENDING:
            return "gone"
        repository = session.get(Repository, row.repository_id)
        assert repository is not None
        origin = Origin(row.ci_token_id, row.idempotency_key, row.request_sha256, row.provider, row.run_url, row.adapter)
        sha, platform, suite_name, raw, repository_id = row.sha, row.platform, row.suite, row.document, repository.id
        usable = usable_commit(session, commits.known_commit(session, repository, sha))
        place = commits.Place(repository.name, repository.default_branch)
        mirror = Mirror.for_repository(settings.data_dir, repository.name, repository.url)
    try:
        # git, outside any transaction (and only for a commit still unknown: a push may have
        # recorded it since the upload was queued)
        found = None if usable else commits.look_up(mirror, place, sha)
        with db.session() as session:
            earlier = earlier_upload(session, repository_id, origin)
            if earlier is not None:  # a retry with the same key was stored directly meanwhile
                finish_queued(session, queued_id, run_id=earlier.run_id, created=False)
                return "stored"
            suite_id = session.scalar(select(Suite.id).where(Suite.name == suite_name))
            if suite_id is None:
                raise Invalid(f"suite: unknown suite {suite_name!r} (removed from the catalogue since the upload)",
                              extra={"field": "suite"})
            try:
                document = validate(json.loads(raw), limits.document_limits(settings))
            except ResultsError as exc:  # the service's limits changed since the upload was checked
                raise Invalid(f"document.{exc}", extra={"field": f"document.{exc.field}"}) from exc
            write_upload(session, origin, sha, platform, document, raw.encode(), repository_id, suite_id, found,
                         queued_id=queued_id)
        return "stored"
    except APIError as exc:
        with db.session() as session:
            finish_queued(session, queued_id, failure=exc)
        return "failed"
    except SQLAlchemyError:
        raise  # the database restarting, a deadlock: left pending, tried again at the next tick
    except Exception:
        # Not retried forever: the uploader sees a 500 in the poll answer and may send it again.
        log.exception("queued upload failed", extra={"px_upload": queued_id})
        with db.session() as session:
            finish_queued(session, queued_id, failure=APIError("unexpected server error; see the service log",
                                                               status=500, error="internal_error"))
        return "failed"


def queued_json(session: Session, row: QueuedUpload, repository: str) -> dict[str, Any]:
    """A queued upload as `GET /api/v1/uploads/<id>` answers it (and the 202 of its POST)."""
    body: dict[str, Any] = {"upload_id": row.id, "state": row.state, "poll_url": f"/api/v1/uploads/{row.id}",
                            "repository": repository, "sha": row.sha, "suite": row.suite, "platform": row.platform,
                            "queued_at": as_utc(row.created_at).isoformat(),
                            "finished_at": row.finished_at and as_utc(row.finished_at).isoformat()}
    if row.run_id is not None:
        run = session.get(Run, row.run_id)
        body.update(run_id=row.run_id, job_id=run.job_id if run else None, created=row.created)
    if row.error is not None:
        body.update(status=row.error_status, error=row.error)
    return body


def run_duty(db: Database) -> dict[str, Any]:
    done = finish_pending(db, current_settings())
    return {"stored": sum(1 for s in done.values() if s == "stored"),
            "failed": sum(1 for s in done.values() if s == "failed")}


DUTIES = [Duty("uploads", run_duty, interval_s=1.0, lease_s=600.0)]
