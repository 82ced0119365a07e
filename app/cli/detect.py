"""`parallax detect [--rescan] [--repository R]`: run detection now and summarise the alerts."""
from __future__ import annotations

from typing import Any

import click
from sqlalchemy import func, select

from app.cli.context import CliContext, pass_context
from app.core.models import Alert, AlertChange, Commit, Repository
from app.detection.service import ScanReport, scan_dirty
from app.detection.service import rescan as full_rescan


@click.command("detect")
@click.option("--rescan", is_flag=True, help="full detection over every series, not only dirty ones")
@click.option("--repository", default=None, help="only this repository (owner/name)")
@pass_context
def detect(ctx: CliContext, rescan: bool, repository: str | None) -> None:
    """Detect change points and update alerts (incremental on dirty series, or a full re-scan)."""
    database = ctx.database()
    repository_id = None
    if repository is not None:
        with database.session() as session:
            repository_id = session.scalar(select(Repository.id).where(Repository.name == repository))
        if repository_id is None:
            raise click.ClickException(f"unknown repository {repository!r}; add it with `parallax repo add`")

    def progress(number: int, total: int, key: Any, outcome: ScanReport) -> None:
        click.echo(f"[{number}/{total}] {key.suite} {key.metric} on {key.platform} ({key.branch}): "
                   f"{len(outcome.created)} new, {outcome.updated} updated, {len(outcome.fixed)} fixed, "
                   f"{len(outcome.withdrawn)} withdrawn")

    if rescan:
        report = full_rescan(database, repository_id, progress=progress)
    else:
        if repository_id is not None:
            click.echo("note: --repository applies to --rescan; dirty series of every repository are scanned")
        report = ScanReport()
        while True:
            batch = scan_dirty(database)
            report.merge(batch)
            click.echo(f"scanned {batch.series} dirty series")
            if batch.series == 0:
                break
    click.echo(f"done: {report.series} series scanned, {len(report.created)} changes recorded, "
               f"{report.updated} updated, {len(report.fixed)} alerts fixed, {len(report.withdrawn)} changes withdrawn, "
               f"{len(report.confirm_jobs)} confirmation jobs queued")
    with database.session() as session:
        query = select(Alert.state, Alert.kind, Alert.is_regression, func.count()).group_by(
            Alert.state, Alert.kind, Alert.is_regression)
        if repository_id is not None:
            query = query.where(Alert.repository_id == repository_id)
        rows = session.execute(query).all()
        if not rows:
            click.echo("alerts: none")
        for state, kind, regression, count in sorted(rows, key=lambda r: (r[0].value, r[1], not r[2])):
            click.echo(f"alerts: {count} {state.value} {kind} {'regressions' if regression else 'improvements'}")
        for change in session.scalars(select(AlertChange).where(AlertChange.id.in_(report.created))
                                      .order_by(AlertChange.id)):
            if not change.is_regression:
                continue
            bad = session.get(Commit, change.alert.bad_commit_id)
            drift = (f", drift over {len(change.suspected_commits)} commits" if change.details.get("drift") else "")
            click.echo(f"  regression: {change.metric} {change.relative_change * 100:+.1f}% on {change.platform} "
                       f"({change.classification}{drift}) at {bad.sha[:12] if bad else '?'} [alert {change.alert_id}]")
        for change in session.scalars(select(AlertChange).where(AlertChange.id.in_(report.withdrawn))
                                      .order_by(AlertChange.id)):
            gone = change.details["withdrawn"]
            click.echo(f"  withdrawn: {change.metric} {change.relative_change * 100:+.1f}% on {change.platform}, "
                       f"effect {gone['effect']} with {gone['measured_after']} commits measured from it on "
                       f"[alert {change.alert_id} {change.alert.state.value}]")

