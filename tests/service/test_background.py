"""Background duties run in exactly one process at a time, claimed through the database."""
import threading
from datetime import timedelta

from sqlalchemy import update

from app.core.clock import as_utc
from app.core.duties import Duty, acquire, run_arrived, run_due, start
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


class Arrivals:
    """A `due` check that reports work while `waiting` is set, and records each `since` it got."""

    def __init__(self, waiting: bool) -> None:
        self.waiting = waiting
        self.asked: list[object] = []

    def __call__(self, _session, since):  # type: ignore[no-untyped-def]
        self.asked.append(since)
        return self.waiting


def test_a_duty_whose_work_arrived_runs_before_its_interval(db):
    calls: list[int] = []
    duty = Duty("webhooks", lambda _db: calls.append(1), interval_s=60, due=Arrivals(True))
    run_due(db, [duty], owner="a")
    assert run_arrived(db, [duty], owner="a") == {"webhooks": None}
    assert calls == [1, 1]


def test_a_duty_with_nothing_arrived_waits_for_its_interval(db):
    calls: list[int] = []
    duty = Duty("webhooks", lambda _db: calls.append(1), interval_s=60, due=Arrivals(False))
    run_due(db, [duty], owner="a")
    assert run_arrived(db, [duty], owner="a") == {} and calls == [1]


def test_arrived_work_is_left_to_the_process_holding_the_lease(db):
    arrivals = Arrivals(True)
    calls: list[str] = []
    duty = Duty("webhooks", lambda _db: calls.append("ran"), interval_s=60, due=arrivals)
    run_due(db, [duty], owner="a")
    assert run_arrived(db, [duty], owner="b") == {} and calls == ["ran"]
    assert arrivals.asked == [], "the other process did not even ask"


def test_the_due_check_is_given_the_time_of_the_last_run(db):
    arrivals = Arrivals(False)
    duty = Duty("webhooks", lambda _db: None, interval_s=60, due=arrivals)
    run_arrived(db, [duty], owner="a")
    run_due(db, [duty], owner="a")
    run_arrived(db, [duty], owner="a")
    with db.session() as session:
        last_run = session.get(WorkerLease, "webhooks").last_run_at
    assert arrivals.asked == [None, as_utc(last_run)]


def test_the_loop_runs_arrived_work_between_its_ticks(app, db):
    arrivals = Arrivals(False)
    ran = threading.Event()
    duty = Duty("webhooks", lambda _db: ran.set() if arrivals.waiting else None, interval_s=600, due=arrivals)
    run_due(db, [duty])
    stop = threading.Event()
    start(db, [duty], app.extensions["parallax.settings"], stop, tick_s=600, poll_s=0.05)
    try:
        arrivals.waiting = True
        assert ran.wait(60), "arrived work waited for the 600 s tick"
    finally:
        stop.set()


def test_a_duty_that_failed_waits_for_its_interval_before_running_on_arrivals_again(db):
    calls: list[int] = []

    def boom(_db):  # type: ignore[no-untyped-def]
        calls.append(1)
        raise RuntimeError("cannot do it")
    duty = Duty("webhooks", boom, interval_s=60, due=Arrivals(True))
    failing: set[str] = set()
    run_arrived(db, [duty], owner="a", failing=failing)
    run_arrived(db, [duty], owner="a", failing=failing)
    assert calls == [1] and failing == {"webhooks"}


def test_a_regular_run_that_succeeds_lets_arrivals_run_the_duty_again(db):
    fail = [True]

    def flaky(_db):  # type: ignore[no-untyped-def]
        if fail[0]:
            raise RuntimeError("not yet")
    duty = Duty("webhooks", flaky, interval_s=0, due=Arrivals(True))
    failing: set[str] = set()
    run_arrived(db, [duty], owner="a", failing=failing)
    fail[0] = False
    run_due(db, [duty], owner="a", failing=failing)
    assert failing == set() and run_arrived(db, [duty], owner="a", failing=failing) == {"webhooks": None}
