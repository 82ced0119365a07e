"""OpenAPI 3.1 description of the HTTP API, built from the routes the app registered so that it
cannot list a path the service does not serve."""
from __future__ import annotations

import re
from typing import Any

from flask import current_app

SUMMARIES = {
    "/api/v1/runners": "Register a runner (registration token) -> {id, token}",
    "/api/v1/jobs/claim": "Claim a job with a lease; 204 when none after wait_s",
    "/api/v1/jobs/{job_id}/heartbeat": "Extend the lease -> {lease_expires_at, cancel}",
    "/api/v1/jobs/{job_id}/logs": "Append a log chunk (text body, capped per job)",
    "/api/v1/jobs/{job_id}/complete": "Upload the results document (idempotent)",
    "/api/v1/jobs/{job_id}/fail": "Report failure {reason, retryable}",
    "/api/v1/jobs": "Queue the job matrix for a commit, or one cell (admin token)",
    "/webhooks/github": "GitHub webhook receiver (push, pull_request, ping)",
    "/healthz": "Liveness and database check",
}


def document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for rule in current_app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            paths.setdefault(path, {})[method.lower()] = {
                "summary": SUMMARIES.get(path, rule.endpoint),
                "operationId": f"{rule.endpoint}_{method.lower()}",
                "responses": {"default": {"description": "JSON; errors are {error, detail}"}},
            }
    return {"openapi": "3.1.0", "info": {"title": "Parallax", "version": "1"},
            "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
            "security": [{"bearer": []}], "paths": dict(sorted(paths.items()))}
