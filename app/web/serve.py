"""`parallax serve`: gunicorn (several worker processes) or Flask's development server. Every
process runs the background loop; duty leases in the database make sure each duty runs in one
process at a time.

The default worker class is gevent: each request is a greenlet, so a claim long-poll that waits
for a job costs a few kilobytes and no thread, and 500 waiting runners leave room for webhooks
and the dashboard (docs/scaling.md has the measurements behind the choice). psycopg is switched
to its cooperative wait function in each worker, so database calls yield to other greenlets
too. `--worker-class gthread` keeps the thread-per-request worker.
"""
from __future__ import annotations

import logging
import os
import sys
import tempfile
from typing import Any

import click
import gevent.monkey
import prometheus_client.values
from flask import Flask
from gunicorn.app.base import BaseApplication
from prometheus_client import multiprocess

from app import wiring
from app.core import duties
from app.core.config import ConfigError, load_settings
from app.core.db import UNREACHABLE, database_problem
from app.core.migrate import SchemaBehind
from app.web import create_app
from app.web.capacity import class_limits

log = logging.getLogger(__name__)
WORKER_CLASSES = ("gevent", "gthread")


def make_app(start_background: bool = True) -> Flask:
    try:
        flask_app = create_app()
    except SchemaBehind as exc:
        raise click.ClickException(str(exc)) from exc
    except UNREACHABLE as exc:
        raise click.ClickException(database_problem(load_settings().database_url, exc)) from exc
    if start_background:
        duties.start(flask_app.extensions["parallax.db"], wiring.duties(), flask_app.extensions["parallax.settings"])
    return flask_app


def cooperative_psycopg() -> bool:
    """psycopg picks its wait function when first imported, and the gunicorn parent imported it
    before the worker was monkey-patched: use the poll-based wait, which gevent makes
    cooperative, instead of the C one, which would block every greenlet of the worker."""
    waiting = sys.modules.get("psycopg.waiting")
    if waiting is None or not gevent.monkey.is_module_patched("select"):
        return False
    waiting.wait = waiting.wait_poll  # type: ignore[attr-defined]
    return True


def per_process_metrics() -> None:
    """prometheus_client's multiprocess mode: each worker writes its own files, /metrics sums them."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="parallax-metrics-")
    # The value class is chosen when prometheus_client is imported, before the variable was set.
    prometheus_client.values.ValueClass = prometheus_client.values.get_value_class()


def run(host: str, port: int, workers: int, threads: int, dev: bool, worker_class: str = "gevent") -> None:
    if worker_class not in WORKER_CLASSES:
        raise click.ClickException(f"--worker-class must be one of {', '.join(WORKER_CLASSES)}, got {worker_class!r}")
    try:
        settings = load_settings()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc
    if dev:
        make_app().run(host=host, port=port, threaded=True)
        return
    # Fail fast, in the parent, on a database that is behind; then close its connections so the
    # workers do not inherit them.
    make_app(start_background=False).extensions["parallax.db"].engine.dispose()
    per_process_metrics()
    connections = sum(class_limits(settings).values()) + 100

    class Gunicorn(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            options: dict[str, Any] = {
                "bind": f"{host}:{port}", "workers": workers, "threads": threads,
                "worker_class": worker_class, "worker_connections": connections,
                "timeout": 120, "accesslog": "-", "graceful_timeout": 30,
                "child_exit": lambda _arbiter, worker: multiprocess.mark_process_dead(worker.pid),
            }
            if "control_socket_disable" in self.cfg.settings:  # gunicorn >= 25.1 would put a socket under $HOME
                options["control_socket_disable"] = True
            for key, value in options.items():
                self.cfg.set(key, value)

        def load(self):  # type: ignore[no-untyped-def]
            if worker_class == "gevent":
                cooperative_psycopg()
            return make_app()

    shape = f"{workers} gevent workers" if worker_class == "gevent" else f"{workers} workers x {threads} threads"
    click.echo(f"parallax serving on http://{host}:{port} ({shape})", err=True)
    Gunicorn().run()
