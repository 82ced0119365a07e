"""`parallax serve`: gunicorn (several worker processes, threads for long-polls) or Flask's
development server. Every process runs the background loop; duty leases in the database make
sure each duty runs in one process at a time."""
from __future__ import annotations

import logging
from typing import Any

import click

log = logging.getLogger(__name__)


def make_app(start_background: bool = True):  # type: ignore[no-untyped-def]
    from app import background, create_app
    from app.migrate import SchemaBehind
    try:
        flask_app = create_app()
    except SchemaBehind as exc:
        raise click.ClickException(str(exc)) from exc
    if start_background:
        background.start(flask_app.extensions["parallax.db"])
    return flask_app


def run(host: str, port: int, workers: int, threads: int, dev: bool) -> None:
    if dev:
        make_app().run(host=host, port=port, threaded=True)
        return
    make_app(start_background=False)  # fail fast, in the parent, on a database that is behind
    from gunicorn.app.base import BaseApplication

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
