"""Under the gevent worker a PostgreSQL query must not block the worker's other requests: the
worker process imported psycopg before it was monkey-patched, and `cooperative_psycopg` switches
psycopg to a wait function that yields. Checked in a child process shaped like a worker."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.support.settings import REPO_ROOT

CHILD = textwrap.dedent("""
    import sys, time
    import sqlalchemy as sa
    import psycopg                      # imported before patching, as in the gunicorn parent
    import gevent, gevent.monkey
    gevent.monkey.patch_all()
    from app.web.serve import cooperative_psycopg
    if sys.argv[2] == "cooperative":
        assert cooperative_psycopg()
    engine = sa.create_engine(sys.argv[1])
    ticks = []
    def ticker():
        for _ in range(20):
            ticks.append(time.monotonic())
            gevent.sleep(0.05)
    def query():
        gevent.sleep(0.2)  # the ticker is running by then
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT pg_sleep(1)"))
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
    gevent.joinall([gevent.spawn(ticker), gevent.spawn(query)])
    print(max(b - a for a, b in zip(ticks, ticks[1:])))
""")


def longest_pause(url: str, mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, url, mode], cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=60, env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return float(out.stdout.split()[-1])


def test_a_query_yields_to_other_greenlets(postgres_url: str) -> None:
    assert longest_pause(postgres_url, "cooperative") < 0.5


def test_without_the_switch_a_query_blocks_the_worker(postgres_url: str) -> None:
    assert longest_pause(postgres_url, "as-imported") > 0.9
