"""`POST /api/v1/runs`: results measured by a CI job the project already runs, sent with a CI
token (DESIGN.md, uploads). 201 with the stored run; 200 for a retry that stored nothing new; 202
for a commit the service has not seen (no git in the request: the `uploads` duty reads it), with
`GET /api/v1/uploads/<id>` to poll.
Also the admin side of CI tokens: `POST /api/v1/ci-tokens` and `POST /api/v1/ci-tokens/<id>/revoke`
(the HTTP twins of `parallax token create --ci` and `parallax token revoke --ci`)."""
from __future__ import annotations

from datetime import timedelta

from flask import Blueprint, jsonify, request

from app.auth.ci_tokens import CiScope, ci_scope_for, create_ci_token, revoke_ci_token
from app.core import limits
from app.core.clock import as_utc
from app.core.errors import NotFound, Unauthorized
from app.core.models import CiToken, QueuedUpload, Repository
from app.git.mirror import Mirror
from app.uploads import request as upload_request
from app.uploads.queued import queued_json
from app.uploads.store import Queued, store_upload
from app.web.admin_api import MAX_EXPIRY_DAYS
from app.web.auth import bearer_token, require_admin, require_maintainer
from app.web.bodies import json_body, settings
from app.web.session import request_session

bp = Blueprint("uploads_api", __name__, url_prefix="/api/v1")


@bp.post("/runs")
def upload_run():  # type: ignore[no-untyped-def]
    session = request_session()
    scope = ci_scope_for(session, bearer_token())
    config = settings()
    body = json_body(max_bytes=config.max_document_bytes)
    parsed = upload_request.parse(body, request.headers.get("Idempotency-Key"), config)
    repository = session.get(Repository, scope.repository_id)
    mirror = Mirror.for_repository(config.data_dir, repository.name, repository.url) if repository else None
    outcome = store_upload(session, scope, parsed, mirror=mirror, limits=limits.document_limits(config))
    if isinstance(outcome, Queued):
        # A commit the service has not seen: git reads it in the `uploads` duty, not here.
        row = session.get(QueuedUpload, outcome.upload_id)
        assert row is not None
        # `retry`: this request repeated an upload already queued (same key and body).
        response = jsonify({**queued_json(session, row, parsed.repository), "retry": not outcome.created})
        response.headers["Location"] = f"/api/v1/uploads/{row.id}"
        return response, 202
    reply = {"state": "stored", "run_id": outcome.run_id, "job_id": outcome.job_id, "created": outcome.created,
             "repository": parsed.repository, "sha": parsed.sha, "suite": parsed.suite, "platform": parsed.platform}
    return jsonify(reply), 201 if outcome.created else 200


@bp.get("/uploads/<id:upload_id>")
def get_upload(upload_id: int):  # type: ignore[no-untyped-def]
    """A queued upload's state: `pending`, `stored` (with `run_id`) or `failed` (with the `status`
    and `error` the upload would have been answered). For the CI token that may upload to its
    repository, or a user's or the admin token."""
    session = request_session()
    token = bearer_token()
    try:
        scope: CiScope | None = ci_scope_for(session, token)
    except Unauthorized:
        scope = None
        require_maintainer(session)
    row = session.get(QueuedUpload, upload_id)
    if row is None or (scope is not None and scope.repository_id != row.repository_id):
        raise NotFound(f"upload {upload_id} does not exist")
    repository = session.get(Repository, row.repository_id)
    assert repository is not None
    return jsonify(queued_json(session, row, repository.name))


@bp.post("/ci-tokens")
def create_ci_token_endpoint():  # type: ignore[no-untyped-def]
    session = request_session()
    require_admin(session)
    body = json_body()
    repository = limits.identifier(body.get("repository"), "repository", 200)
    platform = body.get("platform")
    if platform is not None:
        platform = limits.identifier(platform, "platform", limits.PLATFORM_CHARS)
    note = body.get("note")
    if note is not None:
        note = limits.identifier(note, "note", limits.column_chars(CiToken.__table__.c.note))
    days = body.get("expires_in_days")
    expires_in = None if days is None else timedelta(days=limits.number(days, "expires_in_days", minimum=0.001,
                                                                         maximum=MAX_EXPIRY_DAYS))
    token_id, value = create_ci_token(session, repository, platform, note=note, expires_in=expires_in)
    row = session.get(CiToken, token_id)
    session.commit()
    return jsonify({"id": token_id, "token": value, "repository": repository, "platform": platform,
                    "expires_at": row.expires_at and as_utc(row.expires_at).isoformat()}), 201


@bp.post("/ci-tokens/<id:token_id>/revoke")
def revoke_ci_token_endpoint(token_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    require_admin(session)
    row = revoke_ci_token(session, token_id)
    session.commit()
    return jsonify({"id": row.id, "revoked": True})
