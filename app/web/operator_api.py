"""The operator's lists and undo buttons under /api/v1: paginated lists of repositories, runners,
jobs, bisects, webhook deliveries, users and registration tokens; cancel a job or a bisect; retry
or skip a delivery.

Every list is newest first, `?limit=` (1-200, default 50) long, and pages on with `?before=<id>`
(the `next` link of the previous page); filters are named per list. Webhook deliveries carry
their errors and need a user or admin token; users and registration tokens need an admin token and
never show a token or its hash; the other lists are as public as the dashboard."""
from __future__ import annotations

from typing import Any, Callable

from flask import Blueprint, jsonify, request, url_for
from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from app.bisect import service as bisects
from app.core import limits
from app.core.clock import as_utc
from app.core.errors import Invalid, NotFound
from app.core.models import Bisect, BisectState, Job, JobState, RegistrationToken, Repository, Runner, User, WebhookDelivery
from app.github import deliveries
from app.jobs import queue
from app.web.api import job_json
from app.web.auth import require_admin, require_maintainer
from app.web.session import request_session

bp = Blueprint("operator_api", __name__, url_prefix="/api/v1")
MAX_PAGE = 200


def _page_args() -> tuple[int, int | None]:
    raw = request.args.get("limit", "50")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise Invalid(f"limit: a whole number from 1 to {MAX_PAGE}, got {raw[:20]!r}", extra={"field": "limit"})
    limit = int(raw)
    before = request.args.get("before")
    if before is not None and not (before.isdigit() and 0 < int(before) <= limits.INT32_MAX):
        raise Invalid("before: the id to page on from (the `next` link of the previous page)", extra={"field": "before"})
    return limit, int(before) if before is not None else None


def _choice(name: str, allowed: list[str]) -> str | None:
    value = request.args.get(name)
    if value is not None and value not in allowed:
        raise Invalid(f"{name}: unknown value {value!r} (known: {', '.join(allowed)})", extra={"field": name})
    return value


def _page(session: Session, query: Select[Any], id_column: Any, to_json: Callable[[Any], dict[str, Any]],
          endpoint: str) -> Any:
    limit, before = _page_args()
    if before is not None:
        query = query.where(id_column < before)
    rows = list(session.scalars(query.order_by(id_column.desc()).limit(limit + 1)))  # one more: is there a next page?
    more, rows = len(rows) > limit, rows[:limit]
    args = {k: v for k, v in request.args.items() if k not in ("before", "limit")}
    next_url = url_for(endpoint, before=rows[-1].id, limit=limit, **args) if more else None
    return jsonify({"items": [to_json(r) for r in rows], "next": next_url})


def repository_json(repository: Repository) -> dict[str, Any]:
    return {"id": repository.id, "name": repository.name, "url": repository.url,
            "default_branch": repository.default_branch, "webhook_secret": repository.webhook_secret is not None,
            "created_at": as_utc(repository.created_at).isoformat()}


def runner_json(runner: Runner) -> dict[str, Any]:
    return {"id": runner.id, "name": runner.name, "platform": runner.platform, "labels": runner.labels,
            "facts": runner.facts, "disabled": runner.disabled,
            "last_seen_at": runner.last_seen_at and as_utc(runner.last_seen_at).isoformat()}


def bisect_summary(bisect: Bisect) -> dict[str, Any]:
    return {"id": bisect.id, "suite": bisect.suite, "metric": bisect.metric, "platform": bisect.platform,
            "state": bisect.state.value, "reason": bisect.reason, "alert_id": bisect.alert_id,
            "url": url_for("bisects.get_bisect", bisect_id=bisect.id),
            "created_at": as_utc(bisect.created_at).isoformat()}


def _when(value: Any) -> str | None:
    return value and as_utc(value).isoformat()


def user_json(user: User) -> dict[str, Any]:
    return {"id": user.id, "name": user.name, "role": user.role, "disabled": user.disabled,
            "created_at": _when(user.created_at), "expires_at": _when(user.expires_at)}


def registration_token_json(token: RegistrationToken) -> dict[str, Any]:
    return {"id": token.id, "note": token.note, "revoked": token.revoked,
            "created_at": _when(token.created_at), "expires_at": _when(token.expires_at)}


@bp.get("/repositories")
def list_repositories():  # type: ignore[no-untyped-def]
    return _page(request_session(), select(Repository), Repository.id, repository_json, "operator_api.list_repositories")


@bp.get("/runners")
def list_runners():  # type: ignore[no-untyped-def]
    query = select(Runner)
    if request.args.get("platform"):
        query = query.where(Runner.platform == request.args["platform"])
    return _page(request_session(), query, Runner.id, runner_json, "operator_api.list_runners")


@bp.get("/jobs")
def list_jobs():  # type: ignore[no-untyped-def]
    query = select(Job)
    state = _choice("state", [s.value for s in JobState])
    if state:
        query = query.where(Job.state == JobState(state))
    if request.args.get("platform"):
        query = query.where(Job.platform == request.args["platform"])
    return _page(request_session(), query, Job.id, job_json, "operator_api.list_jobs")


@bp.get("/bisects")
def list_bisects():  # type: ignore[no-untyped-def]
    query = select(Bisect)
    state = _choice("state", [s.value for s in BisectState])
    if state:
        query = query.where(Bisect.state == BisectState(state))
    return _page(request_session(), query, Bisect.id, bisect_summary, "operator_api.list_bisects")


@bp.get("/deliveries")
def list_deliveries():  # type: ignore[no-untyped-def]
    session = request_session()
    require_maintainer(session)
    query = select(WebhookDelivery)
    state = _choice("state", list(deliveries.STATES))
    if state:
        query = query.where(WebhookDelivery.state == state)
    return _page(session, query, WebhookDelivery.id, deliveries.delivery_json, "operator_api.list_deliveries")


@bp.get("/users")
def list_users():  # type: ignore[no-untyped-def]
    session = request_session()
    require_admin(session)
    return _page(session, select(User), User.id, user_json, "operator_api.list_users")


@bp.get("/registration-tokens")
def list_registration_tokens():  # type: ignore[no-untyped-def]
    session = request_session()
    require_admin(session)
    return _page(session, select(RegistrationToken), RegistrationToken.id, registration_token_json,
                 "operator_api.list_registration_tokens")


@bp.post("/deliveries/<key>/retry")
def retry_delivery(key: str):  # type: ignore[no-untyped-def]
    session = request_session()
    require_maintainer(session)
    delivery = deliveries.retry(session, limits.identifier(key, "delivery", 128))
    session.commit()
    return jsonify(deliveries.delivery_json(delivery))


@bp.post("/deliveries/<key>/skip")
def skip_delivery(key: str):  # type: ignore[no-untyped-def]
    session = request_session()
    actor = require_maintainer(session)
    delivery = deliveries.skip(session, limits.identifier(key, "delivery", 128), actor)
    session.commit()
    return jsonify(deliveries.delivery_json(delivery))


@bp.post("/jobs/<id:job_id>/cancel")
def cancel_job(job_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    require_maintainer(session)
    job = session.get(Job, job_id)
    if job is None:
        raise NotFound(f"job {job_id} does not exist")
    queue.request_cancel(session, job)
    session.commit()
    return jsonify(dict(job_json(job), cancel_requested=job.cancel_requested))


@bp.post("/bisects/<id:bisect_id>/cancel")
def cancel_bisect(bisect_id: int):  # type: ignore[no-untyped-def]
    session = request_session()
    actor = require_maintainer(session)
    bisect = bisects.cancel(session, bisect_id, actor)
    session.commit()
    return jsonify(bisects.bisect_json(session, bisect))
