"""The `notify-deliveries` duty: send what the outbox holds, with retries, backoff and a dead
letter.

Each due row is claimed with a conditional UPDATE (one sender per row across processes), its
body rendered once and kept, then POSTed: webhooks with `X-Parallax-Event`,
`X-Parallax-Delivery` and, with a `secret`, `X-Parallax-Signature-256: sha256=<hex HMAC-SHA256
of the body>`; Slack with its own format; the culprit's pull request gets a GitHub comment. A
2xx marks it sent. Network errors, timeouts, 408, 429 and 5xx are retried with exponential
backoff (`BACKOFF_BASE_S` doubling, ±20 %) up to `MAX_ATTEMPTS`; any other answer (a 404 from
a deleted Slack hook, a 401) and the last failed attempt make it dead, with the reason kept in
`last_error` and shown on /notifications and in /metrics. Each row has its own timeout, so one
hung endpoint costs at most that, and the others are still sent.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
import time
from dataclasses import dataclass, field
from datetime import timedelta

import requests
from sqlalchemy import select, update

from app.core.clock import utcnow
from app.core.config import Settings, current_settings
from app.core.db import Database
from app.core.duties import Duty
from app.core.models import NotificationDelivery
from app.core.outbox import claim
from app.notify import github_comment, messages
from app.notify.outbox import queue_digests

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 6
BACKOFF_BASE_S = 30.0
BACKOFF_MAX_S = 3600.0
CLAIM_S = 120.0
TIMEOUT = (5.0, 10.0)
RETRYABLE = (408, 429)


@dataclass
class SendReport:
    sent: int = 0
    retried: int = 0
    dead: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _claim(db: Database, row_id: int) -> bool:
    return claim(db, NotificationDelivery, row_id, moment=utcnow(), lease_s=CLAIM_S,
                 still_due=(NotificationDelivery.state == "pending",))


def _finish(db: Database, row_id: int, **values: object) -> None:
    with db.session() as session:
        session.execute(update(NotificationDelivery).where(NotificationDelivery.id == row_id).values(**values))
        session.commit()


@dataclass(frozen=True)
class Outcome:
    """`sent`, `skipped`, `retry` or `dead`, with the reason for the last three."""

    state: str
    reason: str | None = None


def _classify(status: int, text: str) -> Outcome:
    if 200 <= status < 300:
        return Outcome("sent")
    reason = f"HTTP {status}: {text[:300]}"
    if status >= 500 or status in RETRYABLE:
        return Outcome("retry", reason)
    return Outcome("dead", reason)


def _post(http: requests.Session, url: str, body: bytes, headers: dict[str, str]) -> Outcome:
    try:
        response = http.post(url, data=body, headers=headers, timeout=TIMEOUT)
    except requests.RequestException as exc:
        return Outcome("retry", f"{type(exc).__name__}: {str(exc)[:300]}")
    return _classify(response.status_code, response.text)


def _deliver(settings: Settings, row: NotificationDelivery, body: str, http: requests.Session) -> Outcome:
    if row.kind == "github_comment":
        return _comment(settings, row, body, http)
    spec = next((s for s in settings.notifications if s.name == row.target), None)
    if spec is None:
        return Outcome("dead", f"target {row.target!r} is no longer configured in [[notifications]]")
    raw = body.encode()
    headers = {"Content-Type": "application/json", "User-Agent": "parallax-ci",
               "X-Parallax-Event": row.event, "X-Parallax-Delivery": str(row.id)}
    if spec.kind == "webhook" and spec.secret:
        headers["X-Parallax-Signature-256"] = signature(spec.secret, raw)
    return _post(http, spec.url, raw, headers)


def _comment(settings: Settings, row: NotificationDelivery, body: str, http: requests.Session) -> Outcome:
    if not settings.github_token:
        return Outcome("dead", "PARALLAX_GITHUB_TOKEN is not set")
    repository, sha = row.subject["repository"], row.subject["sha"]
    try:
        answer, number = github_comment.merged_pull_request(settings, repository, sha, http=http)
        if not answer.ok:
            return _classify(answer.status, answer.text)
        if number is None:
            return Outcome("skipped", f"no merged pull request contains {sha[:12]}")
        posted = github_comment.comment(settings, repository, number, json.loads(body)["body"], http=http)
        return _classify(posted.status, posted.text)
    except requests.RequestException as exc:
        return Outcome("retry", f"{type(exc).__name__}: {str(exc)[:300]}")


def _render(db: Database, settings: Settings, row_id: int) -> str | Outcome:
    """The kept body, or render and keep it now; an Outcome when there is nothing to send."""
    with db.session() as session:
        row = session.get(NotificationDelivery, row_id)
        assert row is not None
        if row.body is not None:
            return row.body
        try:
            document = messages.document(session, settings, row)
        except messages.Gone as exc:
            return Outcome("skipped", str(exc))
        if row.kind == "slack":
            body = messages.encode(messages.slack(document))
        elif row.kind == "github_comment":
            body = messages.encode({"body": messages.pull_request_comment(document, row.subject["sha"])})
        else:
            body = messages.encode(document)
        row.body = body
        session.commit()
        return body


def _backoff(attempts: int, base_s: float) -> timedelta:
    delay = min(BACKOFF_MAX_S, base_s * 2 ** max(0, attempts - 1))
    return timedelta(seconds=delay * random.uniform(0.8, 1.2))


def send_due(db: Database, settings: Settings, *, limit: int = 100, budget_s: float = 20.0,
             backoff_base_s: float = BACKOFF_BASE_S, http: requests.Session | None = None) -> SendReport:
    """Send the due rows, oldest first, within about `budget_s` seconds."""
    report = SendReport()
    started = time.monotonic()
    with db.session() as session:
        due = list(session.scalars(select(NotificationDelivery.id).where(
            NotificationDelivery.state == "pending", NotificationDelivery.next_attempt_at <= utcnow())
            .order_by(NotificationDelivery.id).limit(limit)))
    http = http or requests.Session()
    for row_id in due:
        if time.monotonic() - started > budget_s:
            break
        if not _claim(db, row_id):
            continue
        rendered = _render(db, settings, row_id)
        with db.session() as session:
            row = session.get(NotificationDelivery, row_id)
            assert row is not None
            session.expunge(row)
        outcome = rendered if isinstance(rendered, Outcome) else _deliver(settings, row, rendered, http)
        if outcome.state == "sent":
            _finish(db, row_id, state="sent", sent_at=utcnow(), last_error=None)
            report.sent += 1
        elif outcome.state == "skipped":
            _finish(db, row_id, state="skipped", sent_at=utcnow(), last_error=outcome.reason)
            report.skipped += 1
        elif outcome.state == "retry" and row.attempts < MAX_ATTEMPTS:
            _finish(db, row_id, next_attempt_at=utcnow() + _backoff(row.attempts, backoff_base_s),
                    last_error=outcome.reason)
            report.retried += 1
            report.errors.append(f"{row.target}: {outcome.reason}")
        else:
            reason = outcome.reason if outcome.state == "dead" else f"gave up after {row.attempts} attempts: {outcome.reason}"
            _finish(db, row_id, state="dead", last_error=reason)
            report.dead += 1
            report.errors.append(f"{row.target}: {reason}")
            log.warning("notification dead-lettered", extra={"px_delivery": row_id, "px_target": row.target,
                                                             "px_error": reason})
    return report


DUTIES = [Duty("notify-deliveries", lambda db: send_due(db, current_settings()), interval_s=2.0, lease_s=120.0),
          Duty("notify-digest", lambda db: queue_digests(db), interval_s=600.0, lease_s=120.0)]
