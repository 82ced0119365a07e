"""`POST /api/v1/runs`: results measured by a CI job the project already runs, sent with a CI
token (DESIGN.md, uploads). 201 with the stored run; 200 for a retry that stored nothing new."""
from __future__ import annotations

from flask import Blueprint, jsonify, request

from app.auth.ci_tokens import ci_scope_for
from app.core import limits
from app.core.models import Repository
from app.git.mirror import Mirror
from app.uploads import request as upload_request
from app.uploads.store import store_upload
from app.web.auth import bearer_token
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
    stored = store_upload(session, scope, parsed, mirror=mirror, limits=limits.document_limits(config))
    reply = {"run_id": stored.run_id, "job_id": stored.job_id, "created": stored.created,
             "repository": parsed.repository, "sha": parsed.sha, "suite": parsed.suite, "platform": parsed.platform}
    return jsonify(reply), 201 if stored.created else 200
