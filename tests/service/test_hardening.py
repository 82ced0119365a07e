"""Issue 17: every bad input gets a 4xx, nothing is lost. One regression test per numbered
defect (the number is in each test's section), on SQLite and PostgreSQL."""
from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from sqlalchemy import func, select

from app.core.models import Commit, Job, JobLog, JobState, Run
from tests.support.service_api import SHA_A, admin_headers, claim, document, open_alert, queue_jobs, raw, register
from tests.support.settings import make_settings


def strict_json(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"invalid JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture
def held(client, app):  # type: ignore[no-untyped-def]
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app, name="holder")
    job = claim(client, headers).get_json()["job"]
    return job, headers


def metric(name: str = "tput", unit: str = "tok/s", samples: list[Any] | None = None) -> dict[str, Any]:
    return {"name": name, "unit": unit, "direction": "higher_is_better", "samples": samples or [1.0, 2.0]}


def complete(client, held, doc: dict[str, Any]):  # type: ignore[no-untyped-def]
    job, headers = held
    return client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(doc), headers=headers)


# ------------------------------------------------------------------ 1. NUL bytes

def test_1_a_log_chunk_with_nul_is_stored_with_the_nul_replaced(client, held, db):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/logs", data=b"before\x00after\n", headers=headers)
    assert response.status_code == 200
    with db.session() as session:
        assert session.scalar(select(JobLog.text)) == "before\ufffdafter\n"


def test_1_a_failure_reason_with_nul_fails_the_job_once_with_that_reason(client, held, db):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/fail", headers=headers,
                           json={"reason": "command exited with status 3\nboom\x00", "retryable": False})
    assert response.status_code == 200
    with db.session() as session:
        stored = session.get(Job, job["id"])
        assert stored.state == JobState.failed and stored.attempt == 1
        assert stored.failure_reason == "command exited with status 3\nboom\ufffd"


@pytest.mark.parametrize("where", ["name", "unit"])
def test_1_nul_in_a_metric_name_or_unit_is_422_naming_the_field(client, held, db, where):
    bad = metric(**{where: "tp\x00ut"})
    response = complete(client, held, document(metrics=[bad]))
    assert response.status_code == 422
    assert response.get_json()["field"] == f"metrics[0].{where}"
    assert "control character" in response.get_json()["detail"]
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 0


@pytest.mark.parametrize("body, field", [
    ({"name": "r\x00", "labels": {"platform": "cpu"}}, "name"),
    ({"name": "r", "labels": {"platform": "cp\x00u"}}, "labels.platform"),
])
def test_1_nul_in_a_runner_name_or_platform_is_422(client, app, body, field):
    from tests.support.service_api import registration_token
    response = client.post("/api/v1/runners", json=body,
                           headers={"Authorization": f"Bearer {registration_token(app)}"})
    assert response.status_code == 422
    assert response.get_json()["field"] == field


def test_1_nul_in_an_alert_note_is_stored_with_the_nul_replaced(client, db):
    alert_id = open_alert(db)
    response = client.patch(f"/api/v1/alerts/{alert_id}", json={"note": "flaky\x00"}, headers=admin_headers())
    assert response.status_code == 200
    assert response.get_json()["note"] == "flaky\ufffd"


def test_1_nul_in_a_query_parameter_is_422(client):
    response = client.get("/api/v1/alerts?platform=cp%00u")
    assert response.status_code == 422
    assert response.get_json()["field"] == "platform"


# ------------------------------------------------------------------ 2. limits from the columns

def test_2_a_metric_name_longer_than_its_column_is_422(client, held):
    response = complete(client, held, document(metrics=[metric(name="m" * 200)]))
    assert response.status_code == 422
    assert response.get_json()["field"] == "metrics[0].name"
    assert "limit of 128" in response.get_json()["detail"]


def test_2_a_unit_longer_than_its_column_is_422(client, held):
    response = complete(client, held, document(metrics=[metric(unit="u" * 33)]))
    assert response.status_code == 422
    assert response.get_json()["field"] == "metrics[0].unit"


def test_2_a_platform_label_longer_than_its_column_is_422(client, app):
    from tests.support.service_api import registration_token
    response = client.post("/api/v1/runners", json={"name": "r", "labels": {"platform": "p" * 65}},
                           headers={"Authorization": f"Bearer {registration_token(app)}"})
    assert response.status_code == 422
    assert response.get_json()["field"] == "labels.platform"


def test_2_nan_in_runner_facts_is_422(client, app):
    from tests.support.service_api import registration_token
    body = b'{"name": "r", "labels": {"platform": "cpu"}, "facts": {"gpu_temp": NaN}}'
    response = client.post("/api/v1/runners", data=body, content_type="application/json",
                           headers={"Authorization": f"Bearer {registration_token(app)}"})
    assert response.status_code == 422
    assert response.get_json()["field"] == "facts.gpu_temp"


def test_2_the_runner_side_limits_are_the_services_defaults():
    from app.core.config import Settings
    from app.core.limits import document_limits
    from runners.results import DEFAULT_LIMITS
    assert document_limits(Settings()) == DEFAULT_LIMITS


# ------------------------------------------------------------------ 3. metrics per document

def test_3_more_metrics_than_the_setting_is_422_and_creates_no_series(database_url):
    from flask.testing import FlaskClient

    from app.web import create_app
    flask_app = create_app(make_settings(database_url, max_metrics_per_document=3))
    try:
        client: FlaskClient = flask_app.test_client()
        queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
        headers = register(client, flask_app)
        job = claim(client, headers).get_json()["job"]
        doc = document(metrics=[metric(name=f"m{i}") for i in range(4)])
        response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(doc), headers=headers)
        assert response.status_code == 422
        assert response.get_json()["field"] == "metrics"
        assert "limit of 3" in response.get_json()["detail"]
    finally:
        flask_app.extensions["parallax.db"].engine.dispose()


# ------------------------------------------------------------------ 4. concurrent identical completes

@pytest.mark.postgres
def test_4_twenty_simultaneous_identical_completes_on_postgres_one_201_the_rest_200(postgres_url):
    import requests

    from app.web import create_app
    from tests.support.live_server import LiveServer
    flask_app = create_app(make_settings(postgres_url))
    client = flask_app.test_client()
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, flask_app)
    job = claim(client, headers).get_json()["job"]
    body = raw(document())
    statuses: list[int] = []
    start = threading.Barrier(20)
    try:
        with LiveServer(flask_app) as server:
            def call() -> None:
                start.wait()
                statuses.append(requests.post(f"{server.url}/api/v1/jobs/{job['id']}/complete", data=body,
                                              headers=headers, timeout=30).status_code)
            threads = [threading.Thread(target=call) for _ in range(20)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        assert sorted(statuses) == [200] * 19 + [201]
        with flask_app.extensions["parallax.db"].session() as session:
            assert session.scalar(select(func.count()).select_from(Run)) == 1
    finally:
        flask_app.extensions["parallax.db"].engine.dispose()


# ------------------------------------------------------------------ 5. integer overflow

def test_5_a_sample_of_10_to_the_400_is_422(client, held):
    job, headers = held
    text = raw(document(metrics=[metric()])).replace(b"[1.0, 2.0]", b"[1" + b"0" * 400 + b"]")
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=text, headers=headers)
    assert response.status_code == 422
    assert response.get_json()["field"] == "metrics[0].samples[0]"


def test_5_wait_s_of_10_to_the_400_is_422(client, app):
    headers = register(client, app)
    response = client.post("/api/v1/jobs/claim", data=b'{"wait_s": 1' + b"0" * 400 + b"}", headers=headers,
                           content_type="application/json")
    assert response.status_code == 422
    assert response.get_json()["field"] == "wait_s"


@pytest.mark.parametrize("path", ["/api/v1/jobs/2147483648", "/api/v1/jobs/2147483648/heartbeat"])
def test_5_a_job_id_past_32_bits_is_404(client, app, path):
    headers = register(client, app)
    response = client.get(path) if "heartbeat" not in path else client.post(path, json={}, headers=headers)
    assert response.status_code == 404


# ------------------------------------------------------------------ 6. series page and HTML errors

def test_6_a_metric_name_with_dollars_renders_on_the_series_page(client, held):
    assert complete(client, held, document(metrics=[metric(name="$x^{2}$ \\frac")])).status_code == 201
    response = client.get("/series", query_string={"repository": "demo/engine", "suite": "decode-throughput",
                                                   "metric": "$x^{2}$ \\frac"})
    assert response.status_code == 200
    assert "$x^{2}$ \\frac" in response.get_data(as_text=True)


def test_6_an_error_on_a_page_is_an_html_page(client):
    response = client.get("/series?repository=demo/engine&suite=s&metric=a%00b")
    assert response.status_code == 422
    assert response.mimetype == "text/html"
    assert "control character" in response.get_data(as_text=True)


# ------------------------------------------------------------------ 7. no Infinity in JSON

def test_7_the_series_of_huge_samples_is_valid_json(client, held):
    assert complete(client, held, document(metrics=[metric(samples=[1.7e308, 1.7e308, -1.7e308])])).status_code == 201
    response = client.get("/api/v1/series", query_string={"repository": "demo/engine", "suite": "decode-throughput",
                                                          "metric": "tput", "platform": "cpu"})
    assert response.status_code == 200
    summary = strict_json(response.get_data(as_text=True))["series"][0]["points"][0]["summary"]
    assert summary["mean"] == pytest.approx(1.7e308 / 3)
    assert summary["stdev"] is None  # it does not fit a double


# ------------------------------------------------------------------ 8. security headers

@pytest.mark.parametrize("path", ["/", "/api/v1/alerts", "/jobs/424242", "/healthz"])
def test_8_every_response_carries_the_security_headers(client, path):
    headers = client.get(path).headers
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Referrer-Policy"] == "no-referrer"


# ------------------------------------------------------------------ 10. chunked webhook bodies

def test_10_a_chunked_webhook_body_over_the_limit_is_413_when_the_limit_is_the_largest(database_url, tmp_path):
    import requests

    from app.web import create_app
    from tests.support.github import SECRET, webhook_headers
    from tests.support.live_server import LiveServer
    flask_app = create_app(make_settings(database_url, github_webhook_secret=SECRET, max_webhook_bytes=20_000,
                                         max_document_bytes=10_000, data_dir=str(tmp_path)))
    body = json.dumps({"zen": "x" * 50_000}).encode()
    try:
        with LiveServer(flask_app) as server:
            chunks = (body[i:i + 4096] for i in range(0, len(body), 4096))
            response = requests.post(f"{server.url}/webhooks/github", data=chunks,
                                     headers=webhook_headers("ping", body), timeout=10)
        assert response.status_code == 413
    finally:
        flask_app.extensions["parallax.db"].engine.dispose()


# ------------------------------------------------------------------ 11. loose types

def test_11_rerun_as_the_string_false_is_422(client):
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": SHA_A, "rerun": "false"},
                           headers=admin_headers())
    assert response.status_code == 422
    assert response.get_json()["field"] == "rerun"


def test_11_an_unknown_platform_without_a_suite_is_422_and_writes_nothing(client, db):
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": SHA_A, "platform": "tpu"},
                           headers=admin_headers())
    assert response.status_code == 422
    assert response.get_json()["field"] == "platform"
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(Commit)) == 0


@pytest.mark.parametrize("attempt", [1.9, "1", True])
def test_11_an_attempt_that_is_not_an_integer_is_422(client, held, attempt):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/heartbeat", json={"attempt": attempt}, headers=headers)
    assert response.status_code == 422
    assert response.get_json()["field"] == "attempt"


# ------------------------------------------------------------------ 9. revoking, expiry, reading

def test_9_the_admin_api_revokes_a_registration_token(client):
    created = client.post("/api/v1/registration-tokens", json={"note": "ci"}, headers=admin_headers()).get_json()
    response = client.post(f"/api/v1/registration-tokens/{created['id']}/revoke", headers=admin_headers())
    assert response.status_code == 200
    refused = client.post("/api/v1/runners", json={"name": "r", "labels": {"platform": "cpu"}},
                          headers={"Authorization": f"Bearer {created['token']}"})
    assert refused.status_code == 401


def test_9_the_admin_api_disables_a_runner(client, app):
    headers = register(client, app)
    runner_id = client.post("/api/v1/jobs/claim", json={}, headers=headers).status_code and 1
    assert client.post(f"/api/v1/runners/{runner_id}/disable", headers=admin_headers()).status_code == 200
    assert client.post("/api/v1/jobs/claim", json={}, headers=headers).status_code == 403


def test_9_the_admin_api_disables_a_user(client, db):
    from app.auth.tokens import create_user
    with db.session() as session:
        token = create_user(session, "ada", "admin")
    assert client.post("/api/v1/users/ada/disable", headers=admin_headers()).status_code == 200
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": SHA_A},
                           headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401 and "disabled" in response.get_json()["detail"]


def test_9_an_expired_registration_token_is_refused(client, db):
    from datetime import timedelta

    from sqlalchemy import update

    from app.auth.tokens import create_registration_token
    from app.core.clock import utcnow
    from app.core.models import RegistrationToken
    with db.session() as session:
        token = create_registration_token(session, expires_in=timedelta(hours=1))
    body = {"name": "r", "labels": {"platform": "cpu"}}
    assert client.post("/api/v1/runners", json=body, headers={"Authorization": f"Bearer {token}"}).status_code == 201
    with db.session() as session:
        session.execute(update(RegistrationToken).values(expires_at=utcnow() - timedelta(seconds=1)))
    response = client.post("/api/v1/runners", json=body, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401 and "expired" in response.get_json()["detail"]


def test_9_by_default_logs_are_readable_without_a_token(client, held):
    job, _ = held
    assert client.get(f"/api/v1/jobs/{job['id']}").status_code == 200


def test_9_when_reading_needs_a_token_logs_pages_and_api_refuse_anonymous_readers(database_url):
    import base64

    from app.web import create_app
    from tests.support.settings import ADMIN_TOKEN
    flask_app = create_app(make_settings(database_url, read_requires_token=True))
    try:
        client = flask_app.test_client()
        job = queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")[0]
        for path in (f"/api/v1/jobs/{job['id']}", f"/jobs/{job['id']}", "/", "/api/v1/alerts"):
            assert client.get(path).status_code == 401, path
            assert client.get(path, headers=admin_headers()).status_code == 200, path
        page = client.get("/")
        assert page.headers["WWW-Authenticate"].startswith("Basic")
        basic = base64.b64encode(f"reader:{ADMIN_TOKEN}".encode()).decode()
        assert client.get("/", headers={"Authorization": f"Basic {basic}"}).status_code == 200
        assert client.get("/healthz").status_code == 200
    finally:
        flask_app.extensions["parallax.db"].engine.dispose()
