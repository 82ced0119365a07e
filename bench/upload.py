"""Upload throughput: 16 concurrent CI uploaders (`POST /api/v1/runs`) next to the runner's
`complete` path, on PostgreSQL, through the real service (`parallax serve`, gunicorn) on loopback.

One scratch database is seeded with J queued jobs on J commits. First N runner threads claim
and complete jobs until half of them are done (a runner result costs a claim and a complete;
both latencies are kept). Then N uploader threads upload a results document for each commit of
the other half — completing its queued job, as an upload does when a push queued the matrix —
each with its own Idempotency-Key. Both use the runner's HTTP client (`runners.client.Client`,
which `parallax upload` uses too), so a 503 from the service's capacity limit is retried with
its backoff and counts in the latency, as it would for a real client. The two phases share the database, the server and the
document, so the numbers compare the two ways a result arrives. Run:

    .venv/bin/python bench/upload.py --clients 16 --jobs 800

Prints a table and writes JSON to bench/results/upload.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.auth.ci_tokens import create_ci_token  # noqa: E402
from app.core.db import Database  # noqa: E402
from app.demo.service_process import ServiceProcess  # noqa: E402
from bench.backends import DEFAULT_POSTGRES, DOC, print_table, scratch_postgres, seed, service_env, write_results  # noqa: E402
from runners.client import Client  # noqa: E402

REPOSITORY = "bench/engine"
DOCUMENT = json.dumps(DOC).encode()


def in_threads(count: int, work: Callable[[int], None]) -> float:
    """Run `work(i)` on `count` threads; the wall time until all finished."""
    started = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def summary(path: str, clients: int, results: int, wall: float, latencies: dict[str, list[float]]) -> dict[str, Any]:
    row: dict[str, Any] = {"path": path, "clients": clients, "results": results, "wall_s": round(wall, 2),
                           "results_per_s": round(results / wall, 1)}
    for name, values in latencies.items():
        ms = np.array(values) * 1000
        row[f"{name}_p50_ms"] = round(float(np.percentile(ms, 50)), 1)
        row[f"{name}_p99_ms"] = round(float(np.percentile(ms, 99)), 1)
    return row


def runner_phase(base: str, registration: str, clients: int, target: int) -> dict[str, Any]:
    timings: list[tuple[float, float]] = []  # (claim, complete) seconds per result
    reserved = [0]
    lock = threading.Lock()
    progress = tqdm(total=target, desc="runner complete", unit="result", file=sys.stderr)

    def runner(i: int) -> None:
        _, token = Client(base).register(registration, f"r{i}", {"platform": "cpu"}, {})
        client = Client(base, token)
        while True:
            with lock:  # the phase stops at `target` results; the other jobs stay for the uploads
                if reserved[0] >= target:
                    return
                reserved[0] += 1
            started = time.perf_counter()
            job = client.claim(0, budget_s=600)
            claimed = time.perf_counter() - started
            assert job is not None, "the queue ran dry before the runner phase's target"
            started = time.perf_counter()
            client.complete(job["id"], job["attempt"], DOCUMENT, budget_s=600)
            completed = time.perf_counter() - started
            with lock:
                timings.append((claimed, completed))
                progress.update(1)

    wall = in_threads(clients, runner)
    progress.close()
    assert len(timings) == target, f"{len(timings)} runner results for {target}"
    return summary("runner claim + complete", clients, target, wall,
                   {"result": [a + b for a, b in timings], "claim": [a for a, _ in timings],
                    "complete": [b for _, b in timings]})


def upload_phase(base: str, token: str, clients: int, shas: list[str]) -> dict[str, Any]:
    latencies: list[float] = []
    lock = threading.Lock()
    pending = list(shas)
    progress = tqdm(total=len(shas), desc="CI upload", unit="result", file=sys.stderr)

    def uploader(_: int) -> None:
        client = Client(base, token)
        while True:
            with lock:
                if not pending:
                    return
                sha = pending.pop()
            body = {"repository": REPOSITORY, "sha": sha, "platform": "cpu", "suite": "decode-throughput",
                    "document": DOC, "ci": {"provider": "bench"}}
            started = time.perf_counter()
            reply = client.request("POST", "/runs", json=body, headers={"Idempotency-Key": str(uuid.uuid4())},
                                   budget_s=600)
            elapsed = time.perf_counter() - started
            if reply.status_code != 201:
                raise RuntimeError(f"upload of {sha}: HTTP {reply.status_code}: {reply.text[:300]}")
            with lock:
                latencies.append(elapsed)
                progress.update(1)

    wall = in_threads(clients, uploader)
    progress.close()
    assert len(latencies) == len(shas), f"{len(latencies)} uploads for {len(shas)}"
    return summary("CI upload (POST /api/v1/runs)", clients, len(shas), wall, {"result": latencies})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16, help="concurrent runners, then concurrent uploaders")
    parser.add_argument("--jobs", type=int, default=800, help="queued jobs: half completed by runners, half by uploads")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server URL; a scratch database is used")
    parser.add_argument("--tmp", default="var/bench")
    args = parser.parse_args()
    if args.jobs < 2 or args.clients < 1:
        parser.error("need --jobs >= 2 and --clients >= 1")
    tmp = Path(args.tmp).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    half = args.jobs // 2
    with scratch_postgres(args.postgres) as url:
        registration = seed(url, args.jobs)
        database = Database(url)
        with database.session() as session:
            token = create_ci_token(session, REPOSITORY, "cpu", note="bench")[1]
        database.engine.dispose()
        # seed() names commit i `{i:040x}` and queues its job i; runners claim the lowest ids first.
        upload_shas = [f"{i:040x}" for i in range(half, args.jobs)]
        with ServiceProcess(service_env(url, tmp)) as service:
            rows = [runner_phase(service.base, registration, args.clients, half),
                    upload_phase(service.base, token, args.clients, upload_shas)]
    for row in rows:
        row.setdefault("complete_p50_ms", "–")
        row.setdefault("complete_p99_ms", "–")
    columns = [("path", "path"), ("clients", "clients"), ("results", "results"), ("results/s", "results_per_s"),
               ("p50 ms", "result_p50_ms"), ("p99 ms", "result_p99_ms"), ("complete p50", "complete_p50_ms"),
               ("complete p99", "complete_p99_ms")]
    print_table(rows, columns)
    write_results("upload", {"backend": "postgresql", "server": "parallax serve (gunicorn, default workers)",
                             "load_average": os.getloadavg(), "rows": rows})


if __name__ == "__main__":
    main()
