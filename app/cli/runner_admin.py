"""`parallax runner disable ID`: refuse a runner's token from now on (the service side of
`parallax runner`; the agent itself is `runners.cli`)."""
from __future__ import annotations

import click

from app.auth.tokens import disable_runner
from app.cli.context import CliContext, api_errors_as_click, pass_context


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
