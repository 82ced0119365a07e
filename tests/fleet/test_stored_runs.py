"""Stored runs announce themselves after their transaction: the completing request writes one
`stored_run_hooks` row and touches no shared row, and the delivery (a duty) runs the hooks once
per run, in the transaction that deletes the row. Runs on SQLite and PostgreSQL."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy import func, select

from app.core import signals
from app.core.clock import utcnow
from app.core.models import DetectionState, Run, StoredRunHook
from app.detection.service import scan_dirty
from app.jobs.queue import DUTIES, deliver_stored_runs, runs_stored_since
from tests.support.service_api import SHA_A, SHA_B, claim, document, queue_jobs, raw, register


def complete_one(client, app, sha: str, name: str = "runner-1") -> int:  # type: ignore[no-untyped-def]
    queue_jobs(client, sha, suite="decode-throughput", platform="cpu")
    headers = register(client, app, "cpu", name=name)
    job = claim(client, headers).get_json()["job"]
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers)
    assert response.status_code == 201, response.get_json()
    return int(response.get_json()["run_id"])


def count(db, model) -> int:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return int(session.scalar(select(func.count()).select_from(model)))


def test_each_stored_run_is_delivered_once(client, app, db) -> None:  # type: ignore[no-untyped-def]
    delivered: list[int] = []

    def receiver(_session, run: Run) -> None:  # type: ignore[no-untyped-def]
        delivered.append(run.id)

    signals.run_stored.connect(receiver)
    try:
        first = complete_one(client, app, SHA_A)
        second = complete_one(client, app, SHA_B, name="runner-2")
        assert delivered == [] and count(db, StoredRunHook) == 2
        assert deliver_stored_runs(db, limit=1) == 1
        assert deliver_stored_runs(db) == 1
        assert deliver_stored_runs(db) == 0
    finally:
        signals.run_stored.disconnect(receiver)
    assert delivered == [first, second]
    assert count(db, StoredRunHook) == 0
    assert any(d.name == "stored-runs" and d.run is deliver_stored_runs for d in DUTIES)


def test_a_delivery_that_fails_leaves_the_run_to_the_next_one(client, app, db) -> None:  # type: ignore[no-untyped-def]
    def broken(_session, run: Run) -> None:  # type: ignore[no-untyped-def]
        raise RuntimeError("receiver crashed")

    complete_one(client, app, SHA_A)
    signals.run_stored.connect(broken)
    try:
        with pytest.raises(RuntimeError):
            deliver_stored_runs(db)
    finally:
        signals.run_stored.disconnect(broken)
    # Nothing the other receivers did in that transaction was kept, and the run is still pending.
    assert count(db, DetectionState) == 0 and count(db, StoredRunHook) == 1
    assert deliver_stored_runs(db) == 1
    assert count(db, DetectionState) == 3 and count(db, StoredRunHook) == 0


def test_the_detection_duty_delivers_before_it_scans(client, app, db) -> None:  # type: ignore[no-untyped-def]
    complete_one(client, app, SHA_A)
    report = scan_dirty(db)
    assert report.series == 3  # the run's three series were marked, then scanned
    assert count(db, StoredRunHook) == 0


def test_a_completion_does_not_wait_for_a_transaction_holding_its_series_row(client, app, db) -> None:  # type: ignore[no-untyped-def]
    """What made completions of one series take turns at fleet scale: each upserted the series'
    detection row inside its own transaction. With a transaction holding that row (as a slow
    completion or a scan would), another completion of the same series must still finish."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("SQLite serialises every writer anyway; row locks are PostgreSQL's")
    complete_one(client, app, SHA_A)
    deliver_stored_runs(db)
    queue_jobs(client, SHA_B, suite="decode-throughput", platform="cpu")
    headers = register(client, app, "cpu", name="runner-2")
    job = claim(client, headers).get_json()["job"]
    holder = db.engine.connect()
    transaction = holder.begin()
    holder.execute(sa.text("SELECT id FROM detection_state FOR UPDATE"))
    answers: list[int] = []
    thread = threading.Thread(target=lambda: answers.append(client.post(
        f"/api/v1/jobs/{job['id']}/complete", data=raw(document()), headers=headers).status_code), daemon=True)
    try:
        thread.start()
        thread.join(10)
        assert answers == [201], "the completion waited for the lock on its series' detection row"
    finally:
        transaction.rollback()
        holder.close()
        thread.join(30)


def test_a_stored_run_is_due_for_delivery_until_it_is_delivered(client, app, db) -> None:  # type: ignore[no-untyped-def]
    before = utcnow() - timedelta(seconds=1)
    complete_one(client, app, SHA_A)
    with db.session() as session:
        assert runs_stored_since(session, None) and runs_stored_since(session, before)
        assert not runs_stored_since(session, utcnow() + timedelta(seconds=1)), "stored before the last pass"
    assert deliver_stored_runs(db) == 1
    with db.session() as session:
        assert not runs_stored_since(session, None)
    assert next(d for d in DUTIES if d.name == "stored-runs").due is runs_stored_since
