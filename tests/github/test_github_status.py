"""Commit statuses: the outbox written by the queue hooks, and the sender talking to a local
recording server in GitHub's place (which can fail, rate-limit or hang)."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from app.core.config import use_settings
from app.core.models import CommitStatusUpdate, Repository
from app.github.status import send_due, set_status
from app.jobs.queue import deliver_stored_runs
from tests.github.fake_github import FakeGitHub, Reply
from tests.support.service_api import SHA_A, claim, document, queue_jobs, raw, register
from tests.support.settings import make_settings

TOKEN = "ghp-test-token"
# Connect, read timeouts for the sender in tests: generous, because a loaded CI machine can take
# over half a second to answer; only the hung-server test uses the short one.
PATIENT = (5.0, 10.0)
SHORT = (2.0, 0.5)


@pytest.fixture
def github():  # type: ignore[no-untyped-def]
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def settings(database_url, tmp_path, github):  # type: ignore[no-untyped-def]
    return make_settings(database_url, github_token=TOKEN, github_api_url=github.url,
                         public_url="https://parallax.example", data_dir=str(tmp_path))


def rows(db) -> list[CommitStatusUpdate]:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return list(session.scalars(select(CommitStatusUpdate).order_by(CommitStatusUpdate.id)))


def send(app, db, timeout: tuple[float, float] = PATIENT, **kw):  # type: ignore[no-untyped-def]
    return send_due(db, app.extensions["parallax.settings"], timeout=timeout, **kw)


def make_due(db) -> None:  # type: ignore[no-untyped-def]
    """Let time pass: every waiting row is due now."""
    with db.session() as session:
        session.query(CommitStatusUpdate).update(
            {"next_attempt_at": datetime.now(timezone.utc) - timedelta(seconds=1)})


def repo_id(db, name: str = "demo/engine") -> int:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return session.scalar(select(Repository.id).where(Repository.name == name))


def test_queued_job_sends_pending_with_context_and_dashboard_link(client, app, db, github):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="rocm")
    report = send(app, db)
    assert report.sent == 1
    request = github.requests[0]
    assert request.path == f"/repos/demo/engine/statuses/{SHA_A}"
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.json["state"] == "pending"
    assert request.json["context"] == "parallax/rocm/decode-throughput"
    assert request.json["target_url"] == f"https://parallax.example/commits/{SHA_A}"
    assert rows(db)[0].sent_at is not None


def test_stored_run_sends_success_with_the_headline_number(client, app, db, github):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app, "cpu")
    job = claim(client, headers).get_json()["job"]
    assert client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers).status_code == 201
    send(app, db)
    sent = [r.json for r in github.requests]
    assert [s["state"] for s in sent] == ["success"]  # the pending row was superseded before sending
    assert sent[0]["description"] == "output_throughput 1210 tok/s (median)"


def test_failed_job_sends_error(client, app, db, github):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app, "cpu")
    job = claim(client, headers).get_json()["job"]
    client.post(f"/api/v1/jobs/{job['id']}/fail", json={"reason": "CUDA OOM", "retryable": False}, headers=headers)
    send(app, db)
    assert github.requests[-1].json["state"] == "error"
    assert "CUDA OOM" in github.requests[-1].json["description"]


def test_failure_is_not_overwritten_by_a_later_success(app, db, github):
    with use_settings(app.extensions["parallax.settings"]), db.session() as session:
        cell = dict(repository_id=repo_id(db), sha=SHA_A, platform="rocm", suite="decode-throughput")
        set_status(session, **cell, state="failure", description="output_throughput -20% vs abc123")
        set_status(session, **cell, state="success", description="output_throughput 1000 tok/s (median)")
        set_status(session, **cell, state="pending", description="queued")
    send(app, db)
    assert [r.json["state"] for r in github.requests] == ["failure"]


def test_set_status_refuses_an_unknown_state(app, db):
    with use_settings(app.extensions["parallax.settings"]), db.session() as session:
        with pytest.raises(ValueError, match="state must be one of"):
            set_status(session, repository_id=repo_id(db), sha=SHA_A, platform="cpu", suite="gsm8k",
                       state="green", description="x")


def test_server_error_is_retried_with_backoff(client, app, db, github):
    github.script = [Reply(status=500, body={"message": "boom"})]
    queue_jobs(client, SHA_A, suite="gsm8k", platform="cuda")
    report = send(app, db)
    assert report.retried == 1 and report.sent == 0
    row = rows(db)[0]
    assert row.sent_at is None and row.attempts == 1 and "HTTP 500" in row.last_error
    assert send(app, db).sent == 0  # not due yet: waiting for its backoff
    make_due(db)
    assert send(app, db).sent == 1
    assert len(github.requests) == 2


def test_rate_limit_pauses_every_waiting_status_until_the_reset(client, app, db, github):
    reset = int(time.time()) + 3600
    github.script = [Reply(status=403, headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)},
                           body={"message": "API rate limit exceeded"})]
    queue_jobs(client, SHA_A, suite="decode-throughput")  # three platforms: three statuses
    report = send(app, db)
    assert len(github.requests) == 1  # stopped at the first rate-limited answer
    assert report.rate_limited_until == datetime.fromtimestamp(reset, tz=timezone.utc)
    for row in rows(db):
        assert row.sent_at is None and row.attempts == 0
        assert row.next_attempt_at.replace(tzinfo=timezone.utc) >= report.rate_limited_until
    assert send(app, db).sent == 0 and len(github.requests) == 1


def test_retry_after_is_honoured(client, app, db, github):
    github.script = [Reply(status=403, headers={"Retry-After": "120"}, body={"message": "secondary rate limit"})]
    queue_jobs(client, SHA_A, suite="gsm8k", platform="rocm")
    before = datetime.now(timezone.utc)
    send(app, db)
    row = rows(db)[0]
    assert row.next_attempt_at.replace(tzinfo=timezone.utc) >= before + timedelta(seconds=119)


def test_hung_server_times_out_and_is_retried(client, app, db, github):
    github.script = [Reply(hang_s=600)]
    queue_jobs(client, SHA_A, suite="gsm8k", platform="cuda")
    started = time.monotonic()
    report = send(app, db, timeout=SHORT)
    assert time.monotonic() - started < 60  # against the 600 s hang: generous for a loaded machine
    assert report.retried == 1
    assert "Timeout" in rows(db)[0].last_error


def test_client_error_is_not_retried(client, app, db, github):
    github.script = [Reply(status=422, body={"message": "No commit found for SHA"})]
    queue_jobs(client, SHA_A, suite="gsm8k", platform="cuda")
    report = send(app, db)
    assert report.gave_up == 1
    make_due(db)
    send(app, db)
    assert len(github.requests) == 1


def test_ingestion_does_not_wait_for_github(client, app, db, github):
    github.script = [Reply(hang_s=600)] * 10
    started = time.monotonic()
    queue_jobs(client, SHA_A)
    headers = register(client, app, "cpu")
    job = claim(client, headers).get_json()["job"]
    assert client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers).status_code == 201
    assert time.monotonic() - started < 60  # against the 600 s hang: generous for a loaded machine
    assert github.requests == []  # nothing talks to GitHub inside a request
    assert len(rows(db)) == 5  # five pending; the run's status is queued by the delivery of stored runs
    with use_settings(app.extensions["parallax.settings"]):
        assert deliver_stored_runs(db) == 1
    assert github.requests == []
    assert len(rows(db)) == 6  # five pending + one success, waiting in the outbox


def test_without_a_token_nothing_is_recorded(database_url, tmp_path):
    from app.web import create_app
    flask_app = create_app(make_settings(database_url, data_dir=str(tmp_path)))
    db = flask_app.extensions["parallax.db"]
    try:
        queue_jobs(flask_app.test_client(), SHA_A)
        assert rows(db) == []
    finally:
        db.engine.dispose()


def test_repository_without_an_owner_is_not_reported(app, db):
    with db.session() as session:
        session.add(Repository(name="local-engine", url="/srv/engine.git"))
    with use_settings(app.extensions["parallax.settings"]), db.session() as session:
        set_status(session, repository_id=repo_id(db, "local-engine"), sha=SHA_A, platform="cpu", suite="gsm8k",
                   state="pending", description="queued")
    assert rows(db) == []


def test_failure_is_not_overwritten_by_a_later_job_error(app, db, github):
    with use_settings(app.extensions["parallax.settings"]), db.session() as session:
        cell = dict(repository_id=repo_id(db), sha=SHA_A, platform="cuda", suite="gsm8k")
        set_status(session, **cell, state="failure", description="accuracy -4.1 points vs parent")
        set_status(session, **cell, state="error", description="job failed after 3 attempt(s): OOM")
    send(app, db)
    assert [r.json["state"] for r in github.requests] == ["failure"]


def test_headline_uses_the_first_metric_median_with_its_unit():
    from app.core.models import Measurement
    from app.github.status import headline
    accuracy = Measurement(id=1, metric="accuracy", unit="", samples=[0.41, 0.43, 0.42])
    assert headline([accuracy]) == "accuracy 0.42 (median)"


@pytest.mark.parametrize("reason", ["backfill", "bisect", "confirm"])
def test_jobs_parallax_queued_for_itself_post_no_status(app, db, reason):
    from app.core.models import JobReason, Suite
    from app.jobs import queue
    with db.session() as session:
        repository = session.get(Repository, repo_id(db))
        suite = session.scalar(select(Suite).where(Suite.name == "decode-throughput"))
        commit = queue.get_or_create_commit(session, repository, SHA_A)
        queue.enqueue(session, repository, commit, suite, "rocm", reason=JobReason(reason))
    assert rows(db) == []
