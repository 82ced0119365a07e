"""The senders call GitHub outside any database transaction: on SQLite a transaction holds the
file's write lock, so a send that waited on GitHub inside one would hold every writer of every
process for as long as GitHub took to answer (up to the 10-second timeout)."""
from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import update
from sqlalchemy.engine import make_url

from app.core.models import CommitStatusUpdate, PullRequestWrite
from tests.pulls.test_pull_github import unsent
from tests.support.pull_runners import Fleet, NoiseModel


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


def test_no_write_to_github_holds_the_database(service, github, branch):
    base, head = branch()
    with Fleet(service.app, NoiseModel(seed=5)):
        service.open_pr("opened", head, base)
        service.settled()
        service.until(lambda: unsent(service.db) == 0, "every write sent")
    # The runners are gone: from here on the senders are the only writers, so a lock that GitHub
    # sees while it answers is theirs. Every write and status goes out once more.
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    with service.db.session() as session:
        for model in (PullRequestWrite, CommitStatusUpdate):
            session.execute(update(model).values(sent_at=None, attempts=0, next_attempt_at=past))
    path = make_url(service.settings.database_url).database
    seen: list[tuple[str, str]] = []

    def try_to_write(method: str, url_path: str) -> None:
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            seen.append((url_path, "free"))
        except sqlite3.OperationalError as exc:
            seen.append((url_path, str(exc)))
        finally:
            other.close()

    github.on_request = try_to_write
    service.until(lambda: unsent(service.db) == 0, "every write sent again")
    assert any("/check-runs/" in p for p, _ in seen) and any("/comments" in p for p, _ in seen)
    assert any("/statuses/" in p for p, _ in seen)
    assert [s for s in seen if s[1] != "free"] == []
