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

SUMMARIES: dict[str | tuple[str, str], str] = {
    "/api/v1/runners": "Register a runner (registration token) -> {id, token}",
    "/api/v1/jobs/claim": "Claim a job with a lease; 204 when none after wait_s",
    "/api/v1/jobs/{job_id}/heartbeat": "Extend the lease -> {lease_expires_at, cancel}",
    "/api/v1/jobs/{job_id}/logs": "Append a log chunk (text body, capped per job)",
    "/api/v1/jobs/{job_id}/complete": "Upload the results document (idempotent)",
    "/api/v1/jobs/{job_id}/fail": "Report failure {reason, retryable}",
    "/api/v1/jobs": "Queue the job matrix for a commit, or one cell (admin token)",
    "/api/v1/bisects": "Start a bisect {repository, suite, metric, platform, good, bad, effect?} (user token): "
                       "202, pending until the bisect duty has checked good and bad in git",
    "/api/v1/bisects/{bisect_id}": "A bisect: state, rounds, tested commits with samples and verdicts, culprit",
    ("/api/v1/registration-tokens", "post"): "Create a runner registration token (admin token)",
    ("/api/v1/registration-tokens", "get"): "List registration tokens without their values (admin token; paginated)",
    "/api/v1/users": "List users: name, role, disabled, expiry; never a token (admin token; paginated)",
    "/api/v1/registration-tokens/{token_id}/revoke": "Revoke a registration token (admin token)",
    "/api/v1/runners/{runner_id}/disable": "Disable a runner (admin token)",
    "/api/v1/users/{name}/disable": "Disable a user (admin token)",
    "/api/v1/runs": "Upload results measured by an existing CI job (CI token); 201 stored, 200 a retry (Idempotency-Key), "
                    "202 a commit the service has not seen: queued for git, poll the Location (GET /api/v1/uploads/{id})",
    "/api/v1/uploads/{upload_id}": "A queued upload (CI token of its repository, or a user token): state pending, "
                                   "stored {run_id, job_id, created} or failed {status, error}",
    "/api/v1/ci-tokens": "Create a CI upload token {repository, platform?, note?, expires_in_days?} (admin token)",
    "/api/v1/ci-tokens/{token_id}/revoke": "Revoke a CI upload token (admin token)",
    "/api/v1/pulls/{owner}/{repo}/{number}": "A pull request's verdict: head against merge-base per platform, scopes",
    "/webhooks/github": "GitHub webhook receiver (push, pull_request, issue_comment, ping)",
    "/healthz": "Liveness and database check; catalogue: current, or stale when parallax.toml has unapplied edits",
    "/api/v1/alerts": "List alerts with their changes, classification, bisects and reproductions "
                      "(filters: state, platform, repository)",
    ("/api/v1/alerts/{alert_id}", "patch"): "Triage an alert: set its state and note (user token)",
    ("/api/v1/alerts/{alert_id}", "get"): "One alert with its explanation (what changed, files, timelines)",
    "/api/v1/commits/{sha}": "A commit: its jobs and runs with every sample",
    ("/api/v1/jobs/{job_id}", "get"): "A job: state, attempts, failure reason and log",
    "/api/v1/openapi.json": "This OpenAPI document",
    "/api/v1/series": "One series: per-commit samples of a metric on a platform along a branch",
    "/api/v1/suites": "The configured suites: command, platforms, timeout, repeats",
    ("/api/v1/runners", "get"): "List runners, newest first (paginated: limit, before; filter: platform)",
    ("/api/v1/jobs", "get"): "List jobs, newest first (paginated: limit, before; filters: state, platform)",
    "/api/v1/repositories": "List tracked repositories (paginated: limit, before)",
    ("/api/v1/bisects", "get"): "List bisects, newest first (paginated: limit, before; filter: state)",
    "/api/v1/deliveries": "List webhook deliveries with their errors (user token; paginated; filter: state)",
    "/api/v1/deliveries/{key}/retry": "Process a failed or waiting webhook delivery again (user token)",
    "/api/v1/deliveries/{key}/skip": "Give up on a webhook delivery (user token)",
    "/api/v1/jobs/{job_id}/cancel": "Cancel a job: at once when queued, at its next heartbeat when running (user token)",
    "/api/v1/bisects/{bisect_id}/cancel": "Cancel a running bisect and its outstanding jobs (user token)",
    "/api/v1/jobs/{job_id}/artifacts": "Upload one artifact (?name=, raw body; holder; 413 past the cap) or list them",
    "/api/v1/jobs/{job_id}/artifacts/{name}": "Download one artifact (the file's own bytes)",
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
    ("/api/v1/ci-tokens", "post"): {"type": "object", "required": ["repository"], "properties": {
        "repository": {"type": "string"}, "platform": {"type": "string"}, "note": {"type": "string"},
        "expires_in_days": {"type": "number", "exclusiveMinimum": 0}}},
    ("/api/v1/runs", "post"): {"type": "object", "required": ["repository", "sha", "platform", "suite", "document"],
                               "properties": {"repository": {"type": "string"}, "sha": SHA,
                                              "platform": {"type": "string"}, "suite": {"type": "string"},
                                              "document": OBJECT, "environment": OBJECT, "ci": OBJECT}},
}
TEXT_BODIES = {("/api/v1/jobs/{job_id}/logs", "post")}
BINARY_BODIES = {("/api/v1/jobs/{job_id}/artifacts", "post")}
BINARY_RESPONSES = {"/api/v1/jobs/{job_id}/artifacts/{name}"}
QUERIES: dict[str, list[tuple[str, bool]]] = {
    "/api/v1/series": [("repository", True), ("suite", True), ("metric", True), ("platform", True),
                       ("branch", False), ("last", False), ("context_fingerprint", False)],
    "/api/v1/alerts": [("state", False), ("platform", False), ("repository", False)],
    "/api/v1/commits/{sha}": [("repository", False)],
    "/api/v1/repositories": [("limit", False), ("before", False)],
    "/api/v1/runners": [("limit", False), ("before", False), ("platform", False)],
    "/api/v1/jobs": [("limit", False), ("before", False), ("state", False), ("platform", False)],
    "/api/v1/bisects": [("limit", False), ("before", False), ("state", False)],
    "/api/v1/deliveries": [("limit", False), ("before", False), ("state", False)],
    "/api/v1/users": [("limit", False), ("before", False)],
    "/api/v1/registration-tokens": [("limit", False), ("before", False)],
    "/api/v1/jobs/{job_id}/artifacts": [("name", False), ("attempt", False)],
    "/api/v1/jobs/{job_id}/artifacts/{name}": [("attempt", False)],
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
        "summary": SUMMARIES.get((path, method)) or SUMMARIES.get(path, rule.endpoint),
        "operationId": f"{rule.endpoint}_{method}",
        "parameters": _path_parameters(rule) + [
            {"name": name, "in": "query", "required": required, "schema": {"type": "string"}}
            for name, required in (QUERIES.get(path, []) if method == "get" else [])],
        "responses": {
            "2XX": {"description": "success", "content": {"application/json": {
                "schema": {"type": "array", "items": OBJECT} if path in ARRAY_RESPONSES else OBJECT}}},
            "4XX": {"description": "refused; the detail names the problem",
                    "content": {"application/json": {"schema": ERROR}}},
            "503": {"description": "unavailable (webhooks without a secret; the database restarting: Retry-After)",
                    "content": {"application/json": {"schema": ERROR}}},
        },
    }
    if (path, method) in BODIES:
        operation["requestBody"] = {"required": True, "content": {
            "application/json": {"schema": BODIES[(path, method)]}}}
    elif (path, method) in TEXT_BODIES:
        operation["requestBody"] = {"required": True, "content": {"text/plain": {"schema": {"type": "string"}}}}
    elif (path, method) in BINARY_BODIES:
        operation["requestBody"] = {"required": True, "content": {"application/octet-stream": {
            "schema": {"type": "string", "format": "binary"}}}}
    if path in BINARY_RESPONSES:
        operation["responses"]["2XX"] = {"description": "the artifact's bytes", "content": {
            "*/*": {"schema": {"type": "string", "format": "binary"}}}}
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
