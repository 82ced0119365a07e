"""The job state machine from a runner's side: no call a runner can make (heartbeat, logs,
complete, fail, hand back) moves a finished job, not even from the runner that finished it."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import pytest
from sqlalchemy import func, select, update

from app.auth.tokens import hash_token
from app.core.clock import utcnow
from app.core.errors import Conflict, Forbidden
from app.core.models import Job, JobLog, JobState, Run, Runner
from app.jobs import queue
from tests.support.service_api import SHA_A, claim, document, queue_jobs, raw, register

LEASE_S = 60
CAP = 1_000_000


@dataclass(frozen=True)
class Snapshot:
    state: JobState
    attempt: int
    max_attempts: int
    runner_id: int | None
    lease_expires_at: Any
    finished_at: Any
    failure_reason: str | None
    logs: int
    runs: int


def snapshot(db, job_id: int) -> Snapshot:  # type: ignore[no-untyped-def]
    with db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return Snapshot(job.state, job.attempt, job.max_attempts, job.runner_id, job.lease_expires_at,
                        job.finished_at, job.failure_reason,
                        session.scalar(select(func.count()).select_from(JobLog).where(JobLog.job_id == job_id)),
                        session.scalar(select(func.count()).select_from(Run).where(Run.job_id == job_id)))


OTHER_DOCUMENT = raw(document(context={"model": "another run"}))

# Every queue operation a runner's request reaches, with the attempt it names (None: omitted).
CALLS: dict[str, Callable[..., Any]] = {
    "heartbeat": lambda s, r, j, a: queue.heartbeat(s, r, j, LEASE_S, a),
    "logs": lambda s, r, j, a: queue.append_log(s, r, j, "late output\n", CAP, a),
    "complete with another document": lambda s, r, j, a: queue.complete(s, r, j, OTHER_DOCUMENT, CAP, a),
    "fail retryable": lambda s, r, j, a: queue.fail(s, r, j, "late failure", True, a),
    "fail for good": lambda s, r, j, a: queue.fail(s, r, j, "late failure", False, a),
    "hand back": lambda s, r, j, a: queue.fail(s, r, j, "shutting down", True, a, handback=True),
}


def runner_of(db, headers) -> Runner:  # type: ignore[no-untyped-def]
    token = headers["Authorization"].removeprefix("Bearer ")
    with db.session() as session:
        runner = session.scalar(select(Runner).where(Runner.token_hash == hash_token(token)))
        assert runner is not None
        return runner


def finish(client, app, db, how: str) -> tuple[int, Runner]:  # type: ignore[no-untyped-def]
    """A job the returned runner held and then finished `how`."""
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app)
    job = claim(client, headers).get_json()["job"]
    if how == "succeeded":
        response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers)
        assert response.status_code == 201
    elif how == "failed":
        response = client.post(f"/api/v1/jobs/{job['id']}/fail", json={"reason": "broken", "retryable": False},
                               headers=headers)
        assert response.status_code == 200
    else:  # cancelled: retried once, then cancelled while queued again
        client.post(f"/api/v1/jobs/{job['id']}/fail", json={"reason": "flaky", "retryable": True}, headers=headers)
        with db.session() as session:
            queue.request_cancel(session, session.get(Job, job["id"]))
    state = snapshot(db, job["id"]).state
    assert state.value == how
    return job["id"], runner_of(db, headers)


@pytest.mark.parametrize("how", ["succeeded", "failed", "cancelled"])
@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("name_attempt", [False, True], ids=["attempt omitted", "attempt named"])
def test_no_runner_call_moves_a_finished_job(client, app, db, how, call, name_attempt):
    job_id, runner = finish(client, app, db, how)
    before = snapshot(db, job_id)
    with pytest.raises(Conflict) as info:
        with db.session() as session:
            CALLS[call](session, runner, job_id, before.attempt if name_attempt else None)
    assert info.value.error == "lease_lost"
    assert snapshot(db, job_id) == before


@pytest.mark.parametrize("call", list(CALLS))
def test_a_runner_that_never_held_a_finished_job_is_refused(client, app, db, call):
    job_id, _ = finish(client, app, db, "succeeded")
    before = snapshot(db, job_id)
    stranger = runner_of(db, register(client, app, name="runner-2"))
    with pytest.raises(Forbidden):
        with db.session() as session:
            CALLS[call](session, stranger, job_id, None)
    assert snapshot(db, job_id) == before


def test_fail_after_complete_over_http_is_409_and_the_job_stays_succeeded(client, app, db):
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app)
    job = claim(client, headers).get_json()["job"]
    assert client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers).status_code == 201
    response = client.post(f"/api/v1/jobs/{job['id']}/fail", json={"reason": "late", "retryable": True},
                           headers=headers)
    assert response.status_code == 409 and response.get_json()["error"] == "lease_lost"
    heartbeat = client.post(f"/api/v1/jobs/{job['id']}/heartbeat", json={}, headers=headers)
    assert heartbeat.status_code == 409
    with db.session() as session:
        assert session.get(Job, job["id"]).state == JobState.succeeded


@pytest.mark.parametrize("call", list(CALLS))
def test_a_call_naming_an_earlier_attempt_is_refused_even_from_the_current_holder(client, app, db, call):
    """The runner lost attempt 1 (its lease expired) and then claimed the same job again as attempt
    2: a late call from its attempt-1 work names attempt 1 and must not touch attempt 2."""
    queue_jobs(client, SHA_A, suite="decode-throughput", platform="cpu")
    headers = register(client, app)
    job = claim(client, headers).get_json()["job"]
    with db.session() as session:
        session.execute(update(Job).where(Job.id == job["id"]).values(lease_expires_at=utcnow() - timedelta(seconds=1)))
    again = claim(client, headers).get_json()["job"]
    assert (again["id"], again["attempt"]) == (job["id"], 2)
    before = snapshot(db, job["id"])
    with pytest.raises(Conflict) as info:
        with db.session() as session:
            CALLS[call](session, runner_of(db, headers), job["id"], 1)
    assert info.value.error == "lease_lost"
    assert snapshot(db, job["id"]) == before
