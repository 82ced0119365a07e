"""`parallax user add` / `parallax user disable`: people who triage alerts and queue work through
the API."""
from __future__ import annotations

from datetime import timedelta

import click
from sqlalchemy import select

from app.auth.tokens import create_user, disable_user
from app.cli.context import CliContext, api_errors_as_click, pass_context
from app.core.clock import as_utc
from app.core.models import User


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


@user.command("list")
@pass_context
def user_list(ctx: CliContext) -> None:
    """Users: name, role, disabled or not, token expiry. Never the token."""
    with ctx.database().session() as session:
        rows = list(session.scalars(select(User).order_by(User.name)))
        for row in rows:
            expires = f"token expires {as_utc(row.expires_at):%Y-%m-%d %H:%M}" if row.expires_at else "token never expires"
            click.echo(f"{row.name}\t{row.role}\t{'disabled' if row.disabled else 'active'}\t{expires}")
    if not rows:
        click.echo("no users; `parallax user add NAME` adds one", err=True)
