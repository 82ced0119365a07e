"""Capacity per route class: a full class answers 503 with Retry-After while the others (and the
health check) still answer; the limits are settings, refused when not positive numbers."""
from __future__ import annotations

import json

import pytest

from app.core.config import ConfigError
from app.web import create_app
from app.web.capacity import Capacity, load_capacity, route_class
from tests.support.github import SECRET, webhook_headers
from tests.support.settings import make_settings

PUSH = json.dumps({"ref": "refs/heads/main", "before": "1" * 40, "after": "2" * 40, "commits": [],
                   "repository": {"full_name": "fleet/not-tracked"}}).encode()


def test_limits_come_from_the_environment() -> None:
    capacity = load_capacity({"PARALLAX_WEBHOOK_CONCURRENCY": "3", "PARALLAX_LONGPOLL_LIMIT": "2000",
                              "PARALLAX_CAPACITY_WAIT_S": "0.5", "PARALLAX_CLAIM_NOTIFY": "off"})
    assert capacity == Capacity(webhooks=3, longpoll=2000, capacity_wait_s=0.5, claim_notify=False)


@pytest.mark.parametrize("name, value", [("PARALLAX_RUNNER_CONCURRENCY", "0"), ("PARALLAX_DASHBOARD_CONCURRENCY", "many"),
                                         ("PARALLAX_CLAIM_POLL_S", "-1"), ("PARALLAX_CLAIM_NOTIFY", "maybe")])
def test_a_bad_limit_is_refused_with_its_variable_named(name: str, value: str) -> None:
    with pytest.raises(ConfigError, match=name):
        load_capacity({name: value})


def test_routes_fall_into_classes() -> None:
    assert route_class("runner_api.claim_job") == "longpoll"
    assert route_class("runner_api.heartbeat") == "runner"
    assert route_class("webhooks.receive") == "webhooks"
    assert route_class("api.healthz") == "health"
    assert route_class("metrics.scrape") == "health"
    assert route_class("dashboard.index") == "dashboard"
    assert route_class(None) == "dashboard"


def test_a_full_class_is_refused_while_the_others_answer(database_url: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PARALLAX_WEBHOOK_CONCURRENCY", "2")
    monkeypatch.setenv("PARALLAX_CAPACITY_WAIT_S", "0.1")
    app = create_app(make_settings(database_url, github_webhook_secret=SECRET))
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
