"""Queueing a cell that is already queued, running or done: deduplicated, and only a queued
job takes the more urgent priority."""
from __future__ import annotations

from sqlalchemy import select

from app.core.models import Job, JobState, Repository, Suite
from app.jobs.queue import enqueue, get_or_create_commit
from tests.support.service_api import SHA_A


def _cell(session):  # type: ignore[no-untyped-def]
    repository = session.scalar(select(Repository))
    suite = session.scalar(select(Suite).where(Suite.name == "decode-throughput"))
    return repository, get_or_create_commit(session, repository, SHA_A), suite


def test_a_more_urgent_request_raises_the_priority_of_the_queued_job(db):
    with db.session() as session:
        repository, commit, suite = _cell(session)
        first, created = enqueue(session, repository, commit, suite, "cpu", priority=0)
        again, created_again = enqueue(session, repository, commit, suite, "cpu", priority=5)
        assert created and not created_again and again.id == first.id and first.priority == 5


def test_a_running_job_keeps_its_priority_when_the_cell_is_requested_again(db):
    with db.session() as session:
        repository, commit, suite = _cell(session)
        job, _ = enqueue(session, repository, commit, suite, "cpu", priority=0)
        job.state = JobState.running
        session.flush()
        again, created = enqueue(session, repository, commit, suite, "cpu", priority=5)
        assert not created and again.id == job.id and session.get(Job, job.id).priority == 0
