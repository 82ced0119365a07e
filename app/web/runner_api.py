"""Runner protocol, server side (DESIGN.md contract): register, claim, heartbeat, logs,
complete, fail — JSON under /api/v1 with bearer tokens."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from app.auth.tokens import create_registration_token, hash_token, new_token
from app.core import limits
from app.core.clock import as_utc
from app.core.errors import Invalid
from app.core.models import Job, Repository, Runner, Suite
from app.jobs import queue, wakeups
from app.web import metrics
from app.web.auth import require_registration_token, require_runner
from app.web.bodies import json_body, read_body, settings
from app.web.capacity import busy
from app.web.session import get_db, request_session

bp = Blueprint("runner_api", __name__, url_prefix="/api/v1")


def attempt_arg(body: dict[str, Any] | None = None) -> int | None:
    """The optional `attempt` of a holder call: a JSON integer in the body, or `?attempt=` as
    decimal digits; 1.9, "1" in JSON, or true are 422."""
    if body and "attempt" in body:
        return limits.integer(body["attempt"], "attempt", minimum=1)
    text = request.args.get("attempt")
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        raise Invalid(f"attempt: must be a positive integer, got {text!r}", extra={"field": "attempt"})
    return limits.integer(int(text), "attempt", minimum=1)


def job_payload(job: Job, repository: Repository, suite: Suite) -> dict[str, Any]:
    return {
        "id": job.id, "attempt": job.attempt, "repository": repository.name,
        "repository_url": repository.url, "commit": job.commit.sha, "suite": suite.name,
        "command": list(suite.command), "timeout_s": suite.timeout_s, "repeats": suite.repeats,
        "platform": job.platform, "lease_expires_at": as_utc(job.lease_expires_at).isoformat(),
        "adapter": suite.adapter, "outputs": list(suite.outputs or []),
        "setup": list(suite.setup) if suite.setup else None, "setup_timeout_s": suite.setup_timeout_s,
        "env": dict(suite.env or {}),
    }


@bp.post("/runners")
def register_runner():  # type: ignore[no-untyped-def]
    session = request_session()
    registration = require_registration_token(session)
    body = json_body()
    name = limits.identifier(body.get("name"), "name", limits.RUNNER_NAME_CHARS)
    labels = body.get("labels", {})
    facts = body.get("facts", {})
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise Invalid("labels: must be an object of string keys and string values", extra={"field": "labels"})
    if not isinstance(facts, dict):
        raise Invalid("facts: must be an object", extra={"field": "facts"})
    if not labels.get("platform"):
        raise Invalid("labels.platform: required (cuda, rocm, cpu, cuda-sim, rocm-sim, ...)",
                      extra={"field": "labels.platform"})
    platform = limits.identifier(labels["platform"], "labels.platform", limits.PLATFORM_CHARS)
    for key, value in labels.items():
        limits.identifier(key, "labels", settings().max_string_chars)
        limits.identifier(value, f"labels.{key}", settings().max_string_chars)
    limits.json_value(facts, "facts", settings())
    token = new_token("pxt")
    runner = Runner(name=name.strip(), platform=platform, labels=labels, facts=facts,
                    token_hash=hash_token(token), registration_token_id=registration.id)
    session.add(runner)
    session.commit()
    return jsonify({"id": runner.id, "token": token}), 201


@bp.post("/jobs/claim")
def claim_job():  # type: ignore[no-untyped-def]
    config = settings()
    # Many long-polls are admitted at once; their database work (the token check, each look at
    # the queue) takes turns through one bounded gate per process.
    gate = wakeups.for_engine(get_db().engine, config.claim_concurrency).attempts
    if not gate.acquire(timeout=config.capacity_wait_s):
        return busy("longpoll", f"claims are queued beyond {config.capacity_wait_s:g} s in this process; retry shortly")
    try:
        session = request_session()
        runner = require_runner(session)
        runner_id, platform, labels = runner.id, runner.platform, dict(runner.labels or {})
        body = json_body(required=False)
        wait_s = min(limits.number(body.get("wait_s", 0), "wait_s", minimum=0), config.claim_max_wait_s)
        claim_session = body.get("session")  # the runner process's id
        if claim_session is not None:
            claim_session = limits.identifier(claim_session, "session",
                                              limits.column_chars(Runner.__table__.c.claim_session))
            if runner.claim_session != claim_session:
                # A new process of this runner: from now on only its claims take jobs (queue.try_claim),
                # and a job still running under the old one is requeued now, not after its lease.
                if runner.claim_session is not None:
                    queue.fail_back_running(session, runner)
                runner.claim_session = claim_session
                session.commit()
        session.close()  # do not hold a connection through the long-poll
    finally:
        gate.release()
    waiting = metrics.WAITING.labels(platform)
    waiting.inc()
    try:
        job = queue.claim(get_db(), runner_id, lease_s=config.lease_s, wait_s=wait_s, platform=platform,
                          labels=labels, poll_s=config.claim_poll_s, concurrency=config.claim_concurrency,
                          notify=config.claim_notify, claim_session=claim_session)
    finally:
        waiting.dec()
    if job is None:
        return Response(status=204)
    return jsonify({"job": job_payload(job, job.repository, job.suite)}), 200


@bp.post("/jobs/<id:job_id>/heartbeat")
def heartbeat(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    runner = require_runner(session)
    body = json_body(required=False)
    job = queue.heartbeat(session, runner, job_id, settings().lease_s, attempt_arg(body))
    return jsonify({"lease_expires_at": as_utc(job.lease_expires_at).isoformat(),
                    "cancel": job.cancel_requested})


@bp.post("/jobs/<id:job_id>/logs")
def append_logs(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    runner = require_runner(session)
    raw = read_body(max(settings().log_cap_bytes, 1_000_000))
    stored, truncated = queue.append_log(session, runner, job_id, raw.decode("utf-8", errors="replace"),
                                         settings().log_cap_bytes, attempt_arg())
    return jsonify({"stored_bytes": stored, "truncated": truncated})


@bp.post("/jobs/<id:job_id>/complete")
def complete_job(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    runner = require_runner(session)
    raw = read_body(settings().max_document_bytes)
    run, created = queue.complete(session, runner, job_id, raw, settings().max_document_bytes, attempt_arg(),
                                  limits.document_limits(settings()))
    return jsonify({"run_id": run.id, "job_id": job_id, "created": created}), 201 if created else 200


@bp.post("/jobs/<id:job_id>/fail")
def fail_job(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    runner = require_runner(session)
    body = json_body()
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise Invalid("reason: must be a non-empty string", extra={"field": "reason"})
    retryable = limits.boolean(body.get("retryable", False), "retryable")
    handback = limits.boolean(body.get("handback", False), "handback")
    kind = body.get("kind")
    if kind not in (None, *queue.FAILURE_KINDS):
        raise Invalid(f"kind: must be one of {', '.join(queue.FAILURE_KINDS)} or absent, got {kind!r}",
                      extra={"field": "kind"})
    job = queue.fail(session, runner, job_id, reason, retryable, attempt_arg(body), handback=handback, kind=kind)
    return jsonify({"id": job.id, "state": job.state.value, "attempt": job.attempt})


__all__ = ["bp", "create_registration_token", "json_body", "read_body"]
