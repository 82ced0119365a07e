"""Strings that are not valid Unicode — a JSON `\\ud800` escape, a lone surrogate — in a field of
any request body get a 4xx naming that field, never a 500, and nothing is stored."""
from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from typing import Any

import pytest
from sqlalchemy import func, select

from app.core.models import Job, Measurement, Run, Runner, WebhookDelivery
from tests.support.service_api import SHA_A, admin_headers, claim, document, open_alert, queue_jobs, register, registration_token
from tests.support.settings import make_settings

BAD = "x\ud800y"  # json.dumps writes it as the escape "x\\ud800y"


def post(client: Any, path: str, body: Any, headers: dict[str, str], method: str = "post") -> Any:
    raw = json.dumps(body)
    assert "\\ud800" in raw
    return getattr(client, method)(path, data=raw, content_type="application/json", headers=headers)


def assert_names(response: Any, field: str) -> None:
    assert 400 <= response.status_code < 500, response.get_data(as_text=True)
    body = response.get_json()
    assert body["field"] == field, body
    assert "Unicode" in body["detail"]


def count(db: Any, model: type) -> int:
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


@pytest.mark.parametrize("body, field", [
    ({"name": BAD, "labels": {"platform": "cpu"}}, "name"),
    ({"name": "r", "labels": {"platform": BAD}}, "labels.platform"),
    ({"name": "r", "labels": {"platform": "cpu", BAD: "1"}}, "labels.x\\ud800y"),
])
def test_runner_registration(client: Any, app: Any, db: Any, body: dict[str, Any], field: str) -> None:
    headers = {"Authorization": f"Bearer {registration_token(app)}"}
    assert_names(post(client, "/api/v1/runners", body, headers), field)
    assert count(db, Runner) == 0


@pytest.mark.parametrize("change, field", [
    ({"metrics": [{"name": BAD, "unit": "tok/s", "direction": "higher_is_better", "samples": [1.0]}]}, "metrics[0].name"),
    ({"metrics": [{"name": "m", "unit": BAD, "direction": "higher_is_better", "samples": [1.0]}]}, "metrics[0].unit"),
    ({"context": {BAD: 1}}, "context.x\\ud800y"),
    ({"context": {"model": BAD}}, "context.model"),
    ({"environment": {"platform": "cpu", "device": BAD}}, "environment.device"),
])
def test_a_results_document(client: Any, app: Any, db: Any, change: dict[str, Any], field: str) -> None:
    headers = register(client, app)
    queue_jobs(client, suite="decode-throughput", platform="cpu")
    job = claim(client, headers).get_json()["job"]
    response = post(client, f"/api/v1/jobs/{job['id']}/complete", document(**change), headers)
    assert response.status_code == 422
    assert_names(response, field)
    assert count(db, Run) == 0 and count(db, Measurement) == 0


def test_a_failure_reason(client: Any, app: Any, db: Any) -> None:
    headers = register(client, app)
    queue_jobs(client, suite="decode-throughput", platform="cpu")
    job = claim(client, headers).get_json()["job"]
    assert_names(post(client, f"/api/v1/jobs/{job['id']}/fail", {"reason": BAD}, headers), "reason")
    with db.session() as session:
        assert session.get(Job, job["id"]).state.value == "running"


@pytest.mark.parametrize("body, field", [
    ({"repository": BAD, "commit": SHA_A}, "repository"),
    ({"repository": "demo/engine", "commit": SHA_A, "suite": BAD}, "suite"),
    ({"repository": "demo/engine", "commit": SHA_A, "platform": BAD}, "platform"),
])
def test_queueing_jobs(client: Any, db: Any, body: dict[str, Any], field: str) -> None:
    assert_names(post(client, "/api/v1/jobs", body, admin_headers()), field)
    assert count(db, Job) == 0


def test_a_registration_token_note(client: Any) -> None:
    assert_names(post(client, "/api/v1/registration-tokens", {"note": BAD}, admin_headers()), "note")


def test_an_alert_note(client: Any, db: Any) -> None:
    alert_id = open_alert(db)
    assert_names(post(client, f"/api/v1/alerts/{alert_id}", {"note": BAD}, admin_headers(), method="patch"), "note")


@pytest.mark.parametrize("field", ["metric", "suite", "platform", "repository"])
def test_a_bisect_request(client: Any, field: str) -> None:
    body = {"repository": "demo/engine", "suite": "decode-throughput", "metric": "output_throughput",
            "platform": "rocm", "good": "a" * 40, "bad": "b" * 40, field: BAD}
    assert_names(post(client, "/api/v1/bisects", body, admin_headers()), field)


@pytest.mark.parametrize("body, field", [
    ({"ref": BAD, "after": "b" * 40, "repository": {"full_name": "demo/engine"}}, "ref"),
    ({"ref": "refs/heads/main", "repository": {"full_name": BAD}}, "repository.full_name"),
    ({"action": "opened", "pull_request": {"title": BAD}, "repository": {"full_name": "demo/engine"}},
     "pull_request.title"),
])
def test_a_webhook_field(database_url: str, tmp_path: Any, body: dict[str, Any], field: str) -> None:
    from app.web import create_app
    secret = "unicode-secret"
    flask_app = create_app(make_settings(database_url, github_webhook_secret=secret, data_dir=str(tmp_path)))
    raw = json.dumps(body).encode()
    signature = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    try:
        response = flask_app.test_client().post("/webhooks/github", data=raw, content_type="application/json", headers={
            "X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": signature})
        assert response.status_code == 400
        assert_names(response, field)
        assert count(flask_app.extensions["parallax.db"], WebhookDelivery) == 0
    finally:
        flask_app.extensions["parallax.db"].engine.dispose()
