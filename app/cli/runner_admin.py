"""`parallax runner disable ID`: refuse a runner's token from now on (the service side of
`parallax runner`; the agent itself is `runners.cli`)."""
from __future__ import annotations

import click

from app.auth.tokens import disable_runner
from app.cli.context import CliContext, pass_context
from app.core.errors import NotFound


@click.command("disable")
@click.argument("runner_id", type=click.IntRange(min=1))
@pass_context
def disable(ctx: CliContext, runner_id: int) -> None:
    """Disable a runner: its token is refused; a job it holds returns to the queue when its
    lease expires."""
    with ctx.database().session() as session:
        try:
            runner = disable_runner(session, runner_id)
        except NotFound as exc:
            raise click.ClickException(exc.detail) from exc
        click.echo(f"runner {runner.id} ({runner.name}) disabled")
