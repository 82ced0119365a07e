"""`parallax user add`: people who triage alerts and queue work through the API."""
from __future__ import annotations

import click

from app.auth.tokens import create_user
from app.cli.context import CliContext, pass_context


@click.group()
def user() -> None:
    """People who triage alerts and queue work through the API."""


@user.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice(["maintainer", "admin"]), default="maintainer", show_default=True,
              help="maintainer: triage alerts; admin: also queue jobs through the API")
@pass_context
def user_add(ctx: CliContext, name: str, role: str) -> None:
    """Add a user; prints their API token as the last line (shown only once)."""
    with ctx.database().session() as session:
        try:
            value = create_user(session, name, role)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(f"user {name} ({role}) added; API token (store it now; only its hash is kept):", err=True)
    click.echo(value)
