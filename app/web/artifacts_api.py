"""Job artifacts over HTTP (runner protocol addition, docs/runner.md):

POST /api/v1/jobs/<id>/artifacts?name=N[&attempt=A]   the holder uploads one file (raw body);
     201 new, 200 the same bytes again, 413 over `max_artifact_bytes` (the job and its results
     are untouched), 409 other bytes under a taken name or a lost lease, 422 a bad name
GET  /api/v1/jobs/<id>/artifacts                       what a job uploaded
GET  /api/v1/jobs/<id>/artifacts/<name>[?attempt=A]    the file itself, as a download
"""
from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from app.core.errors import NotFound, PayloadTooLarge
from app.core.models import Job
from app.jobs import artifacts
from app.web.auth import require_runner
from app.web.bodies import read_body, settings
from app.web.runner_api import attempt_arg
from app.web.session import request_session

bp = Blueprint("artifacts_api", __name__, url_prefix="/api/v1")
SERVED_TYPES = ("application/json", "application/octet-stream", "text/plain")


@bp.post("/jobs/<id:job_id>/artifacts")
def upload_artifact(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    runner = require_runner(session)
    name = artifacts.check_name(request.args.get("name"))
    limit = settings().max_artifact_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"artifact {name!r} is {request.content_length} bytes, over the limit of {limit} "
                              "(PARALLAX_MAX_ARTIFACT_BYTES); the job's results are not affected")
    data = read_body(limit)
    info, created = artifacts.store(session, runner, job_id, name, data,
                                    request.content_type or "application/octet-stream", limit, attempt_arg())
    return jsonify(info.as_json()), 201 if created else 200


@bp.get("/jobs/<id:job_id>/artifacts")
def list_artifacts(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    if session.get(Job, job_id) is None:
        raise NotFound(f"job {job_id} does not exist")
    return jsonify({"job_id": job_id, "artifacts": [a.as_json() for a in artifacts.listed(session, job_id)]})


@bp.get("/jobs/<id:job_id>/artifacts/<name>")
def download_artifact(job_id: int, name: str):  # type: ignore[no-untyped-def]
    session = request_session()
    artifacts.check_name(name)
    attempt = attempt_arg()
    row = artifacts.fetch(session, job_id, name, attempt)
    if row is None:
        raise NotFound(f"job {job_id} has no artifact {name!r}" + (f" from attempt {attempt}" if attempt else ""))
    # Whatever type the runner claimed, the file is served as a download and never as a page of
    # this origin (an uploaded text/html would otherwise run as the dashboard).
    mimetype = row.content_type if row.content_type in SERVED_TYPES else "application/octet-stream"
    response = Response(row.data, mimetype=mimetype)
    response.headers["Content-Disposition"] = f'attachment; filename="job-{job_id}-{row.attempt}-{row.name}"'
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
