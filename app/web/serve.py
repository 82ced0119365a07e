"""`parallax serve`: gunicorn (several worker processes, threads for long-polls) or Flask's
development server. Every process runs the background loop; duty leases in the database make
sure each duty runs in one process at a time."""
from __future__ import annotations

import logging
from typing import Any

import click
from flask import Flask
from gunicorn.app.base import BaseApplication

from app import wiring
from app.core import duties
from app.core.migrate import SchemaBehind
from app.web import create_app

log = logging.getLogger(__name__)


def make_app(start_background: bool = True) -> Flask:
    try:
        flask_app = create_app()
    except SchemaBehind as exc:
        raise click.ClickException(str(exc)) from exc
    if start_background:
        duties.start(flask_app.extensions["parallax.db"], wiring.duties(), flask_app.extensions["parallax.settings"])
    return flask_app


def run(host: str, port: int, workers: int, threads: int, dev: bool) -> None:
    if dev:
        make_app().run(host=host, port=port, threaded=True)
        return
    make_app(start_background=False)  # fail fast, in the parent, on a database that is behind
    class Gunicorn(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            options: dict[str, Any] = {
                "bind": f"{host}:{port}", "workers": workers, "threads": threads,
                "worker_class": "gthread", "timeout": 120, "accesslog": "-",
                "graceful_timeout": 30,
            }
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self):  # type: ignore[no-untyped-def]
            return make_app()

    click.echo(f"parallax serving on http://{host}:{port} ({workers} workers x {threads} threads)", err=True)
    Gunicorn().run()
