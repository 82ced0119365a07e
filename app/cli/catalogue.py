"""`parallax catalogue sync`: apply parallax.toml to the database, which a running service reads
its suites and repositories from (`app.jobs.catalogue` has the rules)."""
from __future__ import annotations

import click

from app.cli.context import CliContext, pass_context


@click.group()
def catalogue() -> None:
    """parallax.toml's repositories, platforms and suites in the database."""


@catalogue.command("sync")
@pass_context
def catalogue_sync(ctx: CliContext) -> None:
    """Apply parallax.toml (PARALLAX_CONFIG) to the database now. A running service reads suites
    and repositories from the database, so its next push and job use them without a restart.
    Entries removed from the file stay in the database (their history is kept)."""
    ctx.database()
    source = ctx.settings.config_path or "no parallax.toml (PARALLAX_CONFIG unset)"
    if ctx.catalogue_changes:
        click.echo(f"{source}: {len(ctx.catalogue_changes)} change(s) applied; a running service uses them "
                   f"from its next push or job")
    else:
        click.echo(f"{source}: the database already matches; nothing changed")
