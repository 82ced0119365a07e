"""Capacity per route class: a full class answers 503 with Retry-After while the others (and the
health check) still answer; the limits are settings, refused when not positive numbers."""
from __future__ import annotations

import json

import pytest

from app.core.config import ConfigError, load_settings
from app.web import create_app
from app.web.capacity import class_limits, route_class
from tests.support.github import SECRET, webhook_headers
from tests.support.settings import make_settings

PUSH = json.dumps({"ref": "refs/heads/main", "before": "1" * 40, "after": "2" * 40, "commits": [],
                   "repository": {"full_name": "fleet/not-tracked"}}).encode()


def test_limits_come_from_the_environment() -> None:
    settings = load_settings({"PARALLAX_WEBHOOK_CONCURRENCY": "3", "PARALLAX_LONGPOLL_LIMIT": "2000",
                              "PARALLAX_CAPACITY_WAIT_S": "0.5", "PARALLAX_CLAIM_NOTIFY": "off"})
    assert class_limits(settings) == {"webhooks": 3, "runner": 8, "longpoll": 2000, "dashboard": 4}
    assert (settings.capacity_wait_s, settings.claim_notify, settings.claim_poll_s) == (0.5, False, None)
    assert load_settings({"PARALLAX_CLAIM_NOTIFY": "no", "PARALLAX_CLAIM_POLL_S": "2.5"}).claim_poll_s == 2.5


@pytest.mark.parametrize("name, value, problem", [
    ("PARALLAX_RUNNER_CONCURRENCY", "0", "must be positive"), ("PARALLAX_WEBHOOK_CONCURRENCY", "-2", "must be positive"),
    ("PARALLAX_DASHBOARD_CONCURRENCY", "many", "must be an integer"), ("PARALLAX_LONGPOLL_LIMIT", "1.5", "must be an integer"),
    ("PARALLAX_CLAIM_CONCURRENCY", "0", "must be positive"), ("PARALLAX_CAPACITY_WAIT_S", "0", "must be positive"),
    ("PARALLAX_CLAIM_POLL_S", "-1", "must be positive"), ("PARALLAX_CLAIM_POLL_S", "nan", "must be positive"),
    ("PARALLAX_CLAIM_NOTIFY", "maybe", "must be true or false")])
def test_a_bad_limit_is_refused_with_its_variable_named(name: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"{name} {problem}"):
        load_settings({name: value})


def test_routes_fall_into_classes() -> None:
    assert route_class("runner_api.claim_job") == "longpoll"
    assert route_class("runner_api.heartbeat") == "runner"
    assert route_class("webhooks.receive") == "webhooks"
    assert route_class("api.healthz") == "health"
    assert route_class("metrics.scrape") == "health"
    assert route_class("dashboard.index") == "dashboard"
    assert route_class(None) == "dashboard"


def test_a_full_class_is_refused_while_the_others_answer(database_url: str) -> None:
    app = create_app(make_settings(database_url, github_webhook_secret=SECRET, webhook_concurrency=2,
                                   capacity_wait_s=0.1))
    client = app.test_client()
    gates = app.extensions["parallax.gates"]
    assert gates.enter("webhooks") and gates.enter("webhooks")  # two deliveries in progress
    try:
        refused = client.post("/webhooks/github", data=PUSH, headers=webhook_headers("push", PUSH))
        assert refused.status_code == 503 and refused.headers["Retry-After"] == "1"
        assert "webhooks capacity" in refused.get_json()["detail"]
        assert client.get("/healthz").status_code == 200
        assert client.get("/").status_code == 200
    finally:
        gates.leave("webhooks")
        gates.leave("webhooks")
    accepted = client.post("/webhooks/github", data=PUSH, headers=webhook_headers("push", PUSH))
    assert accepted.status_code == 202
    app.extensions["parallax.db"].engine.dispose()
