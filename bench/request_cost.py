"""What one request costs the service: Python CPU time and SQL statements per request, by route,
on PostgreSQL, in the state bench/fleet.py leaves (500 runners, thousands of jobs, half of them
with results). Under a saturated gevent worker a request's latency grows with both: its CPU time
holds the worker, and each statement is a round trip that yields and then waits behind every
other runnable request. This tells which route to make cheaper; bench/fleet.py tells whether it
helped.

Requests go through the Flask test client in this process (no HTTP, no gunicorn), so the numbers
are the application's own cost. A job's cost is a claim (no waiting) plus its complete.

    .venv/bin/python bench/request_cost.py [--jobs 2000] [--runners 500] [--requests 200]

Prints a table and writes JSON to bench/results/request_cost.json.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.clock import utcnow  # noqa: E402
from app.core.config import load_settings  # noqa: E402
from app.core.db import Database  # noqa: E402
from app.core.models import Runner  # noqa: E402
from app.jobs.queue import deliver_stored_runs  # noqa: E402
from app.web import create_app  # noqa: E402
from bench.backends import (  # noqa: E402
    DEFAULT_POSTGRES,
    DOC,
    StatementLog,
    scratch_postgres,
    seed,
    service_env,
    write_results,
)

SECRET = "request-cost-secret"


def measure(label: str, request: Callable[[], None], log: StatementLog, n: int) -> dict[str, Any]:
    cpu_ms, statements, sent = [], [], []
    for _ in tqdm(range(n), desc=label, file=sys.stderr, leave=False):
        start = time.process_time()
        _, sent = log.during(request)
        cpu_ms.append(1000 * (time.process_time() - start))
        statements.append(len(sent))
    # The last request's statements: what to cut next.
    return {"route": label, "requests": n, "cpu_ms_p50": statistics.median(cpu_ms),
            "cpu_ms_mean": statistics.fmean(cpu_ms), "statements": statistics.median(statements),
            "last_request_statements": sent}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    parser.add_argument("--jobs", type=int, default=2000, help="jobs queued before measuring")
    parser.add_argument("--runners", type=int, default=500, help="runners registered before measuring")
    parser.add_argument("--requests", type=int, default=200, help="measured requests per route")
    args = parser.parse_args()
    if args.requests < 1 or args.jobs < 2 * args.requests or args.runners < 1:
        parser.error("need --requests >= 1, --jobs >= 2 x --requests (a claim per measured job) and --runners >= 1")
    with scratch_postgres(args.postgres) as url:
        registration = seed(url, jobs=args.jobs)
        database = Database(url)
        with database.session() as session:
            for i in range(args.runners - 1):
                session.add(Runner(name=f"idle-{i}", platform="cpu", labels={"platform": "cpu"},
                                   token_hash=hashlib.sha256(f"idle-{i}".encode()).hexdigest(), last_seen_at=utcnow()))
        database.engine.dispose()
        tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"request-cost-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        os.environ.update(service_env(url, tmp, PARALLAX_GITHUB_WEBHOOK_SECRET=SECRET))
        app = create_app()
        db = app.extensions["parallax.db"]
        client = app.test_client()
        made = client.post("/api/v1/runners", json={"name": "bench", "labels": {"platform": "cpu"}},
                           headers={"Authorization": f"Bearer {registration}"})
        headers = {"Authorization": f"Bearer {made.json['token']}"}
        claimed: list[int] = []

        def claim() -> None:
            response = client.post("/api/v1/jobs/claim", json={"wait_s": 0}, headers=headers)
            claimed.append(response.json["job"]["id"])

        def complete() -> None:
            response = client.post(f"/api/v1/jobs/{claimed.pop(0)}/complete", json=DOC, headers=headers)
            assert response.status_code in (200, 201), response.get_data(as_text=True)

        def webhook() -> None:
            body = json.dumps({"ref": "refs/heads/main", "before": "1" * 40, "after": uuid.uuid4().hex + "0" * 8,
                               "commits": [], "repository": {"full_name": "bench/not-tracked"}}).encode()
            signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            client.post("/webhooks/github", data=body, headers={
                "X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4()),
                "Content-Type": "application/json", "X-Hub-Signature-256": signature})

        def home() -> None:
            assert client.get("/").status_code == 200

        # The same page with its content rendered on every request (PARALLAX_HOME_MAX_AGE_S=0):
        # what the snapshot saves, and what its background refresh costs once per max age.
        fresh_app = create_app(load_settings(home_max_age_s=0.0))
        fresh_client = fresh_app.test_client()
        fresh_counter = StatementLog(fresh_app.extensions["parallax.db"].engine)

        def home_rendered() -> None:
            assert fresh_client.get("/").status_code == 200

        for _ in range(args.jobs // 2 - args.requests):  # half the jobs have results, as mid-way through a fleet run
            claim()
            complete()
        deliver_stored_runs(db, limit=100_000)
        counter = StatementLog(db.engine)
        rows = [measure("claim (no wait)", claim, counter, args.requests),
                measure("complete", complete, counter, args.requests),
                measure("webhook (push, untracked repository)", webhook, counter, args.requests),
                measure("dashboard GET / (snapshot, the default)", home, counter, max(args.requests // 5, 1)),
                measure("dashboard GET / (content rendered)", home_rendered, fresh_counter,
                        max(args.requests // 5, 1))]
        db.engine.dispose()
        fresh_app.extensions["parallax.db"].engine.dispose()
    print(f"{args.runners} runners, {args.jobs} jobs ({args.jobs // 2} with results), PostgreSQL, "
          f"process CPU time through the Flask test client\n")
    print("| route | requests | CPU ms p50 | CPU ms mean | SQL statements |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['route']} | {row['requests']} | {row['cpu_ms_p50']:.1f} | {row['cpu_ms_mean']:.1f} "
              f"| {row['statements']:.0f} |")
    write_results("request_cost", {"jobs": args.jobs, "runners": args.runners, "load": os.getloadavg()[0],
                                   "rows": rows})


if __name__ == "__main__":
    main()
