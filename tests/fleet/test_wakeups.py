"""A waiting claim is woken when a job for its platform is queued: PostgreSQL NOTIFY, or on
SQLite the committing process's own waiters and, through the signal file beside the database,
the other processes'. The claim waits far longer than the test's patience and its fallback poll
is longer still, so only the wake-up can make these pass; the patience itself is generous for a
loaded machine (a woken claim returns at once), and no duration is asserted."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import select

from app.core.models import Job, JobState, Repository, Runner
from app.jobs import queue, wakeups
from tests.support.settings import REPO_ROOT

PATIENCE_S = 60.0
CLAIM_WAIT_S = 2 * PATIENCE_S  # un-woken, a claim on SQLite looks again only at the end of its wait
FALLBACK_POLL_S = 10 * CLAIM_WAIT_S


def add_runner(db, platform: str = "cpu") -> int:  # type: ignore[no-untyped-def]
    with db.session() as session:
        runner = Runner(name=f"r-{platform}", platform=platform, labels={"platform": platform}, token_hash="0" * 64)
        session.add(runner)
        session.flush()
        return runner.id


def start_waiting_claim(db, runner_id: int, platform: str = "cpu") -> tuple[threading.Thread, list]:  # type: ignore[no-untyped-def]
    got: list = []
    thread = threading.Thread(target=lambda: got.append(
        queue.claim(db, runner_id, lease_s=60, wait_s=CLAIM_WAIT_S, platform=platform, poll_s=FALLBACK_POLL_S)),
        daemon=True)
    thread.start()
    found = wakeups.for_engine(db.engine)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if found.board.count() == 1 and (found.listener is None or found.listening()):
            break
        time.sleep(0.05)
    time.sleep(0.2)  # past its first (empty) look at the queue
    return thread, got


def queue_one(db, platform: str = "cpu") -> None:  # type: ignore[no-untyped-def]
    with db.session() as session:
        repository = session.scalar(select(Repository))
        queue.enqueue_matrix(session, repository, "c" * 40, suite_name="decode-throughput", platform=platform)


def test_a_waiting_claim_gets_a_job_queued_after_it_started_waiting(db) -> None:  # type: ignore[no-untyped-def]
    thread, got = start_waiting_claim(db, add_runner(db))
    queue_one(db)
    thread.join(PATIENCE_S)
    assert not thread.is_alive(), f"the waiting claim was not woken within {PATIENCE_S:g} s"
    assert got[0] is not None and got[0].state == JobState.running


def test_a_job_for_another_platform_does_not_end_the_wait(db) -> None:  # type: ignore[no-untyped-def]
    thread, got = start_waiting_claim(db, add_runner(db, "rocm"), platform="rocm")
    queue_one(db, platform="cuda")
    thread.join(1.5)
    assert thread.is_alive() and got == []
    with db.session() as session:
        assert session.scalar(select(Job.state)) == JobState.queued
    queue_one(db, platform="rocm")
    thread.join(PATIENCE_S)
    assert got and got[0] is not None and got[0].platform == "rocm"


QUEUE_FROM_ANOTHER_PROCESS = """
import sys
from sqlalchemy import select
from app.core.db import Database
from app.core.models import Repository
from app.jobs import queue
with Database(sys.argv[1]).session() as session:
    queue.enqueue_matrix(session, session.scalar(select(Repository)), "d" * 40, suite_name="decode-throughput",
                         platform="cpu")
"""


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # PostgreSQL: NOTIFY, the tests above
def test_on_sqlite_a_job_queued_by_another_process_wakes_a_waiting_claim(db) -> None:  # type: ignore[no-untyped-def]
    """Two gunicorn workers on one SQLite file: the webhook's worker queues, the other's claims wait."""
    thread, got = start_waiting_claim(db, add_runner(db))
    subprocess.run([sys.executable, "-c", QUEUE_FROM_ANOTHER_PROCESS, db.url], check=True, cwd=REPO_ROOT,
                   env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=120)
    thread.join(PATIENCE_S)
    assert not thread.is_alive(), f"the waiting claim was not woken within {PATIENCE_S:g} s of the other process's commit"
    assert got[0] is not None and got[0].state == JobState.running


def test_an_unwritable_signal_file_costs_only_the_wake_up(tmp_path) -> None:  # type: ignore[no-untyped-def]
    wakeups.signal_other_processes(str(tmp_path / "missing-directory" / "parallax.db-wakeup"), {"cpu"})
    assert not (tmp_path / "missing-directory").exists()
