"""Alembic environment: runs migrations on the connection app.migrate hands over (or a URL)."""
from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from app.core.models import Base, UTCDateTime

config = context.config
target_metadata = Base.metadata


def render_item(kind, obj, autogen_context):  # type: ignore[no-untyped-def]
    """Migrations stand alone: app.models.UTCDateTime is written as the plain type it is."""
    if kind == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def run_with(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(connection=connection, target_metadata=target_metadata, render_item=render_item,
                      render_as_batch=connection.dialect.name == "sqlite", compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run_with(connection)
else:
    engine = engine_from_config(config.get_section(config.config_ini_section, {}),
                                prefix="sqlalchemy.", poolclass=pool.NullPool)
    with engine.connect() as conn:
        run_with(conn)
