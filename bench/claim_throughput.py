"""Claim throughput: N runner threads claiming jobs through the real HTTP API.

For each backend (PostgreSQL, SQLite) it migrates a fresh database, queues J jobs, starts the
real service (`parallax serve`: gunicorn, 4 workers x 8 threads) on loopback and lets N runners
claim and complete until the queue is empty; it reports claims/s and claim latency. Run:

    .venv/bin/python bench/claim_throughput.py --runners 16 --jobs 400

Prints a table and writes JSON to bench/results/claim_throughput.json.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np
import requests
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.demo.service_process import ServiceProcess  # noqa: E402
from bench.backends import (  # noqa: E402
    DEFAULT_POSTGRES,
    DOC,
    print_table,
    scratch_postgres,
    scratch_sqlite,
    seed,
    service_env,
    write_results,
)


def run_backend(label: str, url: str, runners: int, jobs: int, tmp: Path) -> dict[str, float | str | int]:
    registration = seed(url, jobs)
    latencies: list[float] = []
    lock = threading.Lock()
    with ServiceProcess(service_env(url, tmp)) as service:
        base = service.base
        progress = tqdm(total=jobs, desc=f"{label} claims", unit="job", file=sys.stderr)

        def runner(i: int) -> None:
            http = requests.Session()
            token = http.post(f"{base}/api/v1/runners", json={"name": f"r{i}", "labels": {"platform": "cpu"}},
                              headers={"Authorization": f"Bearer {registration}"}).json()["token"]
            http.headers["Authorization"] = f"Bearer {token}"
            while True:
                started = time.perf_counter()
                response = http.post(f"{base}/api/v1/jobs/claim", json={"wait_s": 0})
                elapsed = time.perf_counter() - started
                if response.status_code == 204:
                    return
                response.raise_for_status()
                job = response.json()["job"]
                http.post(f"{base}/api/v1/jobs/{job['id']}/complete", json=DOC).raise_for_status()
                with lock:
                    latencies.append(elapsed)
                    progress.update(1)

        started = time.perf_counter()
        threads = [threading.Thread(target=runner, args=(i,)) for i in range(runners)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        progress.close()
    assert len(latencies) == jobs, f"{label}: {len(latencies)} claims for {jobs} jobs"
    ms = np.array(latencies) * 1000
    return {"backend": label, "server": "gunicorn 4x8", "runners": runners, "jobs": jobs, "wall_s": round(wall, 2),
            "claims_per_s": round(jobs / wall, 1), "claim_p50_ms": round(float(np.percentile(ms, 50)), 1),
            "claim_p99_ms": round(float(np.percentile(ms, 99)), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server URL; a scratch database is used")
    parser.add_argument("--tmp", default="var/bench")
    args = parser.parse_args()
    tmp = Path(args.tmp).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    results = []
    with scratch_postgres(args.postgres) as url:
        results.append(run_backend("postgresql", url, args.runners, args.jobs, tmp))
    with scratch_sqlite(tmp) as url:
        results.append(run_backend("sqlite", url, args.runners, args.jobs, tmp))
    print_table(results, [("backend", "backend"), ("runners", "runners"), ("jobs", "jobs"),
                          ("claims/s", "claims_per_s"), ("p50 ms", "claim_p50_ms"), ("p99 ms", "claim_p99_ms")])
    write_results("claim_throughput", results)


if __name__ == "__main__":
    main()
