"""`parallax enqueue REPO SHA`: queue the matrix, or one cell, for a commit."""
from __future__ import annotations

import click
from sqlalchemy import select

from app.cli.context import CliContext, api_errors_as_click, pass_context
from app.core.models import JobReason, Repository
from app.core.shas import is_sha
from app.jobs import queue


@click.command()
@click.argument("repository")
@click.argument("sha")
@click.option("--suite", default=None, help="only this suite")
@click.option("--platform", default=None, help="only this platform")
@click.option("--rerun", is_flag=True, help="queue again even if the cell already ran")
@pass_context
def enqueue(ctx: CliContext, repository: str, sha: str, suite: str | None, platform: str | None,
            rerun: bool) -> None:
    """Queue the suite x platform matrix (or one cell) for commit SHA of REPOSITORY."""
    if not is_sha(sha):
        raise click.BadParameter(f"must be a full 40-character lowercase hex SHA, got {sha!r}", param_hint="SHA")
    with ctx.database().session() as session:
        repo_row = session.scalar(select(Repository).where(Repository.name == repository))
        if repo_row is None:
            raise click.ClickException(f"unknown repository {repository!r}; add it with `parallax repo add`")
        with api_errors_as_click():
            results = queue.enqueue_matrix(session, repo_row, sha, suite_name=suite, platform=platform,
                                           reason=JobReason.rerun if rerun else JobReason.manual,
                                           force=rerun)
        if not results:
            raise click.ClickException("nothing to queue: no suite matches (configure suites in parallax.toml)")
        for job, created in results:
            state = "queued" if created else f"exists ({job.state.value})"
            click.echo(f"job {job.id}: {repository}@{sha[:12]} {job.suite.name} on {job.platform}: {state}")
