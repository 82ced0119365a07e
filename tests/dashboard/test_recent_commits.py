"""Without branch history the home page lists the commits with the newest jobs, newest first,
reading the newest jobs in growing windows rather than grouping every job ever queued."""
from sqlalchemy import select

from app.core.models import Job, Repository, Suite
from app.jobs.queue import get_or_create_commit
from app.web.dash_queries import positions, recent_commits


def queue_commits(db, jobs_per_commit: list[int]) -> list[str]:
    """One commit per entry, queued in order, each with that many jobs; returns the SHAs."""
    shas = []
    with db.session() as session:
        repo = session.scalar(select(Repository).where(Repository.name == "demo/engine"))
        suite = session.scalar(select(Suite))
        for i, count in enumerate(jobs_per_commit):
            commit = get_or_create_commit(session, repo, f"{i + 1:040x}")
            shas.append(commit.sha)
            for j in range(count):
                session.add(Job(repository_id=repo.id, commit_id=commit.id, suite_id=suite.id, platform=f"p{j}"))
            session.flush()
    return shas


def newest(db, limit: int) -> list[str]:
    with db.session() as session:
        repo = session.scalar(select(Repository).where(Repository.name == "demo/engine"))
        commits, branch = recent_commits(session, repo, limit)
        assert branch is None
        return [c.sha for c in commits]


def test_commits_come_newest_first_by_their_newest_job(db):
    shas = queue_commits(db, [2, 2, 2, 2])
    assert newest(db, 3) == shas[::-1][:3]


def test_commits_with_more_jobs_than_the_first_window_are_still_all_found(db):
    shas = queue_commits(db, [5, 5, 200, 200])   # the first window (16 x 2 jobs) sees one commit
    assert newest(db, 2) == [shas[3], shas[2]]
    assert newest(db, 4) == shas[::-1]


def test_fewer_commits_than_asked_for_returns_them_all(db):
    shas = queue_commits(db, [1, 3])
    assert newest(db, 30) == [shas[1], shas[0]]


def test_positions_without_branch_history_follow_each_commits_first_job(db):
    queue_commits(db, [3, 1, 2])
    with db.session() as session:
        first_jobs = dict(session.execute(select(Job.commit_id, Job.id).order_by(Job.id.desc())).all())
        assert positions(session, None, list(first_jobs)) == first_jobs
