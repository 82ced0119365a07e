"""What every service command shares through click's context object: the settings (environment
+ parallax.toml) and the database, checked to be at the newest schema and with the catalogue
applied (each change it made is named on stderr: the running service reads the catalogue from
the database, so a CLI command applies parallax.toml edits to it too)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import click

from app import wiring
from app.core.config import ConfigError, Settings, load_settings
from app.core.db import UNREACHABLE, Database, database_problem
from app.core.errors import APIError
from app.core.migrate import SchemaBehind, ensure_current
from app.jobs.catalogue import sync_catalogue


@contextmanager
def api_errors_as_click() -> Iterator[None]:
    """A refusal from an area (unknown id, invalid request: `APIError`) ends the command with its
    message instead of a traceback."""
    try:
        yield
    except APIError as exc:
        raise click.ClickException(exc.detail) from exc


@dataclass
class CliContext:
    _settings: Settings | None = None
    _databases: dict[bool, Database] = field(default_factory=dict)
    catalogue_changes: list[str] = field(default_factory=list)  # what the first check applied

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            try:
                self._settings = load_settings()
            except ConfigError as exc:
                raise click.ClickException(str(exc)) from exc
        return self._settings

    def database(self, *, check: bool = True) -> Database:
        """The database; with `check`, refused when behind the migrations, and synced with the
        catalogue. The areas are connected (`app.wiring`) as in the service."""
        if check not in self._databases:
            wiring.connect()
            try:
                db = Database(self.settings.database_url)
                if check:
                    try:
                        ensure_current(db.engine)
                    except SchemaBehind as exc:
                        raise click.ClickException(str(exc)) from exc
                    with db.session() as session:
                        self.catalogue_changes = sync_catalogue(session, self.settings)
                    for change in self.catalogue_changes:
                        click.echo(f"parallax.toml applied: {change}", err=True)
            except UNREACHABLE as exc:
                raise click.ClickException(database_problem(self.settings.database_url, exc)) from exc
            self._databases[check] = db
        return self._databases[check]


pass_context = click.make_pass_decorator(CliContext, ensure=True)
