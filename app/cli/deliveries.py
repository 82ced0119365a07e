"""`parallax deliveries list|retry|skip`: the webhook deliveries, each with its error; try a
failed one again or give up on one (`app.github.deliveries`)."""
from __future__ import annotations

import click

from app.cli.context import CliContext, api_errors_as_click, pass_context
from app.github import deliveries as area


@click.group()
def deliveries() -> None:
    """Webhook deliveries from GitHub: what each did, or why it failed."""


@deliveries.command("list")
@click.option("--state", type=click.Choice(area.STATES), default=None, help="only deliveries in this state")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--before", "before_id", type=click.IntRange(min=1), default=None,
              help="page on: only deliveries numbered below this")
@pass_context
def deliveries_list(ctx: CliContext, state: str | None, limit: int, before_id: int | None) -> None:
    """Newest first: number, GitHub delivery id, event, repository, state, attempts, result or error."""
    with ctx.database().session() as session:
        with api_errors_as_click():
            rows = area.list_deliveries(session, state=state, limit=limit, before_id=before_id)
        counts = area.counts(session)
        for row in rows:
            body = area.delivery_json(row)
            retry = f" next attempt {body['next_attempt_at']}" if body["next_attempt_at"] else ""
            click.echo(f"{body['id']}\t{body['delivery']}\t{body['event']}\t{body['repository'] or '-'}\t"
                       f"{body['state']}\tattempts {body['attempts']}{retry}\t{body['result'] or ''}")
    if not rows:
        click.echo("no deliveries" + (f" in state {state}" if state else ""), err=True)
    click.echo(f"{counts.pending} pending ({counts.waiting} waiting for a retry), {counts.failed} failed", err=True)


@deliveries.command("retry")
@click.argument("delivery")
@pass_context
def deliveries_retry(ctx: CliContext, delivery: str) -> None:
    """Process a failed or waiting DELIVERY (number or GitHub delivery id) again at once."""
    with ctx.database().session() as session:
        with api_errors_as_click():
            row = area.retry(session, delivery)
        click.echo(f"delivery {row.delivery_id} queued again; the service processes it within seconds")


@deliveries.command("skip")
@click.argument("delivery")
@pass_context
def deliveries_skip(ctx: CliContext, delivery: str) -> None:
    """Give up on DELIVERY: it is never processed and holds nothing back."""
    with ctx.database().session() as session:
        with api_errors_as_click():
            row = area.skip(session, delivery, "the command line")
        click.echo(f"delivery {row.delivery_id} skipped")
