"""The `parallax` command. Each subcommand imports what it needs only when it runs, so a runner
box without Flask or a database driver can still use `parallax runner`."""
from __future__ import annotations

import sys
from typing import Any

import click


def _settings() -> Any:
    from app.config import ConfigError, load_settings
    try:
        return load_settings()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def _database(settings: Any, *, check: bool = True) -> Any:
    """The database, checked to be at head and with parallax.toml's catalogue applied."""
    from app.catalogue import sync_catalogue
    from app.db import Database
    from app.migrate import SchemaBehind, ensure_current
    db = Database(settings.database_url)
    if check:
        try:
            ensure_current(db.engine)
        except SchemaBehind as exc:
            raise click.ClickException(str(exc)) from exc
        with db.session() as session:
            sync_catalogue(session, settings)
    return db


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Parallax: per-commit, cross-platform regression tracking for LLM serving engines."""


@main.group()
def db() -> None:
    """Database schema commands."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Bring the database (PARALLAX_DATABASE_URL) to the newest schema."""
    from app.migrate import current_revision, upgrade
    settings = _settings()
    upgrade(settings.database_url, revision)
    database = _database(settings, check=revision == "head")
    click.echo(f"database at revision {current_revision(database.engine)}")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--workers", default=4, show_default=True, type=int, help="gunicorn worker processes")
@click.option("--threads", default=8, show_default=True, type=int, help="threads per worker (long-polls)")
@click.option("--dev", is_flag=True, help="Flask's single-process development server instead of gunicorn")
def serve(host: str, port: int, workers: int, threads: int, dev: bool) -> None:
    """Run the HTTP service (gunicorn with several workers) and its background duties."""
    from app.serve import run
    run(host=host, port=port, workers=workers, threads=threads, dev=dev)


@main.group()
def token() -> None:
    """Runner registration tokens."""


@token.command("create")
@click.option("--note", default=None, help="who or what the token is for")
def token_create(note: str | None) -> None:
    """Create a runner registration token; prints it as the last line (shown only once)."""
    from app.auth import create_registration_token
    database = _database(_settings())
    with database.session() as session:
        value = create_registration_token(session, note)
    click.echo("registration token (store it now; only its hash is kept):", err=True)
    click.echo(value)


@main.group()
def repo() -> None:
    """Tracked repositories."""


@repo.command("add")
@click.argument("url")
@click.option("--name", default=None, help="owner/name (default: derived from the URL)")
@click.option("--default-branch", default="main", show_default=True)
def repo_add(url: str, name: str | None, default_branch: str) -> None:
    """Track a repository (GitHub URL, local path or file:// URL)."""
    from sqlalchemy import select

    from app.models import Repository
    from app.repos import derive_name
    database = _database(_settings())
    name = name or derive_name(url)
    with database.session() as session:
        existing = session.scalar(select(Repository).where(Repository.name == name))
        if existing is not None:
            existing.url, existing.default_branch = url, default_branch
            click.echo(f"updated repository {name} ({url}, default branch {default_branch})")
        else:
            session.add(Repository(name=name, url=url, default_branch=default_branch))
            click.echo(f"added repository {name} ({url}, default branch {default_branch})")


@main.group()
def user() -> None:
    """People who triage alerts and queue work through the API."""


@user.command("add")
@click.argument("name")
@click.option("--role", type=click.Choice(["maintainer", "admin"]), default="maintainer", show_default=True,
              help="maintainer: triage alerts; admin: also queue jobs through the API")
def user_add(name: str, role: str) -> None:
    """Add a user; prints their API token as the last line (shown only once)."""
    from app.auth import create_user
    database = _database(_settings())
    with database.session() as session:
        try:
            value = create_user(session, name, role)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from exc
    click.echo(f"user {name} ({role}) added; API token (store it now; only its hash is kept):", err=True)
    click.echo(value)


@main.command()
@click.argument("repository")
@click.argument("sha")
@click.option("--suite", default=None, help="only this suite")
@click.option("--platform", default=None, help="only this platform")
@click.option("--rerun", is_flag=True, help="queue again even if the cell already ran")
def enqueue(repository: str, sha: str, suite: str | None, platform: str | None, rerun: bool) -> None:
    """Queue the suite x platform matrix (or one cell) for commit SHA of REPOSITORY."""
    from sqlalchemy import select

    from app import queue
    from app.api import SHA_RE
    from app.errors import APIError
    from app.models import JobReason, Repository
    if not SHA_RE.match(sha):
        raise click.BadParameter(f"must be a full 40-character lowercase hex SHA, got {sha!r}", param_hint="SHA")
    database = _database(_settings())
    with database.session() as session:
        repo_row = session.scalar(select(Repository).where(Repository.name == repository))
        if repo_row is None:
            raise click.ClickException(f"unknown repository {repository!r}; add it with `parallax repo add`")
        try:
            results = queue.enqueue_matrix(session, repo_row, sha, suite_name=suite, platform=platform,
                                           reason=JobReason.rerun if rerun else JobReason.manual,
                                           force=rerun)
        except APIError as exc:
            raise click.ClickException(exc.detail) from exc
        if not results:
            raise click.ClickException("nothing to queue: no suite matches (configure suites in parallax.toml)")
        for job, created in results:
            state = "queued" if created else f"exists ({job.state.value})"
            click.echo(f"job {job.id}: {repository}@{sha[:12]} {job.suite.name} on {job.platform}: {state}")


@main.command()
@click.option("--workdir", default="var/demo", show_default=True)
@click.option("--port", default=0, type=int, help="port for the demo service (0: any free port)")
@click.option("--model", default="smollm2-135m", show_default=True,
              help="model the engine runs (tiny-random: a seeded random tiny model, seconds instead of minutes)")
def demo(workdir: str, port: int, model: str) -> None:
    """Run the main job end to end on the embedded database and print a summary."""
    from app.demo import run_demo
    sys.exit(run_demo(workdir=workdir, port=port, model=model))


def _add_area_commands() -> None:
    """The runner, detection and GitHub commands live beside their areas; their modules import
    only click at the top, so `parallax runner` still works on a box without Flask."""
    from app import detection_cli, github_cli
    from runners import cli as runner_cli
    for module in (runner_cli, detection_cli, github_cli):
        for command in module.COMMANDS:
            main.add_command(command)


_add_area_commands()
