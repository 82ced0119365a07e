"""Claiming is race-free: many runners at once, every job claimed exactly once."""
import threading
from collections import Counter

import pytest
from sqlalchemy import func, select

from app.core.db import Database
from app.core.models import Job, JobAttempt, JobState, Repository, Runner, Suite
from app.jobs.queue import get_or_create_commit, try_claim

LABELS = {"platform": "cpu"}   # every seeded runner's


def seed(db: Database, jobs: int, runners: int) -> list[int]:
    with db.session() as session:
        repo = session.scalar(select(Repository))
        suite = session.scalar(select(Suite).where(Suite.name == "decode-throughput"))
        for i in range(jobs):
            commit = get_or_create_commit(session, repo, f"{i:040x}")
            session.add(Job(repository_id=repo.id, commit_id=commit.id, suite_id=suite.id, platform="cpu"))
        runner_rows = [Runner(name=f"r{i}", platform="cpu", labels=LABELS, token_hash=f"{i:064x}")
                       for i in range(runners)]
        session.add_all(runner_rows)
        session.flush()
        return [r.id for r in runner_rows]


def claim_all(db: Database, runner_ids: list[int]) -> tuple[Counter, list[BaseException]]:
    claimed: Counter = Counter()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(runner_id: int) -> None:
        try:
            while True:
                job = try_claim(db, runner_id, lease_s=600, platform="cpu", labels=LABELS)
                if job is None:
                    return
                with lock:
                    claimed[job.id] += 1
        except BaseException as exc:  # recorded and asserted on below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(rid,)) for rid in runner_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a claimer hung (deadlock?)"
    return claimed, errors


def claim_race(url: str, jobs: int, runners: int) -> tuple[Database, Counter]:
    from app.web import create_app
    from tests.support.settings import make_settings
    db = create_app(make_settings(url)).extensions["parallax.db"]
    claimed, errors = claim_all(db, seed(db, jobs, runners))
    assert errors == []
    assert len(claimed) == jobs and set(claimed.values()) == {1}
    return db, claimed


@pytest.mark.slow
def test_sixteen_threads_claim_500_jobs_exactly_once_on_postgres(postgres_url):
    db, _ = claim_race(postgres_url, 500, 16)
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(JobAttempt)) == 500
        assert session.scalar(select(func.count()).where(Job.state == JobState.running)) == 500
    db.engine.dispose()


@pytest.mark.slow
def test_eight_threads_claim_200_jobs_exactly_once_on_sqlite(sqlite_url):
    db, _ = claim_race(sqlite_url, 200, 8)
    db.engine.dispose()
