"""`POST /webhooks/github`: verify, record, answer; the "webhooks" duty of `app.github.ingest`
does the work later."""
from __future__ import annotations

from flask import Blueprint, current_app, jsonify, request
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.core.clock import utcnow
from app.core.config import Settings
from app.core.limits import free_text
from app.core.models import WebhookDelivery
from app.github.ingest import BadRequest, ServiceUnavailable, classify, parse_payload, verify_signature, webhook_secret
from app.web.bodies import read_body
from app.web.session import request_session

bp = Blueprint("webhooks", __name__)


@bp.post("/webhooks/github")
def receive():  # type: ignore[no-untyped-def]
    settings: Settings = current_app.extensions["parallax.settings"]
    body = read_body(settings.max_webhook_bytes)
    session = request_session()
    secret = webhook_secret(session, settings, body, request.content_type or "application/json")
    if not secret:
        raise ServiceUnavailable("webhooks are off: set PARALLAX_GITHUB_WEBHOOK_SECRET, or a repository's own "
                                 "secret with `parallax repo add URL --webhook-secret-env VAR`")
    verify_signature(secret, body, request.headers.get("X-Hub-Signature-256"))
    event = request.headers.get("X-GitHub-Event", "")
    delivery_id = request.headers.get("X-GitHub-Delivery", "")
    if not event or len(event) > 64:
        raise BadRequest("X-GitHub-Event header is missing or too long")
    if not delivery_id or len(delivery_id) > 128:
        raise BadRequest("X-GitHub-Delivery header is missing or too long")
    payload, payload_text = parse_payload(body, request.content_type or "application/json")
    existing = session.scalar(select(WebhookDelivery).where(WebhookDelivery.delivery_id == delivery_id))
    if existing is not None:
        return _duplicate(existing)
    verdict = classify(session, event, payload)
    action = payload.get("action") if isinstance(payload.get("action"), str) else None
    # The reason may quote a payload field, and PostgreSQL text cannot hold NUL: free_text replaces it.
    delivery = WebhookDelivery(delivery_id=delivery_id, event=event, action=(action or None) and free_text(action[:64]),
                               payload=payload_text, state=verdict.state,
                               result=None if verdict.state == "pending" else free_text(verdict.reason),
                               processed_at=None if verdict.state == "pending" else utcnow())
    session.add(delivery)
    try:
        session.commit()
    except IntegrityError:  # the same delivery arrived twice at once; the other request stored it
        session.rollback()
        return _duplicate(session.scalar(select(WebhookDelivery).where(WebhookDelivery.delivery_id == delivery_id)))
    status = {"pending": "accepted", "done": "ok", "ignored": "ignored"}[verdict.state]
    return jsonify({"status": status, "delivery": delivery_id, "reason": verdict.reason}), verdict.status


def _duplicate(existing: WebhookDelivery | None):  # type: ignore[no-untyped-def]
    state = existing.state if existing is not None else "pending"
    return jsonify({"status": "duplicate", "delivery": existing.delivery_id if existing else None,
                    "reason": f"delivery already received (state {state}); nothing new was done"}), 200
