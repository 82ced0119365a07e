"""`parallax prune [--dry-run] [--batch-size N]`: drop the raw samples the `[[retention]]` rules of
parallax.toml let go (their per-run summaries stay), or with --dry-run say what would go."""
from __future__ import annotations

import click

from app.cli.context import CliContext, pass_context
from app.retention.prune import BATCH, PruneReport, plan, prune


@click.command("prune")
@click.option("--dry-run", is_flag=True, help="only say what would be dropped, per retention kind")
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=BATCH, show_default=True,
              help="measurements per transaction")
@pass_context
def prune_command(ctx: CliContext, dry_run: bool, batch_size: int) -> None:
    """Apply the retention rules: raw samples of old runs of the listed kinds are replaced by their
    summary (median, min, max, count); pages and detection keep working on the summary."""
    if not ctx.settings.retention:
        click.echo("no [[retention]] rules in parallax.toml: every raw sample is kept")
        return
    database = ctx.database()
    found = plan(database, ctx.settings)
    click.echo(f"{'kind':<20} {'after':>8} {'runs':>10} {'measurements':>13} {'raw samples':>12}")
    for kind in found.kinds:
        click.echo(f"{kind.kind:<20} {kind.after_days:>7g}d {kind.runs:>10} {kind.measurements:>13} {kind.samples:>12}")
    if dry_run:
        click.echo(f"dry run: {found.measurements} measurements would keep only their summary; nothing was changed")
        return

    def progress(report: PruneReport) -> None:
        if report.batches % 20 == 0:
            click.echo(f"... {report.measurements}/{found.measurements} measurements pruned")

    report = prune(database, ctx.settings, batch_size=batch_size, progress=progress)
    kinds = ", ".join(f"{kind} {count}" for kind, count in report.by_kind.items()) or "nothing"
    click.echo(f"pruned {report.measurements} measurements ({kinds}) in {report.batches} batches; "
               f"{report.samples_dropped} raw samples dropped")
