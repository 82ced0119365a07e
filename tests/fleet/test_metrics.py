"""`GET /metrics`: Prometheus text with the queue, the job outcomes, webhook deliveries, duty
lag and request latency by route class."""
from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

from tests.support.service_api import SHA_B, claim, document, queue_jobs, register


def samples(client) -> dict[tuple[str, tuple], float]:  # type: ignore[no-untyped-def]
    response = client.get("/metrics")
    assert response.status_code == 200 and response.mimetype == "text/plain"
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.get_data(as_text=True)) for s in family.samples}


def test_queue_depth_and_oldest_age_per_platform(client) -> None:  # type: ignore[no-untyped-def]
    queue_jobs(client)
    found = samples(client)
    assert found[("parallax_queue_depth", (("platform", "cpu"),))] == 1
    assert found[("parallax_queue_depth", (("platform", "cuda"),))] == 2
    assert 0 <= found[("parallax_queue_oldest_age_seconds", (("platform", "cuda"),))] < 60


def test_claims_completes_and_failures_are_counted(client, app) -> None:  # type: ignore[no-untyped-def]
    queue_jobs(client, platform="cpu")
    queue_jobs(client, sha=SHA_B, platform="cpu")
    headers = register(client, app)
    first = claim(client, headers).get_json()["job"]
    assert client.post(f"/api/v1/jobs/{first['id']}/complete", json=document(), headers=headers).status_code == 201
    second = claim(client, headers).get_json()["job"]
    client.post(f"/api/v1/jobs/{second['id']}/fail", json={"reason": "boom", "retryable": False}, headers=headers)
    found = samples(client)
    assert found[("parallax_job_claims_total", ())] == 2
    assert found[("parallax_job_completes_total", ())] == 1
    assert found[("parallax_job_failures_total", (("outcome", "failed"),))] == 1


def test_request_latency_is_recorded_by_route_class(client) -> None:  # type: ignore[no-untyped-def]
    client.get("/healthz")
    client.post("/api/v1/jobs/claim", json={"wait_s": 0})  # 401, still a runner-API request
    text = client.get("/metrics").get_data(as_text=True)
    for route in ("health", "longpoll"):
        assert re.search(rf'parallax_request_duration_seconds_count{{route_class="{route}"}} [1-9]', text), route
