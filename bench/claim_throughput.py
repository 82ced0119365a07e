"""Claim throughput: N runner threads claiming jobs through the real HTTP API.

For each backend (PostgreSQL, SQLite) it migrates a fresh database, queues J jobs, starts the
real service (`parallax serve`: gunicorn, 4 workers x 8 threads) on loopback and lets N runners
claim and complete until the queue is empty; it reports claims/s and claim latency. Run:

    .venv/bin/python bench/claim_throughput.py --runners 16 --jobs 400

Prints a table and writes JSON to bench/results/claim_throughput.json.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import requests
import sqlalchemy as sa
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app import create_app  # noqa: E402
from app.auth import create_registration_token  # noqa: E402
from app.config import Settings, parse_catalogue  # noqa: E402
from app.migrate import upgrade  # noqa: E402
from app.models import Job, Repository, Suite  # noqa: E402
from app.queue import get_or_create_commit  # noqa: E402

DOC = {"schema": "parallax.results/1", "suite": "decode-throughput",
       "metrics": [{"name": "output_throughput", "unit": "tok/s", "direction": "higher_is_better",
                    "samples": [1.0, 2.0, 3.0]}],
       "context": {}, "environment": {"platform": "cpu"}}


def settings_for(url: str) -> Settings:
    catalogue = parse_catalogue({
        "repositories": [{"name": "bench/engine", "url": "file:///nonexistent"}],
        "suites": [{"name": "decode-throughput", "command": ["true"], "platforms": ["cpu"]}],
    })
    return Settings(database_url=url, admin_token="bench", **catalogue)


CATALOGUE = """
[[repositories]]
name = "bench/engine"
url = "file:///nonexistent"

[[suites]]
name = "decode-throughput"
command = ["true"]
platforms = ["cpu"]
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_service(url: str, tmp: Path) -> tuple[subprocess.Popen, str]:
    config = tmp / "parallax.toml"
    config.write_text(CATALOGUE)
    port = free_port()
    env = dict(os.environ, PARALLAX_DATABASE_URL=url, PARALLAX_CONFIG=str(config), PARALLAX_LOG_LEVEL="WARNING")
    process = subprocess.Popen([str(ROOT / ".venv/bin/parallax"), "serve", "--port", str(port), "--workers", "4"],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                return process, base
        except requests.ConnectionError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("parallax serve did not become healthy within 60 s")


def run_backend(label: str, url: str, runners: int, jobs: int, tmp: Path) -> dict[str, float | str | int]:
    upgrade(url)
    app = create_app(settings_for(url))
    db = app.extensions["parallax.db"]
    with db.session() as session:
        repo = session.scalar(sa.select(Repository))
        suite = session.scalar(sa.select(Suite))
        for i in range(jobs):
            commit = get_or_create_commit(session, repo, f"{i:040x}")
            session.add(Job(repository_id=repo.id, commit_id=commit.id, suite_id=suite.id, platform="cpu"))
        registration = create_registration_token(session)
    db.engine.dispose()
    process, base = start_service(url, tmp)
    latencies: list[float] = []
    lock = threading.Lock()
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
    process.terminate()
    process.wait(30)
    assert len(latencies) == jobs, f"{label}: {len(latencies)} claims for {jobs} jobs"
    ms = np.array(latencies) * 1000
    return {"backend": label, "server": "gunicorn 4x8", "runners": runners, "jobs": jobs, "wall_s": round(wall, 2),
            "claims_per_s": round(jobs / wall, 1), "claim_p50_ms": round(float(np.percentile(ms, 50)), 1),
            "claim_p99_ms": round(float(np.percentile(ms, 99)), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
                        help="server URL; a scratch database is created and dropped")
    parser.add_argument("--tmp", default="var/bench")
    args = parser.parse_args()
    results = []
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    admin = sa.create_engine(args.postgres, isolation_level="AUTOCOMMIT")
    name = f"parallax_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        pg_url = sa.engine.make_url(args.postgres).set(database=name).render_as_string(hide_password=False)
        results.append(run_backend("postgresql", pg_url, args.runners, args.jobs, Path(args.tmp)))
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    sqlite_path = Path(args.tmp) / f"claim-{uuid.uuid4().hex[:8]}.db"
    try:
        results.append(run_backend("sqlite", f"sqlite:///{sqlite_path.resolve()}", args.runners, args.jobs,
                                   Path(args.tmp)))
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{sqlite_path}{suffix}").unlink(missing_ok=True)
    header = f"{'backend':<11} {'runners':>7} {'jobs':>5} {'claims/s':>9} {'p50 ms':>7} {'p99 ms':>7}"
    print(header)
    for r in results:
        print(f"{r['backend']:<11} {r['runners']:>7} {r['jobs']:>5} {r['claims_per_s']:>9} "
              f"{r['claim_p50_ms']:>7} {r['claim_p99_ms']:>7}")
    out = ROOT / "bench/results/claim_throughput.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
