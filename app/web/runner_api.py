"""Runner protocol, server side (DESIGN.md contract): register, claim, heartbeat, logs,
complete, fail — JSON under /api/v1 with bearer tokens."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from app.auth.tokens import create_registration_token, hash_token, new_token
from app.core.clock import as_utc
from app.core.errors import APIError, Invalid
from app.core.models import Job, Repository, Runner, Suite
from app.jobs import queue, wakeups
from app.web import metrics
from app.web.auth import require_registration_token, require_runner
from app.web.bodies import json_body, read_body, settings
from app.web.capacity import Capacity, busy
from app.web.session import get_db, request_session

bp = Blueprint("runner_api", __name__, url_prefix="/api/v1")


def attempt_arg(body: dict[str, Any] | None = None) -> int | None:
    value = (body or {}).get("attempt", request.args.get("attempt"))
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise APIError(f"attempt must be an integer, got {value!r}") from exc


def job_payload(job: Job, repository: Repository, suite: Suite) -> dict[str, Any]:
    return {
        "id": job.id, "attempt": job.attempt, "repository": repository.name,
        "repository_url": repository.url, "commit": job.commit.sha, "suite": suite.name,
        "command": list(suite.command), "timeout_s": suite.timeout_s, "repeats": suite.repeats,
        "platform": job.platform, "lease_expires_at": as_utc(job.lease_expires_at).isoformat(),
    }


@bp.post("/runners")
def register_runner():  # type: ignore[no-untyped-def]
    session = request_session()
    registration = require_registration_token(session)
    body = json_body()
    name = body.get("name")
    labels = body.get("labels", {})
    facts = body.get("facts", {})
    if not isinstance(name, str) or not name.strip() or len(name) > 255:
        raise Invalid("name: must be a non-empty string of at most 255 characters", extra={"field": "name"})
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise Invalid("labels: must be an object of string keys and string values", extra={"field": "labels"})
    if not isinstance(facts, dict):
        raise Invalid("facts: must be an object", extra={"field": "facts"})
    platform = labels.get("platform")
    if not platform:
        raise Invalid("labels.platform: required (cuda, rocm, cpu, cuda-sim, rocm-sim, ...)",
                      extra={"field": "labels.platform"})
    token = new_token("pxt")
    runner = Runner(name=name.strip(), platform=platform, labels=labels, facts=facts,
                    token_hash=hash_token(token), registration_token_id=registration.id)
    session.add(runner)
    session.commit()
    return jsonify({"id": runner.id, "token": token}), 201


@bp.post("/jobs/claim")
def claim_job():  # type: ignore[no-untyped-def]
    capacity: Capacity = current_app.extensions["parallax.capacity"]
    # Many long-polls are admitted at once; their database work (the token check, each look at
    # the queue) takes turns through one bounded gate per process.
    gate = wakeups.for_engine(get_db().engine, capacity.claim_concurrency).attempts
    if not gate.acquire(timeout=capacity.capacity_wait_s):
        return busy("longpoll", f"claims are queued beyond {capacity.capacity_wait_s:g} s in this process; retry shortly")
    try:
        session = request_session()
        runner = require_runner(session)
        runner_id, platform = runner.id, runner.platform
        session.close()  # do not hold a connection through the long-poll
    finally:
        gate.release()
    body = json_body(required=False)
    try:
        wait_s = float(body.get("wait_s", 0))
    except (TypeError, ValueError) as exc:
        raise Invalid(f"wait_s: must be a number, got {body.get('wait_s')!r}", extra={"field": "wait_s"}) from exc
    if wait_s < 0:
        raise Invalid("wait_s: must not be negative", extra={"field": "wait_s"})
    wait_s = min(wait_s, settings().claim_max_wait_s)
    waiting = metrics.WAITING.labels(platform)
    waiting.inc()
    try:
        job = queue.claim(get_db(), runner_id, lease_s=settings().lease_s, wait_s=wait_s, platform=platform,
                          poll_s=capacity.claim_poll_s, concurrency=capacity.claim_concurrency,
                          notify=capacity.claim_notify)
    finally:
        waiting.dec()
    if job is None:
        return Response(status=204)
    return jsonify({"job": job_payload(job, job.repository, job.suite)}), 200


@bp.post("/jobs/<int:job_id>/heartbeat")
def heartbeat(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    runner = require_runner(session)
    body = json_body(required=False)
    job = queue.heartbeat(session, runner, job_id, settings().lease_s, attempt_arg(body))
    return jsonify({"lease_expires_at": as_utc(job.lease_expires_at).isoformat(),
                    "cancel": job.cancel_requested})


@bp.post("/jobs/<int:job_id>/logs")
def append_logs(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    runner = require_runner(session)
    raw = read_body(max(settings().log_cap_bytes, 1_000_000))
    stored, truncated = queue.append_log(session, runner, job_id, raw.decode("utf-8", errors="replace"),
                                         settings().log_cap_bytes, attempt_arg())
    return jsonify({"stored_bytes": stored, "truncated": truncated})


@bp.post("/jobs/<int:job_id>/complete")
def complete_job(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    runner = require_runner(session)
    raw = read_body(settings().max_document_bytes)
    run, created = queue.complete(session, runner, job_id, raw, settings().max_document_bytes, attempt_arg())
    return jsonify({"run_id": run.id, "job_id": job_id, "created": created}), 201 if created else 200


@bp.post("/jobs/<int:job_id>/fail")
def fail_job(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    runner = require_runner(session)
    body = json_body()
    reason = body.get("reason")
    retryable = body.get("retryable", False)
    if not isinstance(reason, str) or not reason.strip():
        raise Invalid("reason: must be a non-empty string", extra={"field": "reason"})
    handback = body.get("handback", False)
    for field, value in (("retryable", retryable), ("handback", handback)):
        if not isinstance(value, bool):
            raise Invalid(f"{field}: must be true or false", extra={"field": field})
    job = queue.fail(session, runner, job_id, reason, retryable, attempt_arg(body), handback=handback)
    return jsonify({"id": job.id, "state": job.state.value, "attempt": job.attempt})


__all__ = ["bp", "create_registration_token", "json_body", "read_body"]
