"""`parallax backfill REPO --since SHA`: measure a branch's existing history.

Reads the repository's git mirror (fetching it first), stores the commit graph and the branch's
first-parent history from SHA to the branch head, and queues every suite and platform for each
of those commits with reason `backfill` (lowest priority tier, newest first)."""
from __future__ import annotations

import click
from sqlalchemy import select

from app.cli.context import CliContext, pass_context
from app.core.config import use_settings
from app.core.models import Repository
from app.core.shas import is_sha
from app.git import commit_graph
from app.git.mirror import GitError, Mirror
from app.jobs import matrix


@click.command("backfill")
@click.argument("repository")
@click.option("--since", "since", required=True, help="oldest commit to measure (full 40-character SHA)")
@click.option("--branch", default=None, help="branch to walk (default: the repository's default branch)")
@click.option("--limit", default=5000, show_default=True, type=int, help="refuse ranges longer than this")
@pass_context
def backfill(ctx: CliContext, repository: str, since: str, branch: str | None, limit: int) -> None:
    """Store the history of REPOSITORY's branch since SHA and queue it for measurement."""
    if not is_sha(since):
        raise click.BadParameter(f"must be a full 40-character lowercase hex SHA, got {since!r}", param_hint="--since")
    settings = ctx.settings
    database = ctx.database()
    with database.session() as session:
        repo = session.scalar(select(Repository).where(Repository.name == repository))
        if repo is None:
            raise click.ClickException(f"unknown repository {repository!r}; add it with `parallax repo add`")
        branch_name = branch or repo.default_branch
        mirror = Mirror.for_repository(settings.data_dir, repo.name, repo.url)
    # Git work happens outside a database transaction (on SQLite one holds the write lock).
    click.echo(f"fetching {repo.url} into {mirror.path} ...")
    try:
        mirror.fetch(extra=[since])
        head = mirror.resolve_branch(branch_name)
        if head is None:
            raise click.ClickException(f"branch {branch_name!r} does not exist in {repo.url}")
        if not mirror.has_commit(since):
            raise click.ClickException(f"commit {since} is not in {repo.url}")
        chain = mirror.rev_list(head, first_parent=True, max_count=limit + 1)
        if since not in chain:
            if len(chain) > limit:
                raise click.ClickException(f"{since[:12]} is more than {limit} commits below the head of "
                                           f"{branch_name}; raise --limit")
            raise click.ClickException(f"{since[:12]} is not in the first-parent history of {branch_name}")
        chain = chain[:chain.index(since) + 1]
        click.echo(f"{branch_name}: {len(chain)} commit(s) from {since[:12]} to {head[:12]}")
        parents = list(mirror.commit_info([since])[0].parents)
        infos = mirror.commits(head, parents, max_count=max(limit * 4, 10_000))
        head_depth = mirror.first_parent_depth(head)
    except (GitError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    with database.session() as session, use_settings(settings):
        repo = session.scalar(select(Repository).where(Repository.name == repository))
        commit_graph.record_commits(session, repo, infos)
        click.echo(f"graph: {len(infos)} commit(s) stored with their parents")
        branch_row = commit_graph.get_branch(session, repo, branch_name)
        update = commit_graph.set_history(session, repo, branch_row, chain, head_depth)
        click.echo(f"history: {len(update.added)} commit(s) added, {len(update.dropped)} left the history")
        commits = commit_graph.commits_by_sha(session, repo, chain)
        queued = []
        for index, sha in enumerate(chain):
            queued += matrix.queue_backfill(session, repo, [(commits[sha], head_depth - index)])
            if (index + 1) % 50 == 0 or index + 1 == len(chain):
                click.echo(f"queued {index + 1}/{len(chain)} commit(s)")
        created = sum(1 for q in queued if q.created)
        click.echo(f"done: {created} job(s) queued, {len(queued) - created} already queued or done")

