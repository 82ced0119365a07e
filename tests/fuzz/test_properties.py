"""Properties over generated input (hypothesis): the results-document validator only ever
accepts or refuses with a field, and the service answers every generated results document,
webhook body and claim body with something other than a server error, storing nothing for a
refused document. Example counts go to the test output."""
from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from app.core.models import Run
from runners.results import ResultsError, validate
from tests.fuzz.strategies import claim_bodies, results_documents, webhook_bodies
from tests.support.service_api import claim, queue_jobs, register
from tests.support.settings import make_settings

EXAMPLES = 60
SERVICE = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def test_the_validator_accepts_or_names_a_field(record_examples):
    seen = {"accepted": 0, "refused": 0}

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(results_documents())
    def check(document: dict[str, Any]) -> None:
        try:
            validate(document)
            seen["accepted"] += 1
        except ResultsError as exc:
            assert exc.field
            seen["refused"] += 1

    check()
    record_examples(f"hypothesis: results documents through the validator: {sum(seen.values())} "
                    f"({seen['accepted']} accepted, {seen['refused']} refused)")


def test_complete_answers_every_document_with_201_or_422(client, app, db, record_examples):
    headers = register(client, app)
    statuses: dict[int, int] = {}

    @SERVICE
    @given(results_documents())
    def check(document: dict[str, Any]) -> None:
        sha = hashlib.sha1(uuid.uuid4().bytes).hexdigest()
        queue_jobs(client, sha, suite="decode-throughput", platform="cpu")
        job = claim(client, headers).get_json()["job"]
        with db.session() as session:
            before = session.scalar(select(func.count()).select_from(Run))
        body = json.dumps(document).encode()
        response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=body, headers=headers)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code in (201, 422), response.get_data(as_text=True)
        if response.status_code == 422:
            assert response.get_json()["field"]
            with db.session() as session:
                assert session.scalar(select(func.count()).select_from(Run)) == before
            client.post(f"/api/v1/jobs/{job['id']}/fail", json={"reason": "fuzz"}, headers=headers)

    check()
    record_examples(f"hypothesis: results documents through /complete [{db.engine.dialect.name}]: "
                    f"{sum(statuses.values())} ({statuses})")


def test_claim_answers_every_body_without_a_server_error(client, app, db, record_examples):
    headers = register(client, app)
    statuses: dict[int, int] = {}

    @SERVICE
    @given(claim_bodies)
    def check(body: Any) -> None:
        response = client.post("/api/v1/jobs/claim", data=json.dumps(body), headers=headers,
                               content_type="application/json")
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code in (200, 204, 400, 422), response.get_data(as_text=True)

    check()
    record_examples(f"hypothesis: claim bodies [{db.engine.dialect.name}]: {sum(statuses.values())} ({statuses})")


def test_the_webhook_answers_every_signed_body_without_a_server_error(database_url, tmp_path, record_examples):
    from app.web import create_app
    secret = "fuzz-secret"
    flask_app = create_app(make_settings(database_url, github_webhook_secret=secret, data_dir=str(tmp_path)))
    client = flask_app.test_client()
    statuses: dict[int, int] = {}

    @SERVICE
    @given(webhook_bodies(), st.sampled_from(["push", "pull_request", "ping", "issues"]))
    def check(body: dict[str, Any], event: str) -> None:
        raw = json.dumps(body).encode()
        signature = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
        response = client.post("/webhooks/github", data=raw, content_type="application/json", headers={
            "X-GitHub-Event": event, "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": signature})
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code < 500, response.get_data(as_text=True)

    try:
        check()
    finally:
        flask_app.extensions["parallax.db"].engine.dispose()
    record_examples(f"hypothesis: webhook bodies [{database_url.split(':')[0]}]: {sum(statuses.values())} ({statuses})")
