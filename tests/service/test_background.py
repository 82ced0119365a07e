"""Background duties run in exactly one process at a time, claimed through the database."""
from datetime import timedelta

from sqlalchemy import update

from app.core.duties import Duty, acquire, run_due
from app.core.models import WorkerLease


def test_first_owner_takes_the_duty(db):
    with db.session() as session:
        assert acquire(session, "reaper", lease_s=30, owner="a") is True
        assert acquire(session, "reaper", lease_s=30, owner="b") is False


def test_the_owner_keeps_its_duty(db):
    with db.session() as session:
        assert acquire(session, "reaper", lease_s=30, owner="a")
        assert acquire(session, "reaper", lease_s=30, owner="a")


def test_an_expired_lease_passes_to_another_owner(db):
    from app.core.clock import utcnow as now
    with db.session() as session:
        acquire(session, "reaper", lease_s=30, owner="a")
        session.execute(update(WorkerLease).values(lease_expires_at=now() - timedelta(seconds=1)))
        session.commit()
        assert acquire(session, "reaper", lease_s=30, owner="b") is True


def test_interval_throttles_across_processes(db):
    with db.session() as session:
        assert acquire(session, "detect", lease_s=1, owner="a", interval_s=60)
        assert not acquire(session, "detect", lease_s=1, owner="a", interval_s=60)


def test_run_due_runs_each_duty_once_across_owners(db):
    calls = []
    duty = Duty("count", lambda _db: calls.append(1) or len(calls), interval_s=60)
    first = run_due(db, [duty], owner="a")
    second = run_due(db, [duty], owner="b")
    assert first == {"count": 1} and second == {} and calls == [1]


def test_a_failing_duty_does_not_stop_the_others(db):
    def boom(_db):
        raise RuntimeError("boom")
    done = run_due(db, [Duty("boom", boom), Duty("ok", lambda _db: "fine")], owner="a")
    assert done == {"ok": "fine"}
