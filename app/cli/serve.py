"""`parallax serve`: the HTTP service and its background duties.

With gevent workers (the default) the standard library is patched here, before anything imports
`ssl` (requests, urllib3): gunicorn's gevent worker would otherwise patch it only after the fork,
warn in every worker, and leave urllib3's direct `ssl` imports blocking (TLS calls to GitHub
would stall every greenlet of the worker)."""
from __future__ import annotations

import sys

import click
from gevent import monkey


def _gevent_serve(argv: list[str]) -> bool:
    """`parallax serve` with gevent workers, judged from the command line before click parses it."""
    if len(argv) < 2 or argv[1] != "serve" or "--dev" in argv or "--help" in argv or "-h" in argv:
        return False
    for i, arg in enumerate(argv):
        if arg == "--worker-class" and i + 1 < len(argv):
            return argv[i + 1] == "gevent"
        if arg.startswith("--worker-class="):
            return arg.split("=", 1)[1] == "gevent"
    return True


if _gevent_serve(sys.argv):
    monkey.patch_all()

from app.web.serve import run  # noqa: E402  (after the patch above, on purpose)


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
