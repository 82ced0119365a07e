"""Two transactions storing the same new commit at once: the second one waits for the first
(PostgreSQL's unique index), then reads its row instead of failing with a 500. Seen when 20
bisects of one range started at once (tests/bisect/test_api_accuracy.py)."""
from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Callable, TypeVar

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from app.core.db import Database
from app.core.models import Commit, CommitParent, Repository
from app.git.commit_graph import record_commits
from app.git.mirror import CommitInfo
from app.jobs.queue import get_or_create_commit
from tests.support.runner_harness import wait_for

T = TypeVar("T")
SHAS = [f"{i:040x}" for i in range(1, 5)]
INFOS = [CommitInfo(sha, (SHAS[i - 1],) if i else (), "a", datetime(2026, 1, 1, tzinfo=timezone.utc), f"c{i}")
         for i, sha in enumerate(SHAS)]


def repository_id(db: Database) -> int:
    with db.session() as session:
        repository = Repository(name="race/engine", url="file:///nowhere")
        session.add(repository)
        session.flush()
        return repository.id


def a_session_waits_on_a_lock(db: Database) -> bool:
    """Whether PostgreSQL shows a session of this database waiting on a lock. Each look is a
    transaction of its own: PostgreSQL keeps a transaction's statistics snapshot (pg_stat_activity)
    until it ends, so a second look in the same one would see the first one's."""
    query = text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'")
    with db.engine.connect() as connection:
        return bool(connection.execute(query).scalar())


def second_while_first_is_open(db: Database, first: Callable[[Session, Repository], object],
                               second: Callable[[Session, Repository], T]) -> T:
    """Run `first` and flush, start `second` in another session (it blocks on the unique key),
    then commit the first; returns what `second` returned (or raises what it raised)."""
    repo_id = repository_id(db)
    outcome: dict[str, object] = {}
    with db.session() as session_a:
        first(session_a, session_a.get(Repository, repo_id))
        session_a.flush()

        def run() -> None:
            with db.session() as session_b:
                try:
                    outcome["value"] = second(session_b, session_b.get(Repository, repo_id))
                except BaseException as exc:
                    outcome["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        # The second insert waits on the first transaction's row. Not a fixed sleep: a loaded machine
        # could reach the commit below before the second transaction started, and the test would
        # pass without the race it is about.
        wait_for(lambda: a_session_waits_on_a_lock(db), 60, "the second transaction to wait on a lock",
                 interval_s=0.05)
    thread.join(60)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def test_a_commit_created_concurrently_is_read_not_a_unique_violation(postgres_url: str) -> None:
    db = Database(postgres_url)
    try:
        commit = second_while_first_is_open(db, lambda s, r: get_or_create_commit(s, r, SHAS[0]),
                                            lambda s, r: get_or_create_commit(s, r, SHAS[0]).id)
        with db.session() as session:
            assert session.scalars(select(Commit.id).where(Commit.sha == SHAS[0])).all() == [commit]
    finally:
        db.engine.dispose()


def test_commits_recorded_concurrently_are_stored_once_with_their_parents(postgres_url: str) -> None:
    db = Database(postgres_url)
    try:
        # The first transaction knows only two bare commits (a job queued for them); the second
        # records the whole range with parents, as a bisect start does.
        known = second_while_first_is_open(
            db, lambda s, r: [get_or_create_commit(s, r, sha) for sha in SHAS[1:3]],
            lambda s, r: {sha: c.id for sha, c in record_commits(s, r, INFOS).items()})
        with db.session() as session:
            stored = dict(session.execute(select(Commit.sha, Commit.id)).all())
            assert stored == known and sorted(stored) == SHAS
            assert session.scalar(select(func.count()).select_from(CommitParent)) == len(SHAS) - 1
            assert all(session.scalars(select(Commit.graph_loaded)))
    finally:
        db.engine.dispose()
