"""Webhook ingest: handler latency for a push of 100 commits, and deliveries/s sustained.

For each backend (PostgreSQL, SQLite) it migrates a fresh database, makes a real git repository
with 101 commits (the repository "on GitHub"), starts the real service (`parallax serve`:
gunicorn, 4 workers x 8 threads, background duties on) on loopback and sends signed
`push` deliveries of 100 commits, each with its own delivery id:

1. one delivery, timed from the POST until the background worker marked it done (fetch into
   the mirror, commit graph, 100 jobs queued);
2. `--requests` deliveries one after another: per-request latency (p50/p99), client side;
3. `--clients` concurrent senders for `--seconds`: deliveries/s accepted (202).

Run:

    .venv/bin/python bench/webhook_ingest.py --requests 300 --clients 8 --seconds 10

Prints a table and writes JSON to bench/results/webhook_ingest.json.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import shutil
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import requests
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.migrate import upgrade  # noqa: E402
from app.demo.service_process import ServiceProcess  # noqa: E402
from app.git.workdir import git  # noqa: E402
from bench.backends import DEFAULT_POSTGRES, print_table, scratch_postgres, scratch_sqlite, write_results  # noqa: E402

SECRET = "bench-webhook-secret"
REPO = "bench/engine"




def make_upstream(path: Path, commits: int) -> list[str]:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    shas = []
    for i in range(commits + 1):
        (path / "engine.py").write_text(f"VERSION = {i}\n")
        git(path, "add", "engine.py")
        git(path, "commit", "-q", "-m", f"change {i}: tune the overlap scheduler")
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas


def push_payload(shas: list[str], url: str) -> bytes:
    """A push shaped like GitHub's (commit entries with author, message, file lists)."""
    now = datetime.now(timezone.utc).isoformat()
    person = {"name": "Bench", "email": "b@example.com", "username": "bench"}
    commits = [{"id": sha, "tree_id": sha, "distinct": True, "message": f"change {i}: tune the overlap scheduler",
                "timestamp": now, "url": f"{url}/commit/{sha}", "author": person, "committer": person,
                "added": [], "removed": [], "modified": ["engine.py"]} for i, sha in enumerate(shas[1:], 1)]
    payload: dict[str, Any] = {
        "ref": "refs/heads/main", "before": shas[0], "after": shas[-1], "created": False, "deleted": False,
        "forced": False, "base_ref": None, "compare": f"{url}/compare/{shas[0][:12]}...{shas[-1][:12]}",
        "commits": commits, "head_commit": commits[-1],
        "repository": {"id": 1, "name": "engine", "full_name": REPO, "clone_url": url, "default_branch": "main"},
        "pusher": {"name": "bench", "email": "b@example.com"}, "sender": {"login": "bench", "id": 1},
    }
    return json.dumps(payload).encode()


def headers(body: bytes) -> dict[str, str]:
    return {"X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4()), "Content-Type": "application/json",
            "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()}


def service(url: str, tmp: Path, upstream: Path) -> ServiceProcess:
    config = tmp / "parallax.toml"
    config.write_text(f'[[repositories]]\nname = "{REPO}"\nurl = "{upstream}"\ndefault_branch = "main"\n\n'
                      '[[suites]]\nname = "decode-throughput"\ncommand = ["true"]\nplatforms = ["cpu"]\n')
    return ServiceProcess({"PARALLAX_DATABASE_URL": url, "PARALLAX_CONFIG": str(config),
                           "PARALLAX_LOG_LEVEL": "WARNING", "PARALLAX_GITHUB_WEBHOOK_SECRET": SECRET,
                           "PARALLAX_DATA_DIR": str(tmp / "data")})


def wait_processed(engine: sa.Engine, delivery: str, timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with engine.connect() as conn:
            state = conn.execute(sa.text("SELECT state FROM webhook_deliveries WHERE delivery_id = :d"),
                                 {"d": delivery}).scalar()
        if state in ("done", "error"):
            return state
        time.sleep(0.05)
    raise RuntimeError(f"delivery {delivery} not processed within {timeout_s} s")


def run_backend(label: str, url: str, tmp: Path, shas: list[str], upstream: Path, n_requests: int,
                clients: int, seconds: float) -> dict[str, Any]:
    upgrade(url)
    engine = sa.create_engine(url)
    body = push_payload(shas, str(upstream))
    http = requests.Session()
    with service(url, tmp, upstream) as process:
        base = process.base
        first = headers(body)
        started = time.perf_counter()
        http.post(f"{base}/webhooks/github", data=body, headers=first).raise_for_status()
        state = wait_processed(engine, first["X-GitHub-Delivery"])
        processed_s = time.perf_counter() - started
        with engine.connect() as conn:
            jobs = conn.execute(sa.text("SELECT count(*) FROM jobs")).scalar()

        latencies = []
        for _ in range(n_requests):
            h = headers(body)
            t0 = time.perf_counter()
            response = http.post(f"{base}/webhooks/github", data=body, headers=h)
            latencies.append(time.perf_counter() - t0)
            assert response.status_code == 202, response.text

        accepted = [0] * clients
        stop_at = time.perf_counter() + seconds

        def sender(i: int) -> None:
            session = requests.Session()
            while time.perf_counter() < stop_at:
                if session.post(f"{base}/webhooks/github", data=body, headers=headers(body)).status_code == 202:
                    accepted[i] += 1

        threads = [threading.Thread(target=sender, args=(i,)) for i in range(clients)]
        t0 = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - t0
    engine.dispose()
    ms = np.array(latencies) * 1000
    return {"backend": label, "server": "gunicorn 4x8", "payload_bytes": len(body), "commits": len(shas) - 1,
            "first_push_processed_s": round(processed_s, 2), "first_push_state": state, "jobs_queued": jobs,
            "requests": n_requests, "p50_ms": round(float(np.percentile(ms, 50)), 1),
            "p99_ms": round(float(np.percentile(ms, 99)), 1), "clients": clients, "seconds": round(wall, 1),
            "deliveries_per_s": round(sum(accepted) / wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server URL; a scratch database is used")
    parser.add_argument("--tmp", default="var/bench-webhooks")
    args = parser.parse_args()
    tmp = Path(args.tmp).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    upstream = tmp / "upstream"
    shas = make_upstream(upstream, args.commits)
    results = []
    with scratch_postgres(args.postgres) as url:
        shutil.rmtree(tmp / "data", ignore_errors=True)
        results.append(run_backend("postgresql", url, tmp, shas, upstream, args.requests, args.clients, args.seconds))
    with scratch_sqlite(tmp) as url:
        shutil.rmtree(tmp / "data", ignore_errors=True)
        results.append(run_backend("sqlite", url, tmp, shas, upstream, args.requests, args.clients, args.seconds))
    for r in results:
        r["payload_kb"] = round(r["payload_bytes"] / 1000, 1)
    print_table(results, [("backend", "backend"), ("commits", "commits"), ("body KB", "payload_kb"),
                          ("p50 ms", "p50_ms"), ("p99 ms", "p99_ms"), ("deliv/s", "deliveries_per_s"),
                          ("clients", "clients"), ("first push processed s", "first_push_processed_s")])
    write_results("webhook_ingest", results)


if __name__ == "__main__":
    main()
