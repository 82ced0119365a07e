"""Alert events reach the configured endpoints through the outbox: one signed webhook and one
Slack message per event, retries with backoff, a dead letter that blocks nothing else."""
from __future__ import annotations

import hashlib
import hmac
import json

from app.notify.sender import send_due
from tests.github.fake_github import Reply
from tests.notify.conftest import SECRET, delivery_rows, posts


def test_an_opened_alert_sends_exactly_one_signed_webhook(db, settings, endpoint, alert_id):
    send_due(db, settings)
    send_due(db, settings)
    (hook,) = posts(endpoint, "/hook")
    expected = "sha256=" + hmac.new(SECRET.encode(), hook.raw, hashlib.sha256).hexdigest()
    assert hook.headers["X-Parallax-Signature-256"] == expected
    assert hook.headers["X-Parallax-Event"] == "alert.opened"
    body = json.loads(hook.raw)
    assert body["event"] == "alert.opened" and body["url"] == f"http://parallax.test/alerts/{alert_id}"
    assert body["alert"]["id"] == alert_id and body["alert"]["changes"][0]["platform"] == "rocm"
    assert body["alert"]["explanation"]["summary"] == "sync_policy.war_barrier false → true on rocm"


def test_an_opened_alert_sends_exactly_one_slack_message_in_slacks_format(db, settings, endpoint, alert_id):
    send_due(db, settings)
    send_due(db, settings)
    (message,) = posts(endpoint, "/slack")
    assert "X-Parallax-Signature-256" not in message.headers
    assert message.json["text"].startswith("Parallax regression in demo/engine: decode-throughput output_throughput")
    section, context = message.json["blocks"]
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    assert "What changed: sync_policy.war_barrier false → true on rocm" in section["text"]["text"]
    assert f"<http://parallax.test/alerts/{alert_id}|Open in Parallax>" in context["elements"][0]["text"]


def test_a_server_error_is_retried_and_then_delivered(db, settings, endpoint, alert_id):
    endpoint.script = [Reply(status=503)]  # the first request, whichever target it is for
    first = send_due(db, settings, backoff_base_s=0.0)
    assert (first.retried, first.sent) == (1, 1)
    second = send_due(db, settings, backoff_base_s=0.0)
    assert second.sent == 1
    assert {row.state for row in delivery_rows(db).values()} == {"sent"}
    assert len(posts(endpoint, "/hook")) + len(posts(endpoint, "/slack")) == 3
