"""The runner protocol (DESIGN.md contract), one behaviour per test, on SQLite and PostgreSQL."""
import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from app.core.models import Job, JobAttempt, JobState, Measurement, Run, Runner
from tests.support.runner_harness import wait_for
from tests.support.service_api import SHA_A, SHA_B, claim, document, queue_jobs, raw, register


def expire_lease(db, job_id):
    from app.core.clock import utcnow as now
    with db.session() as session:
        session.execute(update(Job).where(Job.id == job_id).values(lease_expires_at=now() - timedelta(seconds=1)))


def count(db, model):
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(model))


# ------------------------------------------------------------------ registration

def test_registration_returns_a_token_stored_only_as_hash(client, app, db):
    from app.auth.tokens import create_registration_token
    with db.session() as session:
        reg = create_registration_token(session)
    response = client.post("/api/v1/runners", json={"name": "mi300x-1", "labels": {"platform": "rocm", "gpu": "MI300X"}},
                           headers={"Authorization": f"Bearer {reg}"})
    assert response.status_code == 201
    body = response.get_json()
    with db.session() as session:
        runner = session.get(Runner, body["id"])
        assert runner.platform == "rocm" and runner.labels["gpu"] == "MI300X"
        assert body["token"] not in runner.token_hash and len(runner.token_hash) == 64


def test_registration_without_token_is_401(client):
    response = client.post("/api/v1/runners", json={"name": "x", "labels": {"platform": "cpu"}})
    assert response.status_code == 401
    assert response.get_json()["error"] == "unauthorized"


def test_registration_with_wrong_token_is_401(client):
    response = client.post("/api/v1/runners", json={"name": "x", "labels": {"platform": "cpu"}},
                           headers={"Authorization": "Bearer pxr_wrong"})
    assert response.status_code == 401


def test_registration_needs_a_platform_label(client, app):
    from tests.support.service_api import registration_token
    response = client.post("/api/v1/runners", json={"name": "x", "labels": {}},
                           headers={"Authorization": f"Bearer {registration_token(app)}"})
    assert response.status_code == 422
    assert response.get_json()["field"] == "labels.platform"


def test_runner_token_cannot_register_runners(client, app):
    headers = register(client, app)
    response = client.post("/api/v1/runners", json={"name": "x", "labels": {"platform": "cpu"}}, headers=headers)
    assert response.status_code == 401


# ------------------------------------------------------------------ claim

def test_claim_without_token_is_401(client):
    assert client.post("/api/v1/jobs/claim", json={}).status_code == 401


def test_claim_with_unknown_token_is_401(client):
    response = client.post("/api/v1/jobs/claim", json={}, headers={"Authorization": "Bearer pxt_nope"})
    assert response.status_code == 401
    assert "unknown runner token" in response.get_json()["detail"]


def test_claim_with_malformed_json_is_400(client, app):
    headers = register(client, app)
    response = client.post("/api/v1/jobs/claim", data=b"{not json", headers=headers,
                           content_type="application/json")
    assert response.status_code == 400
    assert response.get_json()["error"] == "malformed_json"


def test_claim_returns_204_when_nothing_is_queued(client, app):
    headers = register(client, app)
    assert claim(client, headers).status_code == 204


def test_claim_only_takes_jobs_of_the_runner_platform(client, app):
    queue_jobs(client, SHA_A, suite="gsm8k")  # cuda + rocm only
    cpu = register(client, app, "cpu", name="cpu-box")
    assert claim(client, cpu).status_code == 204
    rocm = register(client, app, "rocm", name="rocm-box")
    job = claim(client, rocm).get_json()["job"]
    assert job["platform"] == "rocm" and job["suite"] == "gsm8k"


def test_claim_payload_has_the_contract_fields(client, app):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    job = claim(client, register(client, app)).get_json()["job"]
    for field in ("id", "attempt", "repository_url", "commit", "suite", "command", "timeout_s", "lease_expires_at"):
        assert field in job
    assert job["attempt"] == 1 and job["command"] == ["python", "-c", "print('decode')"]


def test_higher_priority_is_claimed_first(client, app, db):
    first = queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")[0]
    second = queue_jobs(client, SHA_B, suite="decode-throughput", platform="cpu")[0]
    with db.session() as session:
        session.get(Job, second["id"]).priority = 10
    headers = register(client, app)
    assert claim(client, headers).get_json()["job"]["id"] == second["id"]
    assert claim(client, headers).get_json()["job"]["id"] == first["id"]


def test_a_claimed_job_is_not_claimed_again(client, app):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    one, two = register(client, app, name="one"), register(client, app, name="two")
    assert claim(client, one).status_code == 200
    assert claim(client, two).status_code == 204


def test_claim_long_polls_until_a_job_arrives(client, app, db):
    import threading
    headers = register(client, app)

    def later():
        time.sleep(0.5)
        with app.app_context():
            with db.session() as session:
                from app.core.models import Repository
                from app.jobs import queue
                repo = session.scalar(select(Repository))
                queue.enqueue_matrix(session, repo, SHA_A, suite_name="decode-throughput", platform="cpu")

    threading.Thread(target=later).start()
    started = time.monotonic()
    response = claim(client, headers, wait_s=30)  # the job arrives about 0.5 s in: generous for a loaded machine
    assert response.status_code == 200
    assert time.monotonic() - started > 0.4  # it waited for the job


def test_a_long_poll_on_an_empty_queue_answers_204_when_its_wait_is_over(client, app):
    headers = register(client, app)
    started = time.monotonic()
    response = claim(client, headers, wait_s=1)
    assert response.status_code == 204
    assert 0.9 < time.monotonic() - started < 60


def test_a_long_poll_left_by_an_earlier_process_of_the_runner_takes_no_job(client, app, db):
    """A runner killed during a long-poll and started again: the old poll still waits in the
    service, and without the session check it would take the next job, held for its whole lease
    by a process that no longer exists."""
    import threading
    headers = register(client, app)
    stale: list = []
    waiting = threading.Thread(target=lambda: stale.append(
        client.post("/api/v1/jobs/claim", json={"wait_s": 3, "session": "process-1"}, headers=headers)))
    waiting.start()

    def session_of_runner() -> str | None:
        with db.session() as session:
            return session.scalar(select(Runner.claim_session))
    wait_for(lambda: session_of_runner() == "process-1", 30, "the first process's poll to start")
    restarted = client.post("/api/v1/jobs/claim", json={"wait_s": 0, "session": "process-2"}, headers=headers)
    assert restarted.status_code == 204
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    waiting.join(30)
    assert stale[0].status_code == 204
    job = client.post("/api/v1/jobs/claim", json={"wait_s": 0, "session": "process-2"}, headers=headers)
    assert job.status_code == 200 and job.get_json()["job"]["attempt"] == 1


def test_a_job_the_previous_process_was_running_is_retried_at_the_new_processs_first_claim(client, app, db):
    """A runner killed between the claim's answer and its own record of the job, then started
    again: the new process cannot fail the attempt back itself, and the job would wait out its
    lease. Its first claim (a new session) requeues the job, and takes it."""
    headers = register(client, app)
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    taken = client.post("/api/v1/jobs/claim", json={"wait_s": 0, "session": "process-1"}, headers=headers)
    assert taken.status_code == 200
    again = client.post("/api/v1/jobs/claim", json={"wait_s": 0, "session": "process-2"}, headers=headers)
    assert again.status_code == 200
    assert (again.get_json()["job"]["id"], again.get_json()["job"]["attempt"]) == (taken.get_json()["job"]["id"], 2)
    with db.session() as session:
        first = session.scalar(select(JobAttempt).where(JobAttempt.attempt == 1))
        assert first.outcome == "retry"
        reason = session.scalar(select(Job.failure_reason))
    assert "started again" in reason


def test_a_second_claim_of_the_same_process_leaves_its_running_job_alone(client, app, db):
    headers = register(client, app)
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    assert client.post("/api/v1/jobs/claim", json={"wait_s": 0, "session": "process-1"}, headers=headers).status_code == 200
    assert client.post("/api/v1/jobs/claim", json={"wait_s": 0, "session": "process-1"}, headers=headers).status_code == 204
    with db.session() as session:
        job = session.scalar(select(Job))
        assert (job.state, job.attempt) == (JobState.running, 1)


@pytest.mark.parametrize("value", [5, "", "x" * 65])
def test_a_claim_session_that_is_not_a_short_string_is_422(client, app, value):
    response = client.post("/api/v1/jobs/claim", json={"session": value}, headers=register(client, app))
    assert response.status_code == 422 and response.get_json()["field"] == "session"


def test_negative_wait_is_422(client, app):
    response = claim(client, register(client, app), wait_s=-1)
    assert response.status_code == 422 and response.get_json()["field"] == "wait_s"


def test_suite_labels_must_match_runner_labels(client, app, db):
    from app.core.models import Suite
    with db.session() as session:
        suite = session.scalar(select(Suite).where(Suite.name == "decode-throughput"))
        suite.labels = {"gpu": "MI300X"}
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="rocm")
    assert claim(client, register(client, app, "rocm", name="mi250", gpu="MI250")).status_code == 204
    assert claim(client, register(client, app, "rocm", name="mi300", gpu="MI300X")).status_code == 200


# ------------------------------------------------------------------ holder operations

@pytest.fixture
def held(client, app):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app, name="holder")
    job = claim(client, headers).get_json()["job"]
    return job, headers


def test_heartbeat_extends_the_lease(client, held):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/heartbeat", headers=headers)
    assert response.status_code == 200
    body = response.get_json()
    assert body["cancel"] is False and body["lease_expires_at"] >= job["lease_expires_at"]


def test_heartbeat_reports_cancel(client, held, db):
    job, headers = held
    with db.session() as session:
        session.get(Job, job["id"]).cancel_requested = True
    assert client.post(f"/api/v1/jobs/{job['id']}/heartbeat", headers=headers).get_json()["cancel"] is True


def test_unknown_job_is_404(client, held):
    _, headers = held
    for path in ("heartbeat", "logs", "complete", "fail"):
        response = client.post(f"/api/v1/jobs/999999/{path}", json={"reason": "x"}, headers=headers)
        assert response.status_code == 404, path


def test_another_runners_job_is_403(client, app, held):
    job, _ = held
    intruder = register(client, app, name="intruder")
    for path, kwargs in (("heartbeat", {}), ("logs", {"data": b"hi"}), ("complete", {"data": raw(document())}),
                         ("fail", {"json": {"reason": "x"}})):
        response = client.post(f"/api/v1/jobs/{job['id']}/{path}", headers=intruder, **kwargs)
        assert response.status_code == 403, path


def test_logs_are_appended_in_order(client, held, db):
    job, headers = held
    client.post(f"/api/v1/jobs/{job['id']}/logs", data=b"line one\n", headers=headers)
    client.post(f"/api/v1/jobs/{job['id']}/logs", data=b"line two\n", headers=headers)
    assert client.get(f"/api/v1/jobs/{job['id']}").get_json()["log"] == "line one\nline two\n"


def test_logs_are_capped_per_job(client, app, db):
    from app.web import create_app
    from tests.support.settings import make_settings
    settings = make_settings(app.extensions["parallax.settings"].database_url, log_cap_bytes=100)
    small = create_app(settings).test_client()
    queue_jobs(small, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(small, small.application)
    job = claim(small, headers).get_json()["job"]
    first = small.post(f"/api/v1/jobs/{job['id']}/logs", data=b"x" * 80, headers=headers).get_json()
    second = small.post(f"/api/v1/jobs/{job['id']}/logs", data=b"y" * 80, headers=headers).get_json()
    third = small.post(f"/api/v1/jobs/{job['id']}/logs", data=b"z" * 80, headers=headers).get_json()
    assert first == {"stored_bytes": 80, "truncated": False}
    assert second == {"stored_bytes": 20, "truncated": True}
    assert third == {"stored_bytes": 0, "truncated": True}
    log = small.get(f"/api/v1/jobs/{job['id']}").get_json()["log"]
    assert log.startswith("x" * 80 + "y" * 20) and "log truncated at 100 bytes" in log and "z" not in log


def test_a_cap_lowered_below_what_a_job_already_logged_stores_nothing_more(client, held, db):
    # The cap is configuration: a restart with a smaller log_cap_bytes meets jobs already past it.
    from app.jobs import queue
    job, headers = held
    assert client.post(f"/api/v1/jobs/{job['id']}/logs", data=b"x" * 80, headers=headers).status_code == 200
    with db.session() as session:
        runner = session.scalar(select(Runner).where(Runner.name == "holder"))
        assert queue.append_log(session, runner, job["id"], "y" * 10, 50) == (0, True)
    assert client.get(f"/api/v1/jobs/{job['id']}").get_json()["log"] == "x" * 80


def test_complete_stores_run_measurements_and_items(client, held, db):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers)
    assert response.status_code == 201
    with db.session() as session:
        run = session.get(Run, response.get_json()["run_id"])
        assert {m.metric: m.samples for m in run.measurements}["output_throughput"] == [1210.4, 1198.7, 1215.0]
        assert run.items[0].correct == [1, 0, 1]
        assert session.get(Job, job["id"]).state == JobState.succeeded


def test_identical_complete_retry_is_200_and_stores_one_run(client, held, db):
    job, headers = held
    first = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers)
    second = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers)
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.get_json()["run_id"] == second.get_json()["run_id"]
    assert count(db, Run) == 1 and count(db, Measurement) == 2


def test_a_different_document_after_completion_is_409(client, held, db):
    job, headers = held
    client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers)
    other = document(context={"model": "other"})
    assert client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(other), headers=headers).status_code == 409
    assert count(db, Run) == 1


def test_document_for_another_suite_is_422(client, held, db):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document(suite="gsm8k")), headers=headers)
    assert response.status_code == 422 and response.get_json()["field"] == "suite"
    assert count(db, Run) == 0


def test_complete_over_the_size_limit_is_413(client, held, db):
    job, headers = held
    huge = b"{" + b" " * 9_000_000 + b"}"
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=huge, headers=headers)
    assert response.status_code == 413
    assert response.get_json()["error"] == "payload_too_large"
    assert count(db, Run) == 0


def test_fail_retryable_requeues_with_next_attempt(client, held, db):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/fail", json={"reason": "OOM", "retryable": True}, headers=headers)
    assert response.get_json() == {"id": job["id"], "state": "queued", "attempt": 2}


def test_fail_not_retryable_fails_the_job(client, held, db):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/fail", json={"reason": "bad commit", "retryable": False},
                           headers=headers)
    assert response.get_json()["state"] == "failed"
    with db.session() as session:
        assert session.get(Job, job["id"]).failure_reason == "bad commit"


def test_retries_stop_at_the_attempt_limit(client, app, db):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app)
    states = []
    for _ in range(3):
        job = claim(client, headers).get_json()["job"]
        states.append(client.post(f"/api/v1/jobs/{job['id']}/fail", json={"reason": "flaky", "retryable": True},
                                  headers=headers).get_json()["state"])
    assert states == ["queued", "queued", "failed"]
    assert claim(client, headers).status_code == 204


def test_fail_needs_a_reason(client, held):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/fail", json={"retryable": True}, headers=headers)
    assert response.status_code == 422 and response.get_json()["field"] == "reason"


# ------------------------------------------------------------------ authentication

def test_a_runner_token_under_another_scheme_is_401(client, app):
    token = register(client, app)["Authorization"].removeprefix("Bearer ")
    for header in (f"Basic {token}", f"Token {token}", token):
        response = client.post("/api/v1/jobs/claim", json={}, headers={"Authorization": header})
        assert response.status_code == 401, header


def test_a_runner_is_seen_again_past_the_resolution_and_only_it(client, app, db):
    from app.auth.tokens import LAST_SEEN_RESOLUTION
    from app.core.clock import utcnow as now
    headers = register(client, app, name="busy")
    register(client, app, name="idle")
    long_ago = now() - 2 * LAST_SEEN_RESOLUTION
    with db.session() as session:
        session.execute(update(Runner).values(last_seen_at=long_ago))
    assert claim(client, headers).status_code == 204
    with db.session() as session:
        seen = {r.name: r.last_seen_at for r in session.scalars(select(Runner))}
    assert seen["busy"].replace(tzinfo=None) > long_ago.replace(tzinfo=None)
    assert seen["idle"].replace(tzinfo=None) == long_ago.replace(tzinfo=None)


def test_a_registration_token_revoked_by_its_value_registers_no_runner(client, app, db):
    from app.auth.tokens import create_registration_token, revoke_registration_token
    with db.session() as session:
        token = create_registration_token(session)
        session.commit()
    with db.session() as session:
        assert revoke_registration_token(session, token).revoked
        session.commit()
    response = client.post("/api/v1/runners", json={"name": "late", "labels": {"platform": "cpu"}},
                           headers={"Authorization": f"Bearer {token}"})
    assert response.status_code in (401, 403)
    assert count(db, Runner) == 0


# ------------------------------------------------------------------ lease loss

def test_expired_lease_requeues_with_next_attempt_and_late_complete_is_409(client, app, db):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    silent = register(client, app, name="silent")
    job = claim(client, silent).get_json()["job"]
    expire_lease(db, job["id"])  # the runner stopped heartbeating
    rescuer = register(client, app, name="rescuer")
    retried = claim(client, rescuer).get_json()["job"]
    assert (retried["id"], retried["attempt"]) == (job["id"], 2)
    assert client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=rescuer).status_code == 201
    late = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document(context={"late": True})),
                       headers=silent)
    assert late.status_code == 409 and late.get_json()["error"] == "lease_lost"
    with db.session() as session:
        runs = list(session.scalars(select(Run)))
        assert len(runs) == 1 and runs[0].attempt == 2 and "late" not in runs[0].context


def test_heartbeat_after_lease_loss_is_409(client, app, db):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app)
    job = claim(client, headers).get_json()["job"]
    expire_lease(db, job["id"])
    from app.jobs.queue import reap_expired
    with db.session() as session:
        assert reap_expired(session) == 1
    assert client.post(f"/api/v1/jobs/{job['id']}/heartbeat", headers=headers).status_code == 409


def test_stale_attempt_number_is_409(client, held):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/heartbeat", json={"attempt": 7}, headers=headers)
    assert response.status_code == 409


def test_lease_expiry_on_the_last_attempt_fails_the_job(client, app, db):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app)
    for _ in range(3):
        job = claim(client, headers).get_json()["job"]
        expire_lease(db, job["id"])
    from app.jobs.queue import reap_expired
    with db.session() as session:
        reap_expired(session)
        stored = session.get(Job, job["id"])
        assert stored.state == JobState.failed and "lease expired" in stored.failure_reason


# ------------------------------------------------------------------ admin queueing

def test_queue_jobs_needs_the_admin_token(client):
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": SHA_A})
    assert response.status_code == 401
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": SHA_A},
                           headers={"Authorization": "Bearer wrong"})
    assert response.status_code == 401


def test_queue_matrix_covers_suites_times_platforms(client):
    jobs = queue_jobs(client, SHA_A)
    assert sorted((j["suite"], j["platform"]) for j in jobs) == [
        ("decode-throughput", "cpu"), ("decode-throughput", "cuda"), ("decode-throughput", "rocm"),
        ("gsm8k", "cuda"), ("gsm8k", "rocm")]


def test_queueing_the_same_commit_twice_is_deduplicated(client):
    first = queue_jobs(client, SHA_A)
    second = queue_jobs(client, SHA_A)
    assert [j["id"] for j in first] == [j["id"] for j in second]
    assert not any(j["created"] for j in second)


def test_queue_rejects_a_short_sha(client):
    from tests.support.service_api import admin_headers
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": "abc123"},
                           headers=admin_headers())
    assert response.status_code == 422 and response.get_json()["field"] == "commit"


def test_queue_rejects_an_unknown_repository(client):
    from tests.support.service_api import admin_headers
    response = client.post("/api/v1/jobs", json={"repository": "nope/nope", "commit": SHA_A}, headers=admin_headers())
    assert response.status_code == 404


def test_queue_rejects_a_platform_the_suite_does_not_run_on(client):
    from tests.support.service_api import admin_headers
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": SHA_A, "suite": "gsm8k",
                                                 "platform": "cpu"}, headers=admin_headers())
    assert response.status_code == 422


def test_errors_are_json_with_error_and_detail(client):
    response = client.get("/api/v1/no-such-path")
    assert response.status_code == 404
    assert set(response.get_json()) >= {"error", "detail"}


def test_handback_requeues_without_using_an_attempt(client, app):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app)
    for expected_attempt in (2, 3, 4, 5):
        job = claim(client, headers).get_json()["job"]
        response = client.post(f"/api/v1/jobs/{job['id']}/fail",
                               json={"reason": "handed back: SIGTERM", "retryable": True, "handback": True},
                               headers=headers)
        assert response.get_json() == {"id": job["id"], "state": "queued", "attempt": expected_attempt}


def test_handback_must_be_a_boolean(client, held):
    job, headers = held
    response = client.post(f"/api/v1/jobs/{job['id']}/fail", json={"reason": "x", "handback": "yes"}, headers=headers)
    assert response.status_code == 422 and response.get_json()["field"] == "handback"
