"""The operator's view of webhook deliveries: list them with their errors, count the ones pending
and failed, try one again now (`retry`) or give up on one (`skip`). The same actions back
`parallax deliveries list|retry|skip`, `GET /api/v1/deliveries`, the `/deliveries` page and its
buttons. Processing itself is `app.github.ingest`."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core.clock import as_utc, utcnow
from app.core.errors import Conflict, Invalid, NotFound
from app.core.models import WebhookDelivery

STATES = ("pending", "done", "ignored", "error", "skipped")
ACTIONABLE = ("pending", "error")  # what retry and skip act on


@dataclass(frozen=True)
class Counts:
    pending: int
    waiting: int   # pending after a failed attempt, waiting for its retry
    failed: int    # state error: gave up


def counts(session: Session) -> Counts:
    rows = dict(session.execute(select(WebhookDelivery.state, func.count()).where(WebhookDelivery.state.in_(ACTIONABLE))
                                .group_by(WebhookDelivery.state)).all())
    waiting = session.scalar(select(func.count()).select_from(WebhookDelivery).where(
        WebhookDelivery.state == "pending", WebhookDelivery.failure_kind.is_not(None))) or 0
    return Counts(pending=int(rows.get("pending", 0)), waiting=int(waiting), failed=int(rows.get("error", 0)))


def repository_of(delivery: WebhookDelivery) -> str | None:
    try:
        info = json.loads(delivery.payload).get("repository") or {}
    except (ValueError, AttributeError):
        return None
    name = info.get("full_name") if isinstance(info, dict) else None
    return name if isinstance(name, str) else None


def delivery_json(delivery: WebhookDelivery) -> dict[str, Any]:
    retry_at = delivery.claimed_until if delivery.state == "pending" and delivery.failure_kind else None
    return {
        "id": delivery.id, "delivery": delivery.delivery_id, "event": delivery.event, "action": delivery.action,
        "repository": repository_of(delivery), "state": delivery.state, "result": delivery.result,
        "attempts": delivery.attempts, "failure_kind": delivery.failure_kind,
        "received_at": as_utc(delivery.received_at).isoformat(),
        "processed_at": delivery.processed_at and as_utc(delivery.processed_at).isoformat(),
        "next_attempt_at": retry_at and as_utc(retry_at).isoformat(),
    }


def list_deliveries(session: Session, *, state: str | None = None, limit: int = 50,
                    before_id: int | None = None) -> list[WebhookDelivery]:
    """Newest first; `before_id` pages on (the last id of the previous page)."""
    query = select(WebhookDelivery).order_by(WebhookDelivery.id.desc()).limit(limit)
    if state is not None:
        if state not in STATES:
            raise Invalid(f"state: unknown delivery state {state!r} (known: {', '.join(STATES)})",
                          extra={"field": "state"})
        query = query.where(WebhookDelivery.state == state)
    if before_id is not None:
        query = query.where(WebhookDelivery.id < before_id)
    return list(session.scalars(query))


def find(session: Session, key: str | int) -> WebhookDelivery:
    """By GitHub's delivery id (X-GitHub-Delivery), or by Parallax's own number."""
    delivery = session.scalar(select(WebhookDelivery).where(WebhookDelivery.delivery_id == str(key)))
    if delivery is None and str(key).isdigit():
        delivery = session.get(WebhookDelivery, int(key))
    if delivery is None:
        raise NotFound(f"delivery {key!r} does not exist; `parallax deliveries list` shows them")
    return delivery


def _actionable(delivery: WebhookDelivery, verb: str) -> None:
    if delivery.state not in ACTIONABLE:
        raise Conflict(f"delivery {delivery.delivery_id} is {delivery.state}; only pending or failed (error) "
                       f"deliveries can be {verb}")


def retry(session: Session, key: str | int) -> WebhookDelivery:
    """Process it again at the next tick, with a fresh set of attempts."""
    delivery = find(session, key)
    _actionable(delivery, "retried")
    if delivery.state == "pending" and delivery.failure_kind is None and delivery.claimed_until is not None \
            and as_utc(delivery.claimed_until) > utcnow():
        raise Conflict(f"delivery {delivery.delivery_id} is being processed right now; nothing to retry")
    delivery.state, delivery.attempts, delivery.claimed_until = "pending", 0, None
    delivery.failure_kind, delivery.processed_at = None, None
    return delivery


def skip(session: Session, key: str | int, actor: str) -> WebhookDelivery:
    """Give up on it: it is never processed and holds nothing back."""
    delivery = find(session, key)
    _actionable(delivery, "skipped")
    was = f"; last error: {delivery.result}" if delivery.result else ""
    delivery.state, delivery.claimed_until, delivery.processed_at = "skipped", None, utcnow()
    delivery.result = f"skipped by {actor}{was}"[:4000]
    return delivery
