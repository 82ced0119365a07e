"""`parallax db upgrade`: the only way the schema changes."""
from __future__ import annotations

import click

from app.cli.context import CliContext, pass_context
from app.core.db import UNREACHABLE, database_problem
from app.core.migrate import current_revision, upgrade


@click.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
@pass_context
def db_upgrade(ctx: CliContext, revision: str) -> None:
    """Bring the database (PARALLAX_DATABASE_URL) to the newest schema."""
    try:
        upgrade(ctx.settings.database_url, revision)
    except UNREACHABLE as exc:
        raise click.ClickException(database_problem(ctx.settings.database_url, exc)) from exc
    database = ctx.database(check=revision == "head")
    click.echo(f"database at revision {current_revision(database.engine)}")
