"""Read and operator API under /api/v1 (DESIGN.md paths): queue jobs, read commits and jobs,
the OpenAPI description, and /healthz."""
from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app, jsonify, request
from sqlalchemy import select

from app.core import limits
from app.core.clock import as_utc
from app.core.errors import Invalid, NotFound
from app.core.models import CiUpload, Commit, Job, JobLog, JobReason, Repository, Run, Suite
from app.jobs import queue
from app.web.auth import require_admin
from app.web.bodies import json_body, require_sha
from app.web.openapi import document
from app.web.session import get_db, request_session

bp = Blueprint("api", __name__)
def find_repository(session, name: Any) -> Repository:  # type: ignore[no-untyped-def]
    if not isinstance(name, str) or not name:
        raise Invalid("repository: required", extra={"field": "repository"})
    repo = session.scalar(select(Repository).where(Repository.name == name))
    if repo is None:
        raise NotFound(f"unknown repository {name!r}; add it with `parallax repo add` or parallax.toml")
    return repo


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id, "repository": job.repository.name, "commit": job.commit.sha, "suite": job.suite.name,
        "platform": job.platform, "state": job.state.value, "reason": job.reason.value,
        "priority": job.priority, "attempt": job.attempt, "max_attempts": job.max_attempts,
        "runner_id": job.runner_id, "failure_reason": job.failure_reason, "failure_kind": job.failure_kind,
        "created_at": as_utc(job.created_at).isoformat(),
        "finished_at": job.finished_at and as_utc(job.finished_at).isoformat(),
    }


def run_json(run: Run) -> dict[str, Any]:
    return {
        "id": run.id, "job_id": run.job_id, "attempt": run.attempt, "platform": run.platform,
        "runner_id": run.runner_id, "simulated": run.simulated, "environment": run.environment,
        "context": run.context, "context_fingerprint": run.context_fingerprint,
        # `pruned`: retention dropped the raw samples; `samples` is then [median] and `summary`
        # holds what stays of them (count, median, min, max).
        "metrics": [{"name": m.metric, "unit": m.unit, "direction": m.direction, "samples": m.samples,
                     "pruned": m.samples_pruned_at is not None,
                     "summary": {"count": m.sample_count, "median": m.sample_median, "min": m.sample_min,
                                 "max": m.sample_max}}
                    for m in run.measurements],
        "items": [{"name": i.name, "correct": i.correct} for i in run.items],
    }


@bp.get("/healthz")
def healthz():  # type: ignore[no-untyped-def]
    get_db().ping()
    catalogue = current_app.extensions["parallax.catalogue_check"].state(request_session())
    return jsonify({"status": "ok", "catalogue": catalogue.status})


@bp.post("/api/v1/jobs")
def create_jobs():  # type: ignore[no-untyped-def]
    session = request_session()
    require_admin(session)
    body = json_body()
    repo = find_repository(session, body.get("repository"))
    sha = require_sha(body.get("commit"))
    suite, platform = body.get("suite"), body.get("platform")
    if suite is not None:
        suite = limits.identifier(suite, "suite", limits.SUITE_NAME_CHARS)
    if platform is not None:
        platform = limits.identifier(platform, "platform", limits.PLATFORM_CHARS)
    force = limits.boolean(body.get("rerun", False), "rerun")
    results = queue.enqueue_matrix(session, repo, sha, suite_name=suite, platform=platform,
                                   reason=JobReason.rerun if force else JobReason.manual, force=force)
    session.commit()
    return jsonify({"jobs": [dict(job_json(job), created=created) for job, created in results]}), 201


@bp.get("/api/v1/jobs/<id:job_id>")
def get_job(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    logs = "".join(session.scalars(select(JobLog.text).where(JobLog.job_id == job_id).order_by(JobLog.id)))
    return jsonify(dict(job_json(job), log=logs))


@bp.get("/api/v1/commits/<sha>")
def get_commit(sha: str):  # type: ignore[no-untyped-def]
    require_sha(sha, "sha")
    session = request_session()
    query = select(Commit).where(Commit.sha == sha)
    if request.args.get("repository"):
        query = query.where(Commit.repository_id == find_repository(session, request.args["repository"]).id)
    commits = list(session.scalars(query))
    if not commits:
        raise NotFound(f"commit {sha} is not known")
    out = []
    for commit in commits:
        jobs = list(session.scalars(select(Job).where(Job.commit_id == commit.id).order_by(Job.id)))
        runs = list(session.scalars(select(Run).where(Run.commit_id == commit.id).order_by(Run.id)))
        uploads = {u.run_id: {"provider": u.provider, "run_url": u.run_url, "adapter": u.adapter}
                   for u in session.scalars(select(CiUpload).where(CiUpload.run_id.in_([r.id for r in runs])))}
        out.append({"repository": commit.repository.name, "sha": commit.sha, "summary": commit.summary,
                    "jobs": [job_json(j) for j in jobs],
                    "runs": [dict(run_json(r), upload=uploads.get(r.id)) for r in runs]})
    return jsonify(out[0] if len(out) == 1 else {"sha": sha, "repositories": out})


@bp.get("/api/v1/suites")
def list_suites():  # type: ignore[no-untyped-def]
    session = request_session()
    return jsonify([{"name": s.name, "command": s.command, "platforms": s.platforms, "timeout_s": s.timeout_s,
                     "repeats": s.repeats} for s in session.scalars(select(Suite).order_by(Suite.name))])


@bp.get("/api/v1/openapi.json")
def openapi():  # type: ignore[no-untyped-def]
    return jsonify(document())
