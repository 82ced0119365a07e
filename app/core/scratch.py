"""Scratch databases for tests and benchmarks: a fresh PostgreSQL database on a server (dropped
afterwards) or a fresh SQLite file, so both backends are exercised the same way."""
from __future__ import annotations

import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import sqlalchemy as sa


def postgres_unreachable(server_url: str) -> str | None:
    """None when the server answers, else why not."""
    try:
        engine = sa.create_engine(server_url, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
        return None
    except Exception as exc:  # any failure to connect means "not reachable"
        return f"{type(exc).__name__}: {exc}"


@contextmanager
def scratch_postgres(server_url: str, prefix: str = "parallax_scratch") -> Iterator[str]:
    """A new, empty database on the server at `server_url`; yields its URL, drops it after."""
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.engine.make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def scratch_sqlite(directory: Path) -> Iterator[str]:
    """A new SQLite file under `directory`; yields its URL, removes it (and its WAL) after."""
    directory.mkdir(parents=True, exist_ok=True)
    path = (directory / f"scratch-{uuid.uuid4().hex[:8]}.db").resolve()
    try:
        yield f"sqlite:///{path}"
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
