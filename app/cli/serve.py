"""`parallax serve`: the HTTP service and its background duties."""
from __future__ import annotations

import click

from app.web.serve import run


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--workers", default=4, show_default=True, type=int, help="gunicorn worker processes")
@click.option("--threads", default=8, show_default=True, type=int, help="threads per gthread worker")
@click.option("--worker-class", default="gevent", show_default=True, type=click.Choice(["gevent", "gthread"]),
              help="gevent: a waiting long-poll holds no thread (docs/scaling.md); gthread: thread per request")
@click.option("--dev", is_flag=True, help="Flask's single-process development server instead of gunicorn")
def serve(host: str, port: int, workers: int, threads: int, worker_class: str, dev: bool) -> None:
    """Run the HTTP service (gunicorn with several workers) and its background duties."""
    run(host=host, port=port, workers=workers, threads=threads, dev=dev, worker_class=worker_class)
