"""The database of the current Flask app, and one session per request, closed at teardown.

With `PARALLAX_READ_DATABASE_URL` (a streaming replica), GET and HEAD requests read from the
replica and everything else writes to the primary. A browser that just posted a form reads from
the primary for `READ_YOUR_WRITES_S` afterwards (a cookie says until when), so the page it is
sent to shows what it wrote even while the replica is a moment behind.
"""
from __future__ import annotations

import time

from flask import Response, current_app, g, request
from sqlalchemy.orm import Session

from app.core.db import Database

READ_YOUR_WRITES_S = 10.0
FRESH_COOKIE = "parallax_primary_until"


def get_db() -> Database:
    return current_app.extensions["parallax.db"]


def read_db() -> Database | None:
    return current_app.extensions.get("parallax.read_db")


def reads_from_replica() -> bool:
    if read_db() is None or request.method not in ("GET", "HEAD"):
        return False
    try:
        fresh_until = float(request.cookies.get(FRESH_COOKIE, "0"))
    except ValueError:
        fresh_until = 0.0
    return time.time() >= fresh_until


def request_session() -> Session:
    if "db_session" not in g:
        replica = read_db() if reads_from_replica() else None
        g.db_session = (replica or get_db()).sessionmaker()
    return g.db_session


def mark_written(response: Response) -> Response:
    """After a dashboard form post, the browser's next reads go to the primary for a while."""
    if (read_db() is not None and request.method not in ("GET", "HEAD", "OPTIONS") and response.status_code < 400
            and not request.path.startswith(("/api/", "/webhooks/"))):
        response.set_cookie(FRESH_COOKIE, f"{time.time() + READ_YOUR_WRITES_S:.3f}", max_age=int(READ_YOUR_WRITES_S) + 1,
                            httponly=True, samesite="Lax")
    return response


def close_request_session(exc: BaseException | None) -> None:
    session: Session | None = g.pop("db_session", None)
    if session is None:
        return
    if exc is not None:
        session.rollback()
    session.close()
