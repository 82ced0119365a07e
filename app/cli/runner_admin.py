"""`parallax runner disable ID` (refuse a runner's token from now on) and `parallax runner list`:
the service side of `parallax runner`; the agent itself is `runners.cli`."""
from __future__ import annotations

import click
from sqlalchemy import select

from app.auth.tokens import disable_runner
from app.cli.context import CliContext, api_errors_as_click, pass_context
from app.core.clock import as_utc
from app.core.models import Runner


@click.command("disable")
@click.argument("runner_id", type=click.IntRange(min=1))
@pass_context
def disable(ctx: CliContext, runner_id: int) -> None:
    """Disable a runner: its token is refused; a job it holds returns to the queue when its
    lease expires."""
    with ctx.database().session() as session:
        with api_errors_as_click():
            runner = disable_runner(session, runner_id)
        click.echo(f"runner {runner.id} ({runner.name}) disabled")


@click.command("list")
@pass_context
def list_runners(ctx: CliContext) -> None:
    """Registered runners: id, name, platform, enabled or disabled, last heartbeat, labels."""
    with ctx.database().session() as session:
        rows = list(session.scalars(select(Runner).order_by(Runner.id)))
        for row in rows:
            seen = f"seen {as_utc(row.last_seen_at):%Y-%m-%d %H:%M:%S}" if row.last_seen_at else "never seen"
            labels = " ".join(f"{k}={v}" for k, v in sorted((row.labels or {}).items()))
            click.echo(f"{row.id}	{row.name}	{row.platform}	{'disabled' if row.disabled else 'enabled'}	{seen}	{labels}")
    if not rows:
        click.echo("no runners; `parallax token create`, then `parallax runner --server URL --registration-token T`",
                   err=True)
