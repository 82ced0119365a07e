"""The database of the current Flask app, and one session per request, closed at teardown."""
from __future__ import annotations

from flask import current_app, g
from sqlalchemy.orm import Session

from app.core.db import Database


def get_db() -> Database:
    return current_app.extensions["parallax.db"]


def request_session() -> Session:
    if "db_session" not in g:
        g.db_session = get_db().sessionmaker()
    return g.db_session


def close_request_session(exc: BaseException | None) -> None:
    session: Session | None = g.pop("db_session", None)
    if session is None:
        return
    if exc is not None:
        session.rollback()
    session.close()
