"""`parallax token create` / `parallax token revoke`: runner registration tokens, and (with
`--ci`) the CI tokens that existing CI jobs upload results with."""
from __future__ import annotations

from datetime import timedelta

import click
from sqlalchemy import select

from app.auth.ci_tokens import create_ci_token, revoke_ci_token
from app.auth.tokens import create_registration_token, hash_token, revoke_registration_token
from app.cli.context import CliContext, api_errors_as_click, pass_context
from app.core.clock import as_utc, utcnow
from app.core.models import RegistrationToken


@click.group()
def token() -> None:
    """Runner registration tokens."""


@token.command("create")
@click.option("--note", default=None, help="who or what the token is for")
@click.option("--expires-in-days", type=click.FloatRange(min=0, min_open=True), default=None,
              help="refuse the token after this many days (default: never)")
@click.option("--ci", is_flag=True, help="a CI token for `parallax upload` (POST /api/v1/runs) instead")
@click.option("--repository", default=None, help="with --ci: the only repository (owner/name) it may upload for")
@click.option("--platform", default=None, help="with --ci: the only platform it may upload for (default: any)")
@pass_context
def token_create(ctx: CliContext, note: str | None, expires_in_days: float | None, ci: bool,
                 repository: str | None, platform: str | None) -> None:
    """Create a runner registration token, or with --ci a CI upload token; prints it as the last
    line (shown only once)."""
    expires_in = None if expires_in_days is None else timedelta(days=expires_in_days)
    if not ci and (repository or platform):
        raise click.UsageError("--repository and --platform go with --ci")
    if ci:
        if not repository:
            raise click.UsageError("--ci needs --repository OWNER/NAME")
        with ctx.database().session() as session:
            with api_errors_as_click():
                token_id, value = create_ci_token(session, repository, platform, note=note, expires_in=expires_in)
        scope = repository + (f" on platform {platform}" if platform else " on any platform")
        click.echo(f"CI token {token_id} for uploads to {scope} (store it as a CI secret now; only its hash is "
                   f"kept; revoke with `parallax token revoke --ci {token_id}`):", err=True)
        click.echo(value)
        return
    with ctx.database().session() as session:
        value = create_registration_token(session, note, expires_in)
        session.flush()
        token_id = session.scalar(select(RegistrationToken.id).where(RegistrationToken.token_hash == hash_token(value)))
    click.echo(f"registration token {token_id} (store it now; only its hash is kept; "
               f"revoke with `parallax token revoke {token_id}`):", err=True)
    click.echo(value)


@token.command("revoke")
@click.argument("id_or_token")
@click.option("--ci", is_flag=True, help="revoke a CI token (id or token) instead")
@pass_context
def token_revoke(ctx: CliContext, id_or_token: str, ci: bool) -> None:
    """Revoke a registration token, given its id or the token itself. Runners it registered keep
    working until disabled (`parallax runner disable ID`). With --ci (or a pxc_ token), a CI token."""
    if ci or id_or_token.startswith("pxc_"):
        with ctx.database().session() as session:
            with api_errors_as_click():
                row = revoke_ci_token(session, id_or_token)
            click.echo(f"CI token {row.id} revoked")
        return
    with ctx.database().session() as session:
        with api_errors_as_click():
            row = revoke_registration_token(session, id_or_token)
        click.echo(f"registration token {row.id} revoked")


@token.command("list")
@pass_context
def token_list(ctx: CliContext) -> None:
    """Registration tokens: id, state (active, revoked, expired), expiry, note. Never the token."""
    with ctx.database().session() as session:
        rows = list(session.scalars(select(RegistrationToken).order_by(RegistrationToken.id)))
        now = utcnow()
        for row in rows:
            expired = row.expires_at is not None and as_utc(row.expires_at) <= now
            state = "revoked" if row.revoked else "expired" if expired else "active"
            expires = f"expires {as_utc(row.expires_at):%Y-%m-%d %H:%M}" if row.expires_at else "never expires"
            click.echo(f"{row.id}\t{state}\t{expires}\t{row.note or ''}".rstrip())
    if not rows:
        click.echo("no registration tokens; `parallax token create` makes one", err=True)
