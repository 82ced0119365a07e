"""Database engine and sessions.

One `Database` per app or process (engine + sessionmaker; a web request's session lives in
`app.web.session`). SQLite gets WAL, a busy timeout and foreign keys, and every transaction
begins with `BEGIN IMMEDIATE`: a deferred transaction that read first and writes later fails at
once with "database is locked" when another writer got there in between (SQLite does not wait in
that case), while an immediate one waits its turn for the write lock. That makes read-then-write
sequences such as claiming race-free on the embedded default. Within one process the turn is
waited for in Python, not in SQLite (app.core.sqlite_gate: under gevent SQLite's wait would
freeze the worker).
"""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, TypeVar

from sqlalchemy import Engine, create_engine, event, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from app.core.sqlite_gate import gate_for

M = TypeVar("M")
SQLITE_BUSY_S = 30  # how long SQLite (and the gate of app.core.sqlite_gate) waits for the write lock
UNREACHABLE = (OperationalError, ArgumentError)  # what `database_problem` explains


def database_problem(url: str, exc: Exception) -> str:
    """One line for an unreachable, missing or misspelt database, with the fix; the password
    never appears."""
    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return (f"PARALLAX_DATABASE_URL is not a database URL ({url[:80]!r}); use e.g. "
                "postgresql+psycopg://user@host:5432/parallax or sqlite:///var/parallax.db")
    cause = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0][:300]
    return (f"cannot use the database at {shown}: {cause}. Check PARALLAX_DATABASE_URL, that the server "
            f"runs and the database exists (createdb), then run `parallax db upgrade`")


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        gate = None
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            gate = gate_for(parsed.database, SQLITE_BUSY_S)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_S, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            # Let SQLAlchemy, not pysqlite, decide when transactions begin (so BEGIN IMMEDIATE works).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_S * 1000}")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn) -> None:  # type: ignore[no-untyped-def]
            if gate is None:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
                return
            dbapi_connection = conn.connection.dbapi_connection
            gate.enter(dbapi_connection)
            try:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            except BaseException:
                gate.leave(dbapi_connection)
                raise

        if gate is not None:
            # Before the COMMIT or ROLLBACK itself: nothing yields in between (SQLite's calls are
            # C), and a thread let in early waits a moment in SQLite's busy handler.
            @event.listens_for(engine, "commit")
            @event.listens_for(engine, "rollback")
            def _sqlite_end(conn) -> None:  # type: ignore[no-untyped-def]
                gate.leave(conn.connection.dbapi_connection)

            # A connection back in the pool, reset or dropped, ends its transaction too.
            @event.listens_for(engine, "checkin")
            @event.listens_for(engine, "close")
            @event.listens_for(engine, "invalidate")
            def _sqlite_released(dbapi_connection, *_args) -> None:  # type: ignore[no-untyped-def]
                gate.leave(dbapi_connection)

        return engine
    return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)


def is_sqlite(engine_or_session: Engine | Session) -> bool:
    bind = engine_or_session.get_bind() if isinstance(engine_or_session, Session) else engine_or_session
    return bind.dialect.name == "sqlite"


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on error."""
        session = self.sessionmaker()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))


RETRY_AFTER_S = 5  # what a client is told to wait when the database is unreachable


def is_database_unavailable(exc: BaseException) -> bool:
    """True for errors that mean "the database cannot be reached right now" (a restart, a
    failover, a lost connection, an exhausted pool, SQLite's lock wait running out), as opposed
    to a fault in a query. Requests answer these with 503 and Retry-After, not a 500."""
    if isinstance(exc, (DisconnectionError, PoolTimeout)):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    if isinstance(exc, OperationalError):
        module = type(exc.orig).__module__
        if module.startswith("psycopg"):  # PostgreSQL's OperationalError: connection and admin failures
            return True
        text = str(exc.orig).lower()
        return "database is locked" in text or "unable to open database" in text
    return False


def get_or_create(session: Session, model: type[M], defaults: dict[str, Any] | None = None, **keys: Any) -> M:
    """The row of `model` with these key values, added with `defaults` too (and flushed, so it
    has its id) when missing. Safe against a concurrent transaction adding the same key: the
    insert runs in a savepoint, and when it hits the unique key the other transaction has
    committed (PostgreSQL makes the insert wait for it), so its row is read instead."""
    query = select(model).filter_by(**keys).limit(1)
    row = session.scalar(query)
    if row is not None:
        return row
    try:
        with session.begin_nested():
            row = model(**keys, **(defaults or {}))
            session.add(row)
    except IntegrityError:
        row = session.scalar(query)
        if row is None:  # not the unique key: some other constraint
            raise
    return row
