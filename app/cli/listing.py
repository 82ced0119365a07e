"""`parallax jobs list|cancel` and `parallax bisects list|cancel`: what the queue and the
bisects hold, newest first, and the undo for each (the same actions as the API's cancel)."""
from __future__ import annotations

import click
from sqlalchemy import select

from app.bisect import service as bisects_area
from app.cli.context import CliContext, api_errors_as_click, pass_context
from app.core.clock import as_utc
from app.core.errors import NotFound
from app.core.models import Bisect, BisectState, Job, JobState
from app.jobs import queue

PAGE = click.IntRange(1, 1000)


@click.group()
def jobs() -> None:
    """Jobs in the queue and their outcomes."""


@jobs.command("list")
@click.option("--state", type=click.Choice([s.value for s in JobState]), default=None)
@click.option("--platform", default=None)
@click.option("--limit", type=PAGE, default=50, show_default=True)
@click.option("--before", "before_id", type=click.IntRange(min=1), default=None, help="page on: ids below this")
@pass_context
def jobs_list(ctx: CliContext, state: str | None, platform: str | None, limit: int, before_id: int | None) -> None:
    """Newest first: id, state, repository, commit, suite, platform, attempt, failure reason."""
    query = select(Job).order_by(Job.id.desc()).limit(limit)
    if state:
        query = query.where(Job.state == JobState(state))
    if platform:
        query = query.where(Job.platform == platform)
    if before_id:
        query = query.where(Job.id < before_id)
    with ctx.database().session() as session:
        rows = list(session.scalars(query))
        for job in rows:
            click.echo(f"{job.id}\t{job.state.value}\t{job.repository.name}\t{job.commit.sha[:12]}\t{job.suite.name}\t"
                       f"{job.platform}\tattempt {job.attempt}/{job.max_attempts}\t{job.failure_reason or ''}".rstrip())
    if not rows:
        click.echo("no jobs", err=True)


@jobs.command("cancel")
@click.argument("job_id", type=click.IntRange(min=1))
@pass_context
def jobs_cancel(ctx: CliContext, job_id: int) -> None:
    """Cancel a job: at once when queued; a running one stops at its runner's next heartbeat."""
    with ctx.database().session() as session:
        job = session.get(Job, job_id)
        if job is None:
            raise click.ClickException(f"job {job_id} does not exist; `parallax jobs list` shows them")
        queue.request_cancel(session, job)
        if job.state == JobState.cancelled:
            click.echo(f"job {job_id} cancelled")
        elif job.cancel_requested:
            click.echo(f"job {job_id} is running; its runner stops it at the next heartbeat")
        else:
            click.echo(f"job {job_id} is already {job.state.value}; nothing to cancel")


@click.group()
def bisects() -> None:
    """Bisects: list them, cancel one."""


@bisects.command("list")
@click.option("--state", type=click.Choice([s.value for s in BisectState]), default=None)
@click.option("--limit", type=PAGE, default=50, show_default=True)
@click.option("--before", "before_id", type=click.IntRange(min=1), default=None, help="page on: ids below this")
@pass_context
def bisects_list(ctx: CliContext, state: str | None, limit: int, before_id: int | None) -> None:
    """Newest first: id, state, suite/metric on platform, rounds, reason."""
    query = select(Bisect).order_by(Bisect.id.desc()).limit(limit)
    if state:
        query = query.where(Bisect.state == BisectState(state))
    if before_id:
        query = query.where(Bisect.id < before_id)
    with ctx.database().session() as session:
        rows = list(session.scalars(query))
        for row in rows:
            click.echo(f"{row.id}\t{row.state.value}\t{row.suite}/{row.metric} on {row.platform}\t"
                       f"{len(row.steps or [])} round(s)\tstarted {as_utc(row.created_at):%Y-%m-%d %H:%M}\t"
                       f"{row.reason or ''}".rstrip())
    if not rows:
        click.echo("no bisects", err=True)


@bisects.command("cancel")
@click.argument("bisect_id", type=click.IntRange(min=1))
@pass_context
def bisects_cancel(ctx: CliContext, bisect_id: int) -> None:
    """Cancel a running bisect and its outstanding jobs."""
    with ctx.database().session() as session:
        with api_errors_as_click():
            try:
                row = bisects_area.cancel(session, bisect_id, "the command line")
            except NotFound as exc:
                raise click.ClickException(f"{exc.detail}; `parallax bisects list` shows them") from exc
        click.echo(f"bisect {row.id} cancelled")
