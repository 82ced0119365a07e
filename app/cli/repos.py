"""`parallax repo add|list`: tracked repositories."""
from __future__ import annotations

import click
from sqlalchemy import select

from app.cli.context import CliContext, pass_context
from app.core.models import Repository
from app.git.repos import derive_name


@click.group()
def repo() -> None:
    """Tracked repositories."""


@repo.command("add")
@click.argument("url")
@click.option("--name", default=None, help="owner/name (default: derived from the URL)")
@click.option("--default-branch", default="main", show_default=True)
@pass_context
def repo_add(ctx: CliContext, url: str, name: str | None, default_branch: str) -> None:
    """Track a repository (GitHub URL, local path or file:// URL)."""
    name = name or derive_name(url)
    with ctx.database().session() as session:
        existing = session.scalar(select(Repository).where(Repository.name == name))
        if existing is not None:
            existing.url, existing.default_branch = url, default_branch
            click.echo(f"updated repository {name} ({url}, default branch {default_branch})")
        else:
            session.add(Repository(name=name, url=url, default_branch=default_branch))
            click.echo(f"added repository {name} ({url}, default branch {default_branch})")


@repo.command("list")
@pass_context
def repo_list(ctx: CliContext) -> None:
    """Tracked repositories: name, URL, default branch, own webhook secret or the global one."""
    with ctx.database().session() as session:
        rows = list(session.scalars(select(Repository).order_by(Repository.name)))
        for row in rows:
            secret = "own webhook secret" if row.webhook_secret else "global webhook secret"
            click.echo(f"{row.name}	{row.url}	{row.default_branch}	{secret}")
    if not rows:
        click.echo("no repositories; `parallax repo add URL` or [[repositories]] in parallax.toml", err=True)
