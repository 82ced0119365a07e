"""Alembic glue: upgrade a database to head, and refuse to serve a database that is behind."""
from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from app.core.db import make_engine

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


class SchemaBehind(RuntimeError):
    pass


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(database_url: str, revision: str = "head") -> None:
    engine = make_engine(database_url)
    try:
        with engine.begin() as conn:
            cfg = alembic_config(database_url)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    finally:
        engine.dispose()


def ensure_current(engine: Engine) -> None:
    current, head = current_revision(engine), head_revision()
    if current != head:
        where = engine.url.render_as_string(hide_password=True)
        state = "has no schema" if current is None else f"is at revision {current}"
        raise SchemaBehind(
            f"database {where} {state}, but this Parallax needs revision {head}. "
            f"Run `parallax db upgrade` first."
        )
