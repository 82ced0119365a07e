"""`parallax user add` / `parallax user disable`: people who triage alerts and queue work through
the API."""
from __future__ import annotations

from datetime import timedelta

import click

from app.auth.tokens import create_user, disable_user
from app.cli.context import CliContext, api_errors_as_click, pass_context


@click.group()
def user() -> None:
    """People who triage alerts and queue work through the API."""


@user.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice(["maintainer", "admin"]), default="maintainer", show_default=True,
              help="maintainer: triage alerts; admin: also queue jobs through the API")
@click.option("--expires-in-days", type=click.FloatRange(min=0, min_open=True), default=None,
              help="refuse the user's token after this many days (default: never)")
@pass_context
def user_add(ctx: CliContext, name: str, role: str, expires_in_days: float | None) -> None:
    """Add a user; prints their API token as the last line (shown only once)."""
    expires_in = None if expires_in_days is None else timedelta(days=expires_in_days)
    with ctx.database().session() as session:
        try:
            value = create_user(session, name, role, expires_in)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(f"user {name} ({role}) added; API token (store it now; only its hash is kept):", err=True)
    click.echo(value)


@user.command("disable")
@click.argument("name")
@pass_context
def user_disable(ctx: CliContext, name: str) -> None:
    """Disable a user: their token is refused from now on."""
    with ctx.database().session() as session:
        with api_errors_as_click():
            disable_user(session, name)
    click.echo(f"user {name} disabled")
