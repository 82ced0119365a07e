"""Background duties shared by all service processes, each done by exactly one at a time.

Areas declare their duties (`DUTIES` in jobs.queue, github.ingest, github.status,
detection.service); entry points collect them (`app.wiring.duties`) and hand them to this loop,
which imports no area. A duty runs only while its process holds the duty's row in
`worker_leases`; the lease is taken with a conditional UPDATE, so any number of gunicorn
workers on any number of hosts can run this loop.

A duty runs at most every `interval_s`. One that declares `due` also runs as soon as new work
for it exists (a webhook just stored): between ticks the loop asks it every `poll_s`, with the
time of its last run, whether something arrived since; only a process that holds the lease (or
may take it) asks. Each tick and each poll reads every lease in one query, and writes only the
leases it will run, so a push turns into jobs within a fraction of a second instead of waiting
out the interval at little cost to an idle service (docs/testing.md).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable, Sequence

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.clock import as_utc, utcnow
from app.core.config import Settings, use_settings
from app.core.db import Database, is_database_unavailable
from app.core.models import WorkerLease

log = logging.getLogger(__name__)
OWNER = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Duty:
    name: str
    run: Callable[[Database], object]
    interval_s: float = 5.0
    lease_s: float = 30.0
    # Whether work arrived since the duty last ran (None: it never ran): a cheap read.
    due: Callable[[Session, datetime | None], bool] | None = None


def acquire(session: Session, name: str, lease_s: float, owner: str = OWNER, interval_s: float = 0.0) -> bool:
    """Take (or keep) the duty's lease if it is free or ours, and its interval has passed."""
    moment = utcnow()
    if session.get(WorkerLease, name) is None:
        try:
            session.add(WorkerLease(name=name))
            session.commit()
        except IntegrityError:
            session.rollback()
    result = session.execute(
        update(WorkerLease).where(WorkerLease.name == name,
                                  or_(WorkerLease.owner == owner, WorkerLease.owner.is_(None),
                                      WorkerLease.lease_expires_at < moment),
                                  or_(WorkerLease.last_run_at.is_(None),
                                      WorkerLease.last_run_at <= moment - timedelta(seconds=interval_s)))
        .values(owner=owner, lease_expires_at=moment + timedelta(seconds=lease_s), last_run_at=moment))
    session.commit()
    return result.rowcount == 1


def _leases(session: Session, duties: Sequence[Duty]) -> dict[str, Any]:
    """The lease rows of `duties`, read in one query (columns, not ORM rows: acquire's UPDATE
    would compare a loaded time, naive on SQLite, with an aware one)."""
    return {row.name: row for row in session.execute(
        select(WorkerLease.name, WorkerLease.owner, WorkerLease.lease_expires_at, WorkerLease.last_run_at)
        .where(WorkerLease.name.in_([duty.name for duty in duties])))}


def _may_take(lease: Any, owner: str, moment: datetime) -> bool:
    """Whether `owner` holds the lease or could take it (acquire decides for good)."""
    return (lease is None or lease.owner in (None, owner) or lease.lease_expires_at is None
            or as_utc(lease.lease_expires_at) < moment)


def _last_run(lease: Any) -> datetime | None:
    return as_utc(lease.last_run_at) if lease is not None else None


def run_due(db: Database, duties: Sequence[Duty], owner: str = OWNER,
            failing: set[str] | None = None) -> dict[str, object]:
    """Run every duty whose lease this process gets; returns what each run returned. `failing`
    collects the names of the duties whose run raised (and loses those that ran fine). One read
    of the leases first: a duty another process holds, or whose interval has not passed, costs
    no write."""
    done: dict[str, object] = {}
    with db.session() as session:
        moment = utcnow()
        leases = _leases(session, duties)
        ready = [duty for duty in duties if _may_take(lease := leases.get(duty.name), owner, moment)
                 and ((last := _last_run(lease)) is None or last <= moment - timedelta(seconds=duty.interval_s))]
    for duty in ready:
        with db.session() as session:
            if not acquire(session, duty.name, duty.lease_s, owner, duty.interval_s):
                continue
        _run(db, duty, done, failing)
    return done


def run_arrived(db: Database, duties: Sequence[Duty], owner: str = OWNER,
                failing: set[str] | None = None) -> dict[str, object]:
    """Run each duty with a `due` check that says work arrived since its last run, its interval
    notwithstanding; only where this process holds (or may take) the lease. A duty in `failing`
    waits for its interval: work it cannot do would otherwise be retried every poll."""
    done: dict[str, object] = {}
    asked = [duty for duty in duties if duty.due is not None and not (failing is not None and duty.name in failing)]
    if not asked:
        return done
    with db.session() as session:
        moment = utcnow()
        leases = _leases(session, asked)
        arrived = [duty for duty in asked if _may_take(lease := leases.get(duty.name), owner, moment)
                   and duty.due is not None and duty.due(session, _last_run(lease))]
    for duty in arrived:
        with db.session() as session:
            if not acquire(session, duty.name, duty.lease_s, owner):
                continue
        _run(db, duty, done, failing)
    return done


def _run(db: Database, duty: Duty, done: dict[str, object], failing: set[str] | None) -> None:
    try:
        done[duty.name] = duty.run(db)
    except Exception:  # a failing duty must not kill the loop; it is retried next tick
        log.exception("background duty failed", extra={"px_duty": duty.name})
        if failing is not None:
            failing.add(duty.name)
    else:
        if failing is not None:
            failing.discard(duty.name)


def start(db: Database, duties: Sequence[Duty], settings: Settings, stop: threading.Event | None = None,
          tick_s: float = 1.0, poll_s: float = 0.2) -> threading.Thread:
    """Run `duties` every `tick_s` in a daemon thread, with `settings` in force for them, and
    the ones with a `due` check also within `poll_s` of work arriving."""
    stop = stop or threading.Event()
    arriving = [duty for duty in duties if duty.due is not None]
    failing: set[str] = set()

    def loop() -> None:
        with use_settings(settings):
            next_tick = time.monotonic() + tick_s
            while not stop.wait(min(poll_s, max(0.0, next_tick - time.monotonic())) if arriving else tick_s):
                if not arriving or time.monotonic() >= next_tick:
                    _guarded(run_due, duties)
                    next_tick = time.monotonic() + tick_s
                else:
                    _guarded(run_arrived, arriving)

    def _guarded(run: Callable[..., object], these: Sequence[Duty]) -> None:
        try:
            run(db, these, failing=failing)
        except Exception as exc:
            if is_database_unavailable(exc):  # a restart or failover: the next tick tries again
                log.warning("background loop: database unavailable: %s", str(getattr(exc, "orig", exc)).splitlines()[0])
            else:
                log.exception("background loop error")

    thread = threading.Thread(target=loop, name="parallax-background", daemon=True)
    thread.start()
    return thread


def owners(session: Session) -> dict[str, str | None]:
    return {lease.name: lease.owner for lease in session.scalars(select(WorkerLease))}
