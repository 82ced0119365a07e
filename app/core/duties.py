"""Background duties shared by all service processes, each done by exactly one at a time.

Areas declare their duties (`DUTIES` in jobs.queue, github.ingest, github.status,
detection.service); entry points collect them (`app.wiring.duties`) and hand them to this loop,
which imports no area. A duty runs only while its process holds the duty's row in
`worker_leases`; the lease is taken with a conditional UPDATE, so any number of gunicorn
workers on any number of hosts can run this loop.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Sequence

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.clock import utcnow
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


def run_due(db: Database, duties: Sequence[Duty], owner: str = OWNER) -> dict[str, object]:
    """Run every duty whose lease this process gets; returns what each run returned."""
    done: dict[str, object] = {}
    for duty in duties:
        with db.session() as session:
            if not acquire(session, duty.name, duty.lease_s, owner, duty.interval_s):
                continue
        try:
            done[duty.name] = duty.run(db)
        except Exception:  # a failing duty must not kill the loop; it is retried next tick
            log.exception("background duty failed", extra={"px_duty": duty.name})
    return done


def start(db: Database, duties: Sequence[Duty], settings: Settings, stop: threading.Event | None = None,
          tick_s: float = 1.0) -> threading.Thread:
    """Run `duties` every `tick_s` in a daemon thread, with `settings` in force for them."""
    stop = stop or threading.Event()

    def loop() -> None:
        with use_settings(settings):
            while not stop.wait(tick_s):
                _tick()

    def _tick() -> None:
        try:
            run_due(db, duties)
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
