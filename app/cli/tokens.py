"""`parallax token create`: runner registration tokens."""
from __future__ import annotations

import click

from app.auth.tokens import create_registration_token
from app.cli.context import CliContext, pass_context


@click.group()
def token() -> None:
    """Runner registration tokens."""


@token.command("create")
@click.option("--note", default=None, help="who or what the token is for")
@pass_context
def token_create(ctx: CliContext, note: str | None) -> None:
    """Create a runner registration token; prints it as the last line (shown only once)."""
    with ctx.database().session() as session:
        value = create_registration_token(session, note)
    click.echo("registration token (store it now; only its hash is kept):", err=True)
    click.echo(value)
