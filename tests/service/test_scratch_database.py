"""The test session's PostgreSQL database is emptied between tests (tests/conftest.py): every
table, children before the rows they point at, and every id starting again at 1."""
from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import func, select

from app.core.db import Database
from app.core.models import Base, Commit, Job, Repository, Runner, Suite
from tests.conftest import _empty_all


def _fill(db: Database, n: int) -> None:
    with db.session() as session:
        repository = Repository(name=f"demo/engine-{n}", url="https://example.invalid/engine.git", default_branch="main")
        suite = Suite(name=f"decode-throughput-{n}", command=["true"])
        runner = Runner(name=f"r{n}", platform="rocm", token_hash=str(n) * 64)
        session.add_all([repository, suite, runner])
        session.flush()
        commit = Commit(repository_id=repository.id, sha="a" * 40)
        session.add(commit)
        session.flush()
        session.add(Job(repository_id=repository.id, commit_id=commit.id, suite_id=suite.id, platform="rocm",
                        runner_id=runner.id))  # a job pointing at a runner: its row must go first
        session.commit()


def test_emptying_removes_every_row_and_ids_start_again_at_1(postgres_url: str, _postgres_emptier: sa.Engine) -> None:
    db = Database(postgres_url)
    try:
        _fill(db, 1)
        _fill(db, 2)  # ids 2 on the second round
        _empty_all(_postgres_emptier)
        with db.session() as session:
            counts = {table.name: session.scalar(select(func.count()).select_from(table))
                      for table in Base.metadata.sorted_tables}
        assert not {name: n for name, n in counts.items() if n}, counts
        _fill(db, 3)
        with db.session() as session:
            assert [session.scalar(select(func.max(model.id))) for model in (Repository, Suite, Runner, Commit, Job)] \
                == [1, 1, 1, 1, 1]
    finally:
        db.engine.dispose()
