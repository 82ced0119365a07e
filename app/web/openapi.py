"""OpenAPI 3.1 description of the HTTP API (`/api/...`, `/webhooks/...`, `/healthz`), built from
the routes the app registered so that it cannot list a path the service does not serve. Path
parameters come from the routes' converters; request bodies and query parameters from the
tables below. Every response is JSON; errors are `{error, detail}` (plus `field` for a 422). A
schemathesis run in the test suite checks the service against this document."""
from __future__ import annotations

import re
from typing import Any

from flask import current_app
from werkzeug.routing import Rule

from app.core.limits import INT32_MAX

SUMMARIES = {
    "/api/v1/runners": "Register a runner (registration token) -> {id, token}",
    "/api/v1/jobs/claim": "Claim a job with a lease; 204 when none after wait_s",
    "/api/v1/jobs/{job_id}/heartbeat": "Extend the lease -> {lease_expires_at, cancel}",
    "/api/v1/jobs/{job_id}/logs": "Append a log chunk (text body, capped per job)",
    "/api/v1/jobs/{job_id}/complete": "Upload the results document (idempotent)",
    "/api/v1/jobs/{job_id}/fail": "Report failure {reason, retryable}",
    "/api/v1/jobs": "Queue the job matrix for a commit, or one cell (admin token)",
    "/api/v1/bisects": "Start a bisect {repository, suite, metric, platform, good, bad, effect?} (user token)",
    "/api/v1/bisects/{bisect_id}": "A bisect: state, rounds, tested commits with samples and verdicts, culprit",
    "/api/v1/registration-tokens": "Create a runner registration token (admin token)",
    "/api/v1/registration-tokens/{token_id}/revoke": "Revoke a registration token (admin token)",
    "/api/v1/runners/{runner_id}/disable": "Disable a runner (admin token)",
    "/api/v1/users/{name}/disable": "Disable a user (admin token)",
    "/api/v1/pulls/{owner}/{repo}/{number}": "A pull request's verdict: head against merge-base per platform, scopes",
    "/webhooks/github": "GitHub webhook receiver (push, pull_request, issue_comment, ping)",
    "/healthz": "Liveness and database check",
}
SHA = {"type": "string", "pattern": "^[0-9a-f]{40}$"}
ATTEMPT = {"type": "integer", "minimum": 1}
OBJECT = {"type": "object"}
BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("/api/v1/runners", "post"): {"type": "object", "required": ["name", "labels"], "properties": {
        "name": {"type": "string"}, "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "facts": OBJECT}},
    ("/api/v1/jobs/claim", "post"): {"type": "object", "properties": {"wait_s": {"type": "number", "minimum": 0}}},
    ("/api/v1/jobs/{job_id}/heartbeat", "post"): {"type": "object", "properties": {"attempt": ATTEMPT}},
    ("/api/v1/jobs/{job_id}/complete", "post"): {"type": "object", "required": ["schema", "suite", "metrics"]},
    ("/api/v1/jobs/{job_id}/fail", "post"): {"type": "object", "required": ["reason"], "properties": {
        "reason": {"type": "string"}, "retryable": {"type": "boolean"}, "handback": {"type": "boolean"},
        "attempt": ATTEMPT}},
    ("/api/v1/jobs", "post"): {"type": "object", "required": ["repository", "commit"], "properties": {
        "repository": {"type": "string"}, "commit": SHA, "suite": {"type": "string"},
        "platform": {"type": "string"}, "rerun": {"type": "boolean"}}},
    ("/api/v1/alerts/{alert_id}", "patch"): {"type": "object", "properties": {
        "state": {"type": "string", "enum": ["new", "acknowledged", "invalid", "wont_fix", "fixed"]},
        "note": {"type": ["string", "null"]}}},
    ("/api/v1/registration-tokens", "post"): {"type": "object", "properties": {
        "note": {"type": "string"}, "expires_in_days": {"type": "number", "exclusiveMinimum": 0}}},
    ("/webhooks/github", "post"): OBJECT,
}
TEXT_BODIES = {("/api/v1/jobs/{job_id}/logs", "post")}
QUERIES: dict[str, list[tuple[str, bool]]] = {
    "/api/v1/series": [("repository", True), ("suite", True), ("metric", True), ("platform", True),
                       ("branch", False), ("context_fingerprint", False)],
    "/api/v1/alerts": [("state", False), ("platform", False), ("repository", False)],
    "/api/v1/commits/{sha}": [("repository", False)],
}
# 2xx bodies that are not a JSON object.
ARRAY_RESPONSES = {"/api/v1/suites"}
ERROR = {"type": "object", "required": ["error", "detail"],
         "properties": {"error": {"type": "string"}, "detail": {"type": "string"}, "field": {"type": "string"}}}


def _documented(rule: Rule) -> bool:
    return rule.endpoint != "static" and rule.rule.startswith(("/api/", "/webhooks/", "/healthz"))


def _path_parameters(rule: Rule) -> list[dict[str, Any]]:
    out = []
    for converter, name in re.findall(r"<(?:(\w+):)?(\w+)>", rule.rule):
        schema: dict[str, Any] = ({"type": "integer", "minimum": 1, "maximum": INT32_MAX}
                                  if converter in ("id", "int") else {"type": "string"})
        out.append({"name": name, "in": "path", "required": True, "schema": schema})
    return out


def _operation(rule: Rule, path: str, method: str) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "summary": SUMMARIES.get(path, rule.endpoint),
        "operationId": f"{rule.endpoint}_{method}",
        "parameters": _path_parameters(rule) + [
            {"name": name, "in": "query", "required": required, "schema": {"type": "string"}}
            for name, required in QUERIES.get(path, [])],
        "responses": {
            "2XX": {"description": "success", "content": {"application/json": {
                "schema": {"type": "array", "items": OBJECT} if path in ARRAY_RESPONSES else OBJECT}}},
            "4XX": {"description": "refused; the detail names the problem",
                    "content": {"application/json": {"schema": ERROR}}},
            "503": {"description": "unavailable (e.g. webhooks without a secret)",
                    "content": {"application/json": {"schema": ERROR}}},
        },
    }
    if (path, method) in BODIES:
        operation["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": BODIES[(path, method)]}}}
    elif (path, method) in TEXT_BODIES:
        operation["requestBody"] = {"required": True, "content": {"text/plain": {"schema": {"type": "string"}}}}
    if path == "/api/v1/jobs/claim":
        operation["responses"]["204"] = {"description": "no job within wait_s"}
    return operation


def document() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for rule in current_app.url_map.iter_rules():
        if not _documented(rule):
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule)
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            paths.setdefault(path, {})[method.lower()] = _operation(rule, path, method.lower())
    return {"openapi": "3.1.0", "info": {"title": "Parallax", "version": "1"},
            "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
            "security": [{"bearer": []}], "paths": dict(sorted(paths.items()))}
