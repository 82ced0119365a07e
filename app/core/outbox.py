"""Claiming one row of an outbox table (commit statuses, pull-request writes, notifications).

Every outbox row has `id`, `attempts` and `next_attempt_at`. A sender claims a due row by pushing
its `next_attempt_at` a lease into the future and counting the attempt, in one conditional UPDATE:
of two senders racing for the row exactly one sees rowcount 1, and a sender that dies mid-send
leaves the row to be retried when the lease runs out.
"""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, update

from app.core.db import Database


def claim(db: Database, table: Any, row_id: int, *, moment: datetime, lease_s: float,
          still_due: tuple[ColumnElement[bool], ...]) -> bool:
    """True when this caller now owns the row: it was due at `moment` and `still_due` held."""
    with db.session() as session:
        result = session.execute(
            update(table)
            .where(table.id == row_id, table.next_attempt_at <= moment, *still_due)
            .values(next_attempt_at=moment + timedelta(seconds=lease_s), attempts=table.attempts + 1))
        return result.rowcount == 1
