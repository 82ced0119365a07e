"""`parallax repo add|list`: tracked repositories."""
from __future__ import annotations

import os

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
@click.option("--webhook-secret-env", default=None, metavar="VAR",
              help="take this repository's own webhook secret from environment variable VAR (kept out of the "
                   "shell history); without it, PARALLAX_GITHUB_WEBHOOK_SECRET is used")
@pass_context
def repo_add(ctx: CliContext, url: str, name: str | None, default_branch: str, webhook_secret_env: str | None) -> None:
    """Track a repository (GitHub URL, local path or file:// URL)."""
    name = name or derive_name(url)
    secret = None
    if webhook_secret_env is not None:
        secret = os.environ.get(webhook_secret_env, "")
        if len(secret) < 16:
            raise click.BadParameter(f"environment variable {webhook_secret_env} must hold the webhook secret "
                                     f"(at least 16 characters; it is {'unset' if not secret else 'shorter'})",
                                     param_hint="--webhook-secret-env")
    with ctx.database().session() as session:
        existing = session.scalar(select(Repository).where(Repository.name == name))
        if existing is not None:
            existing.url, existing.default_branch = url, default_branch
            existing.webhook_secret = secret or existing.webhook_secret
            click.echo(f"updated repository {name} ({url}, default branch {default_branch})")
        else:
            session.add(Repository(name=name, url=url, default_branch=default_branch, webhook_secret=secret))
            click.echo(f"added repository {name} ({url}, default branch {default_branch})")
        if secret:
            click.echo(f"webhooks for {name} are checked with its own secret from ${webhook_secret_env}")


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
