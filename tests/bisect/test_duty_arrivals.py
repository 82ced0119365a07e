"""The bisect and pull-request duties run as soon as their work arrives (`Duty.due`): a bisect's
round that landed, a run stored or a comparison a failed job marked; not on anything older
than their last pass, and not on a finished bisect or comparison."""
from __future__ import annotations

from datetime import timedelta

import pytest

from app.bisect import service as bisect_service
from app.core.clock import utcnow
from app.core.models import Bisect, BisectState, Commit, Job, JobState, PullComparison, PullRequest, Repository, Suite
from app.pulls import comparisons


@pytest.fixture
def cell(db):  # type: ignore[no-untyped-def]
    """A repository with two commits and a suite: (repository id, good id, bad id, suite id)."""
    with db.session() as session:
        repository = Repository(name="demo/arrivals", url="https://example.invalid/arrivals.git", default_branch="main")
        suite = Suite(name="decode-throughput-arrivals", command=["true"])
        session.add_all([repository, suite])
        session.flush()
        good, bad = Commit(repository_id=repository.id, sha="a" * 40), Commit(repository_id=repository.id, sha="b" * 40)
        session.add_all([good, bad])
        session.flush()
        return repository.id, good.id, bad.id, suite.id


def add_bisect_job(db, cell, finished_at, state=BisectState.running) -> int:  # type: ignore[no-untyped-def]
    repository_id, good_id, bad_id, suite_id = cell
    with db.session() as session:
        bisect = Bisect(repository_id=repository_id, suite="decode-throughput-arrivals", metric="m", platform="rocm",
                        good_commit_id=good_id, bad_commit_id=bad_id, state=state)
        session.add(bisect)
        session.flush()
        session.add(Job(repository_id=repository_id, commit_id=bad_id, suite_id=suite_id, platform="rocm",
                        bisect_id=bisect.id, state=JobState.succeeded if finished_at else JobState.running,
                        finished_at=finished_at))
        return bisect.id


def bisect_due(db, since) -> bool:  # type: ignore[no-untyped-def]
    duty = next(d for d in bisect_service.DUTIES if d.name == "bisect")
    with db.session() as session:
        return duty.due(session, since)


def test_a_round_that_landed_since_the_last_pass_makes_the_bisect_duty_due(db, cell):
    now = utcnow()
    add_bisect_job(db, cell, finished_at=now)
    assert bisect_due(db, None) and bisect_due(db, now - timedelta(seconds=1))


def test_a_round_that_landed_before_the_last_pass_does_not(db, cell):
    now = utcnow()
    add_bisect_job(db, cell, finished_at=now - timedelta(seconds=5))
    assert not bisect_due(db, now)


def test_a_job_still_running_or_of_a_finished_bisect_does_not(db, cell):
    now = utcnow()
    add_bisect_job(db, cell, finished_at=None)
    add_bisect_job(db, cell, finished_at=now, state=BisectState.done)
    assert not bisect_due(db, None)


def pull_due(db, since) -> bool:  # type: ignore[no-untyped-def]
    duty = next(d for d in comparisons.DUTIES if d.name == "pull-requests")
    with db.session() as session:
        return duty.due(session, since)


def add_comparison(db, cell, state: str, dirty: bool) -> None:  # type: ignore[no-untyped-def]
    repository_id, good_id, bad_id, _ = cell
    with db.session() as session:
        pull = PullRequest(repository_id=repository_id, number=7, base_branch="main", head_commit_id=bad_id)
        session.add(pull)
        session.flush()
        session.add(PullComparison(pull_request_id=pull.id, head_commit_id=bad_id, base_commit_id=good_id,
                                   state=state, dirty=dirty))


def test_a_comparison_marked_while_measuring_makes_the_pull_request_duty_due(db, cell):
    add_comparison(db, cell, "measuring", dirty=True)
    assert pull_due(db, utcnow())


def test_a_clean_or_finished_comparison_does_not(db, cell):
    add_comparison(db, cell, "done", dirty=True)
    assert not pull_due(db, None)
