"""The request path of POST /webhooks/github: signatures, limits, replays, and events that are
acknowledged without doing anything. Refused requests write nothing."""
from __future__ import annotations

import json
import threading

import pytest
import requests
from sqlalchemy import select

from app.core.models import WebhookDelivery
from app.web import webhooks as webhooks_endpoint
from tests.support.github import SECRET, count_rows, load_payload, post_webhook, push_payload, sign, webhook_headers
from tests.support.settings import make_settings


def _post(client, body: bytes, headers: dict[str, str]):  # type: ignore[no-untyped-def]
    return client.post("/webhooks/github", data=body, headers=headers)


@pytest.fixture
def ping_body() -> bytes:
    return json.dumps(load_payload("ping-payload.json")).encode()


def test_ping_is_answered_200(client, ping_body):
    response = _post(client, ping_body, webhook_headers("ping", ping_body))
    assert response.status_code == 200
    assert response.get_json()["status"] == "ok"


def test_missing_signature_is_401_and_writes_nothing(client, db, ping_body):
    before = count_rows(db)
    headers = webhook_headers("ping", ping_body)
    del headers["X-Hub-Signature-256"]
    response = _post(client, ping_body, headers)
    assert response.status_code == 401
    assert "missing" in response.get_json()["detail"]
    assert count_rows(db) == before


def test_wrong_secret_is_401_and_writes_nothing(client, db, ping_body):
    before = count_rows(db)
    response = _post(client, ping_body, webhook_headers("ping", ping_body, secret="not-the-secret"))
    assert response.status_code == 401
    assert "does not match" in response.get_json()["detail"]
    assert count_rows(db) == before


def test_signature_over_another_body_is_401_and_writes_nothing(client, db, ping_body):
    before = count_rows(db)
    headers = webhook_headers("ping", ping_body)
    tampered = ping_body.replace(b"Hello-World", b"Hello-Wxrld")
    response = _post(client, tampered, headers)
    assert response.status_code == 401
    assert count_rows(db) == before


def test_malformed_signature_header_is_401(client, ping_body):
    headers = webhook_headers("ping", ping_body)
    headers["X-Hub-Signature-256"] = "md5=abc"
    assert _post(client, ping_body, headers).status_code == 401


def test_malformed_json_with_valid_signature_is_400_and_writes_nothing(client, db):
    before = count_rows(db)
    body = b'{"zen": "unterminated'
    response = _post(client, body, webhook_headers("ping", body))
    assert response.status_code == 400
    assert "not valid JSON" in response.get_json()["detail"]
    assert count_rows(db) == before


def test_json_that_is_not_an_object_is_400(client):
    body = b"[1, 2, 3]"
    response = _post(client, body, webhook_headers("push", body))
    assert response.status_code == 400
    assert "JSON object" in response.get_json()["detail"]


def test_push_with_a_malformed_sha_is_400_naming_the_field(client, db, tracked):
    payload = load_payload("push-with-new-branch.payload.json")
    payload["after"] = "not-a-sha"
    before = count_rows(db)
    response = post_webhook(client, "push", payload)
    assert response.status_code == 400
    assert response.get_json()["field"] == "after"
    assert count_rows(db) == before


def test_body_over_the_limit_is_413_and_writes_nothing(database_url, tmp_path):
    from app.web import create_app
    settings = make_settings(database_url, github_webhook_secret=SECRET, max_webhook_bytes=1000,
                             data_dir=str(tmp_path))
    flask_app = create_app(settings)
    db = flask_app.extensions["parallax.db"]
    try:
        before = count_rows(db)
        body = json.dumps({"zen": "x" * 2000}).encode()
        response = _post(flask_app.test_client(), body, webhook_headers("ping", body))
        assert response.status_code == 413
        assert "1000" in response.get_json()["detail"]
        assert count_rows(db) == before
    finally:
        db.engine.dispose()


def test_without_a_configured_secret_every_delivery_is_refused(database_url, tmp_path, ping_body):
    from app.web import create_app
    flask_app = create_app(make_settings(database_url, data_dir=str(tmp_path)))
    try:
        response = _post(flask_app.test_client(), ping_body, webhook_headers("ping", ping_body))
        assert response.status_code == 503
        assert "PARALLAX_GITHUB_WEBHOOK_SECRET" in response.get_json()["detail"]
    finally:
        flask_app.extensions["parallax.db"].engine.dispose()


def test_missing_delivery_header_is_400(client, ping_body):
    headers = webhook_headers("ping", ping_body)
    del headers["X-GitHub-Delivery"]
    response = _post(client, ping_body, headers)
    assert response.status_code == 400
    assert "X-GitHub-Delivery" in response.get_json()["detail"]


def test_unknown_event_is_202_with_a_reason(client, db):
    body = json.dumps({"action": "created", "repository": {"full_name": "Codertocat/Hello-World"}}).encode()
    response = _post(client, body, webhook_headers("issues", body))
    assert response.status_code == 202
    assert response.get_json()["status"] == "ignored"
    assert "'issues'" in response.get_json()["reason"]


def test_tag_deletion_is_202_and_queues_nothing(client, db, tracked):
    response = post_webhook(client, "push", load_payload("push-payload.json"))
    assert response.status_code == 202
    assert "tag" in response.get_json()["reason"]
    rows = count_rows(db)
    assert rows["jobs"] == 0 and rows["commits"] == 0 and rows["branches"] == 0


def test_branch_deletion_is_202_with_a_reason(client, db, tracked):
    payload = load_payload("push-with-new-branch.payload.json")
    payload.update(before=payload["after"], after="0" * 40, deleted=True, created=False)
    response = post_webhook(client, "push", payload)
    assert response.status_code == 202
    assert "deletion" in response.get_json()["reason"]
    assert count_rows(db)["jobs"] == 0


def test_push_to_an_untracked_branch_is_202(client, tracked):
    payload = load_payload("push-with-new-branch.payload.json")
    payload["ref"] = "refs/heads/feature"
    response = post_webhook(client, "push", payload)
    assert response.status_code == 202
    assert "not tracked" in response.get_json()["reason"]


def test_push_for_an_untracked_repository_is_202(client):
    response = post_webhook(client, "push", load_payload("push-with-new-branch.payload.json"))
    assert response.status_code == 202
    assert "Codertocat/Hello-World" in response.get_json()["reason"]


def test_unhandled_pull_request_action_is_202(client, tracked):
    payload = load_payload("pull_request-opened.payload.json")
    payload["action"] = "labeled"
    response = post_webhook(client, "pull_request", payload)
    assert response.status_code == 202
    assert "labeled" in response.get_json()["reason"]


def test_handled_push_is_stored_pending_and_answered_202(client, db, tracked):
    response = post_webhook(client, "push", load_payload("push-with-new-branch.payload.json"), delivery="d-1")
    assert response.status_code == 202
    assert response.get_json()["status"] == "accepted"
    with db.session() as session:
        delivery = session.scalar(select(WebhookDelivery).where(WebhookDelivery.delivery_id == "d-1"))
        assert delivery.state == "pending" and delivery.event == "push"
        assert delivery.result is None and delivery.processed_at is None  # the background duty sets them
    assert count_rows(db)["jobs"] == 0  # processing happens in the background duty, not here


def test_an_ignored_delivery_is_recorded_processed_with_its_reason(client, db):
    response = post_webhook(client, "push", load_payload("push-with-new-branch.payload.json"), delivery="d-ignored")
    assert response.status_code == 202 and response.get_json()["status"] == "ignored"
    with db.session() as session:
        delivery = session.scalar(select(WebhookDelivery).where(WebhookDelivery.delivery_id == "d-ignored"))
        assert delivery.state == "ignored" and delivery.processed_at is not None
        assert delivery.result == response.get_json()["reason"] and "Codertocat/Hello-World" in delivery.result


def test_replayed_delivery_is_200_and_stores_nothing_new(client, db, tracked):
    payload = load_payload("push-with-new-branch.payload.json")
    assert post_webhook(client, "push", payload, delivery="replayed-1").status_code == 202
    before = count_rows(db)
    response = post_webhook(client, "push", payload, delivery="replayed-1")
    assert response.status_code == 200
    assert response.get_json()["status"] == "duplicate"
    assert count_rows(db) == before


def test_form_encoded_delivery_is_accepted(client):
    from urllib.parse import urlencode
    body = urlencode({"payload": json.dumps(load_payload("ping-payload.json"))}).encode()
    headers = webhook_headers("ping", body)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    assert _post(client, body, headers).status_code == 200


def test_signature_is_checked_on_raw_bytes(client):
    body = json.dumps(load_payload("ping-payload.json"), indent=4).encode()
    assert sign(body) != sign(json.dumps(json.loads(body)).encode())
    assert _post(client, body, webhook_headers("ping", body)).status_code == 200


def test_over_http_a_chunked_body_over_the_limit_is_413(database_url, tmp_path):
    import requests

    from app.web import create_app
    from tests.support.live_server import LiveServer
    flask_app = create_app(make_settings(database_url, github_webhook_secret=SECRET, max_webhook_bytes=1000,
                                         data_dir=str(tmp_path)))
    db = flask_app.extensions["parallax.db"]
    body = json.dumps({"zen": "x" * 5000}).encode()
    try:
        before = count_rows(db)
        with LiveServer(flask_app) as server:
            chunks = (body[i:i + 512] for i in range(0, len(body), 512))  # no Content-Length
            response = requests.post(f"{server.url}/webhooks/github", data=chunks,
                                     headers=webhook_headers("ping", body), timeout=10)
        assert response.status_code == 413
        assert count_rows(db) == before
    finally:
        db.engine.dispose()


def test_over_http_a_signed_ping_is_200(live_server):
    import requests
    body = json.dumps(load_payload("ping-payload.json")).encode()
    response = requests.post(f"{live_server.url}/webhooks/github", data=body,
                             headers=webhook_headers("ping", body), timeout=10)
    assert response.status_code == 200


def test_two_simultaneous_deliveries_with_one_id_store_one_row(app, db, live_server, monkeypatch):
    # Both requests are held after their "already received?" look-up until the other has made
    # it too (PostgreSQL), so only the unique delivery id can stop the second insert. SQLite
    # serialises the two transactions (BEGIN IMMEDIATE): the second waits and sees the first.
    real_classify = webhooks_endpoint.classify
    both_looked = threading.Barrier(2)

    def classify_after_both_looked(*args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            both_looked.wait(timeout=3)
        except threading.BrokenBarrierError:
            pass
        return real_classify(*args, **kwargs)

    monkeypatch.setattr(webhooks_endpoint, "classify", classify_after_both_looked)
    ping_body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    headers = webhook_headers("ping", ping_body, delivery="same-delivery-id")
    answers: list[requests.Response] = []

    def deliver() -> None:
        answers.append(requests.post(f"{live_server.url}/webhooks/github", data=ping_body, headers=headers, timeout=30))

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted((a.status_code, a.json()["status"]) for a in answers) == [(200, "duplicate"), (200, "ok")]
    with db.session() as session:
        rows = session.scalars(select(WebhookDelivery).where(WebhookDelivery.delivery_id == "same-delivery-id")).all()
    assert len(rows) == 1


def test_a_repository_with_its_own_secret_needs_deliveries_signed_with_it(client, db, tracked, upstream):
    from app.core.models import Repository
    own = "repository-own-secret-123"
    with db.session() as session:
        session.get(Repository, tracked).webhook_secret = own
    base = upstream.commit()
    body = json.dumps(push_payload(base, base, [base])).encode()
    with_global = client.post("/webhooks/github", data=body, headers=webhook_headers("push", body))
    assert with_global.status_code == 401
    with_own = client.post("/webhooks/github", data=body, headers=webhook_headers("push", body, secret=own))
    assert with_own.status_code == 202, with_own.get_json()


def test_a_repository_without_its_own_secret_falls_back_to_the_global_one(client, db, tracked, upstream):
    base = upstream.commit()
    assert post_webhook(client, "push", push_payload(base, base, [base])).status_code == 202


def test_only_a_repository_secret_is_enough_for_its_deliveries(database_url, tmp_path, upstream):
    from app.core.models import Repository
    from app.web import create_app
    from tests.support.github import REPO_NAME
    app = create_app(make_settings(database_url, github_webhook_secret=None, data_dir=str(tmp_path / "data")))
    db = app.extensions["parallax.db"]
    with db.session() as session:
        session.add(Repository(name=REPO_NAME, url=str(upstream.path), default_branch="master",
                               webhook_secret="only-this-repository-1"))
    base = upstream.commit()
    body = json.dumps(push_payload(base, base, [base])).encode()
    client = app.test_client()
    ok = client.post("/webhooks/github", data=body, headers=webhook_headers("push", body, secret="only-this-repository-1"))
    assert ok.status_code == 202, ok.get_json()
    other = json.dumps({"zen": "hi", "hook_id": 1}).encode()
    refused = client.post("/webhooks/github", data=other, headers=webhook_headers("ping", other))
    assert refused.status_code == 503 and "PARALLAX_GITHUB_WEBHOOK_SECRET" in refused.get_json()["detail"]
    db.engine.dispose()
