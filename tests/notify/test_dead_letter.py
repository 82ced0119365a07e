"""A failing endpoint is retried with backoff, then dead-lettered with its reason, shown on
/notifications and in /metrics; a Slack URL that answers 404 is dead at once; neither keeps the
other targets from being told."""
from __future__ import annotations

import pytest

from app.core.config import NotificationSpec
from app.notify.sender import MAX_ATTEMPTS, send_due
from tests.github.fake_github import Reply
from tests.notify.conftest import EVENTS, SECRET, closed_port_url, delivery_rows, posts


@pytest.fixture
def targets(endpoint):  # type: ignore[no-untyped-def]
    return (NotificationSpec(name="unreachable", kind="webhook", url=closed_port_url(), events=EVENTS),
            NotificationSpec(name="gone-slack", kind="slack", url=f"{endpoint.url}/slack-gone", events=EVENTS),
            NotificationSpec(name="ops-webhook", kind="webhook", url=f"{endpoint.url}/hook", events=EVENTS,
                             secret=SECRET))


def test_an_unreachable_endpoint_is_retried_then_dead_lettered_without_blocking_others(db, settings, endpoint,
                                                                                       alert_id):
    endpoint.script = [Reply(status=404, body={"error": "no_service"})]  # Slack's answer for a deleted hook
    for _ in range(MAX_ATTEMPTS + 2):
        send_due(db, settings, backoff_base_s=0.0)
    rows = delivery_rows(db)
    assert rows["unreachable"].state == "dead" and rows["unreachable"].attempts == MAX_ATTEMPTS
    assert rows["unreachable"].last_error.startswith(f"gave up after {MAX_ATTEMPTS} attempts: ConnectionError")
    assert rows["gone-slack"].state == "dead" and rows["gone-slack"].attempts == 1
    assert rows["gone-slack"].last_error.startswith("HTTP 404")
    assert rows["ops-webhook"].state == "sent"
    assert len(posts(endpoint, "/hook")) == 1


def test_dead_letters_show_on_the_page_and_in_metrics(client, db, settings, endpoint, alert_id):
    endpoint.script = [Reply(status=404, body={"error": "no_service"})]
    for _ in range(MAX_ATTEMPTS + 2):
        send_due(db, settings, backoff_base_s=0.0)
    page = client.get("/notifications?state=dead").get_data(as_text=True)
    assert 'data-target="gone-slack"' in page and "HTTP 404" in page
    assert 'data-target="unreachable"' in page and "gave up after" in page
    assert 'data-target="ops-webhook"' not in page
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'parallax_notification_deliveries{state="dead"} 2.0' in metrics
    assert 'parallax_notification_deliveries{state="sent"} 1.0' in metrics
