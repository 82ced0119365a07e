"""Fleet scale: hundreds of runners long-polling through the real `parallax serve` while a
producer queues jobs and signed webhooks and dashboard requests arrive alongside.

For each service shape (one instance, two instances on the same PostgreSQL) it migrates a fresh
scratch database, starts the service(s), registers R runners that long-poll `POST
/api/v1/jobs/claim` (`wait_s` 20) and complete every job they get, and queues J jobs through
`app.jobs.queue.enqueue` (the code path webhooks and the API use, NOTIFY included) at a steady
rate. Meanwhile it sends signed push webhooks and `GET /` dashboard requests at fixed rates. It
reports webhook and dashboard latency, claim latency (from just before a job's transaction
commits to the runner receiving it), claims/s, and checks in the database that every job was
claimed exactly once and completed. Run:

    .venv/bin/python bench/fleet.py --runners 500 --jobs 2000
    .venv/bin/python bench/fleet.py --runners 500 --jobs 2000 --worker-class gthread --shapes 1x4  # the old server

Prints a table and writes JSON to bench/results/fleet.json.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import random
import sys
import threading
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.db import Database  # noqa: E402
from app.core.models import Job, JobAttempt, JobState, Repository, Suite  # noqa: E402
from app.demo.service_process import ServiceProcess  # noqa: E402
from app.jobs.queue import enqueue, get_or_create_commit  # noqa: E402
from bench.backends import (  # noqa: E402
    DEFAULT_POSTGRES,
    DOC,
    print_table,
    scratch_postgres,
    seed,
    service_env,
    write_results,
)

SECRET = "fleet-bench-secret"
WAIT_S = 20


def produce(url: str, jobs: int, rate: float, batch: int, queued_at: dict[int, float], done: threading.Event) -> None:
    """Queue `jobs` jobs, `batch` per transaction, at `rate` jobs/s; records when each batch
    was about to commit (claim latency is measured from there)."""
    database = Database(url)
    started = time.perf_counter()
    made = 0
    while made < jobs and not done.is_set():
        size = min(batch, jobs - made)
        with database.session() as session:
            repo = session.scalar(sa.select(Repository))
            suite = session.scalar(sa.select(Suite))
            ids = []
            for i in range(made, made + size):
                commit = get_or_create_commit(session, repo, f"{i:040x}")
                job, _ = enqueue(session, repo, commit, suite, "cpu")
                ids.append(job.id)
            moment = time.perf_counter()
            session.commit()
        for job_id in ids:
            queued_at[job_id] = moment
        made += size
        pause = started + made / rate - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    database.engine.dispose()


def push_body() -> bytes:
    return json.dumps({"ref": "refs/heads/main", "before": "1" * 40, "after": uuid.uuid4().hex + "0" * 8,
                       "commits": [], "repository": {"full_name": "bench/not-tracked"}}).encode()


def signed(body: bytes) -> dict[str, str]:
    return {"X-GitHub-Event": "push", "X-GitHub-Delivery": str(uuid.uuid4()), "Content-Type": "application/json",
            "X-Hub-Signature-256": "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()}


class Fleet:
    def __init__(self, bases: list[str], registration: str, runners: int, jobs: int) -> None:
        self.bases = bases
        self.registration = registration
        self.runners = runners
        self.jobs = jobs
        self.claimed: Counter[int] = Counter()
        self.received_at: dict[int, float] = {}
        self.completed = 0
        self.completed_by_instance: Counter[str] = Counter()
        self.all_done = asyncio.Event()
        self.busy_503 = 0
        self.errors: Counter[str] = Counter()
        self.webhook_ms: list[float] = []
        self.dashboard_ms: list[float] = []
        self.failed_side: Counter[str] = Counter()
        self.first_claim: float | None = None
        self.last_complete = 0.0

    async def register(self, http: aiohttp.ClientSession, i: int) -> tuple[str, str]:
        base = self.bases[i % len(self.bases)]
        for _ in range(30):
            async with http.post(f"{base}/api/v1/runners", json={"name": f"r{i}", "labels": {"platform": "cpu"}},
                                 headers={"Authorization": f"Bearer {self.registration}"}) as response:
                if response.status == 201:
                    return base, (await response.json())["token"]
            await asyncio.sleep(1)
        raise RuntimeError(f"runner {i} could not register")

    async def runner(self, http: aiohttp.ClientSession, base: str, token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"}
        while not self.all_done.is_set():
            try:
                async with http.post(f"{base}/api/v1/jobs/claim", json={"wait_s": WAIT_S}, headers=headers,
                                     timeout=aiohttp.ClientTimeout(total=WAIT_S + 30)) as response:
                    if response.status == 204:
                        continue
                    if response.status == 503:
                        self.busy_503 += 1
                        await asyncio.sleep(random.uniform(0.5, 1.5))
                        continue
                    if response.status != 200:
                        self.errors[f"claim HTTP {response.status}"] += 1
                        await asyncio.sleep(1)
                        continue
                    job = (await response.json())["job"]
                received = time.perf_counter()
                self.first_claim = self.first_claim or received
                self.claimed[job["id"]] += 1
                self.received_at.setdefault(job["id"], received)
                if not await self.complete(http, base, headers, job["id"]):
                    continue
                self.completed += 1
                self.completed_by_instance[base] += 1
                self.last_complete = time.perf_counter()
                if self.completed >= self.jobs:
                    self.all_done.set()
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                self.errors[f"{type(exc).__name__}: {exc}"[:200]] += 1
                await asyncio.sleep(1)

    async def complete(self, http: aiohttp.ClientSession, base: str, headers: dict[str, str], job_id: int) -> bool:
        """Upload the results, retrying 503s (a full route class) as the runner agent does."""
        for attempt in range(30):
            async with http.post(f"{base}/api/v1/jobs/{job_id}/complete", json=DOC, headers=headers) as done:
                if done.status in (200, 201):
                    return True
                if done.status != 503:
                    self.errors[f"complete HTTP {done.status}: {(await done.text())[:200]}"] += 1
                    return False
            self.busy_503 += 1
            await asyncio.sleep(min(8.0, 0.5 * 2 ** attempt) * random.uniform(0.5, 1.0))
        self.errors["complete: still 503 after 30 tries"] += 1
        return False

    async def side_traffic(self, http: aiohttp.ClientSession, kind: str, rate: float) -> None:
        """Webhooks or dashboard requests at `rate`/s, each on its own (a slow answer does not
        delay the next request, as with GitHub and browsers)."""
        pending: set[asyncio.Task[None]] = set()
        i = 0
        while not self.all_done.is_set():
            task = asyncio.create_task(self.one_side_request(http, kind, self.bases[i % len(self.bases)]))
            pending.add(task)
            task.add_done_callback(pending.discard)
            i += 1
            await asyncio.sleep(1 / rate)
        if pending:
            await asyncio.wait(pending)

    async def one_side_request(self, http: aiohttp.ClientSession, kind: str, base: str) -> None:
        started = time.perf_counter()
        timeout = aiohttp.ClientTimeout(total=10)  # GitHub gives up on a webhook after 10 s
        try:
            if kind == "webhook":
                body = push_body()
                async with http.post(f"{base}/webhooks/github", data=body, headers=signed(body),
                                     timeout=timeout) as response:
                    await response.read()
                    ok = response.status in (200, 202)
            else:
                async with http.get(f"{base}/", timeout=timeout) as response:
                    await response.read()
                    ok = response.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            ok = False
        elapsed = (time.perf_counter() - started) * 1000
        if ok:
            (self.webhook_ms if kind == "webhook" else self.dashboard_ms).append(elapsed)
        else:
            self.failed_side[kind] += 1


async def drive(fleet: Fleet, url: str, args: argparse.Namespace, progress_label: str) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        sem = asyncio.Semaphore(16)

        async def register(i: int) -> tuple[str, str]:
            async with sem:
                return await fleet.register(http, i)

        registered = await asyncio.gather(*(register(i) for i in range(args.runners)))
        runners = [asyncio.create_task(fleet.runner(http, base, token)) for base, token in registered]
        await asyncio.sleep(3)  # let every runner start waiting before jobs arrive
        waiting = await scrape_waiting(http, fleet.bases)
        queued_at: dict[int, float] = {}
        stop = threading.Event()
        producer = threading.Thread(target=produce, args=(url, args.jobs, args.rate, args.batch, queued_at, stop))
        side = [asyncio.create_task(fleet.side_traffic(http, "webhook", args.webhook_rate)),
                asyncio.create_task(fleet.side_traffic(http, "dashboard", args.dashboard_rate))]
        started = time.perf_counter()
        producer.start()
        while not fleet.all_done.is_set() and time.perf_counter() - started < args.deadline_s:
            await asyncio.sleep(2)
            print(f"  {progress_label}: {len(queued_at)} queued, {fleet.completed} completed, "
                  f"{len(fleet.webhook_ms)} webhooks, {len(fleet.dashboard_ms)} dashboard", file=sys.stderr)
        fleet.all_done.set()
        stop.set()
        producer.join()
        await asyncio.gather(*side)
        for task in runners:
            task.cancel()
        await asyncio.gather(*runners, return_exceptions=True)
    latency = [max(0.0, fleet.received_at[j] - queued_at[j]) * 1000 for j in fleet.received_at if j in queued_at]
    return {"queued_at": queued_at, "claim_ms": latency, "waiting_before_jobs": waiting}


async def scrape_waiting(http: aiohttp.ClientSession, bases: list[str]) -> float:
    total = 0.0
    for base in bases:
        try:
            async with http.get(f"{base}/metrics", timeout=aiohttp.ClientTimeout(total=10)) as response:
                text = await response.text()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return float("nan")
        total += sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                     if line.startswith("parallax_longpolls_waiting{"))
    return total


def percentile(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 1) if values else float("nan")


def run_shape(postgres: str, instances: int, workers: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    label = f"{instances}x{workers} {args.worker_class}" + (" poll" if args.no_notify else "")
    with scratch_postgres(postgres) as url:
        registration = seed(url)
        env = service_env(url, tmp, PARALLAX_GITHUB_WEBHOOK_SECRET=SECRET,
                          PARALLAX_CLAIM_NOTIFY="0" if args.no_notify else "1")
        with ExitStack() as stack:
            logs = [stack.enter_context(open(tmp / f"serve-{i}.log", "w")) for i in range(instances)]
            services = [stack.enter_context(ServiceProcess(env, workers=workers, log=logs[i], start_timeout_s=300,
                                                           args=["--worker-class", args.worker_class]))
                        for i in range(instances)]
            fleet = Fleet([s.base for s in services], registration, args.runners, args.jobs)
            load_before = os.getloadavg()[0]
            out = asyncio.run(drive(fleet, url, args, label))
            load_after = os.getloadavg()[0]
        database = Database(url)
        with database.session() as session:
            states = Counter(dict(session.execute(sa.select(Job.state, sa.func.count()).group_by(Job.state)).all()))
            attempts = session.scalar(sa.select(sa.func.count()).select_from(JobAttempt))
        database.engine.dispose()
    succeeded = states.get(JobState.succeeded, 0)
    wall = (fleet.last_complete - min(out["queued_at"].values())) if out["queued_at"] and fleet.completed else float("nan")
    return {
        "shape": label, "instances": instances, "workers": workers, "runners": args.runners, "jobs": args.jobs,
        "waiting_before_jobs": out["waiting_before_jobs"],
        "queued": len(out["queued_at"]), "completed": fleet.completed, "succeeded_in_db": succeeded,
        "attempts_in_db": attempts, "claimed_twice": sum(1 for n in fleet.claimed.values() if n > 1),
        "exactly_once": succeeded == args.jobs and attempts == args.jobs and set(fleet.claimed.values()) == {1},
        "claims_per_s": round(fleet.completed / wall, 1) if wall == wall and wall > 0 else float("nan"),
        "claim_p50_ms": percentile(out["claim_ms"], 50), "claim_p99_ms": percentile(out["claim_ms"], 99),
        "webhook_n": len(fleet.webhook_ms), "webhook_p50_ms": percentile(fleet.webhook_ms, 50),
        "webhook_p99_ms": percentile(fleet.webhook_ms, 99), "webhook_failed": fleet.failed_side["webhook"],
        "dashboard_n": len(fleet.dashboard_ms), "dashboard_p50_ms": percentile(fleet.dashboard_ms, 50),
        "dashboard_p99_ms": percentile(fleet.dashboard_ms, 99), "dashboard_failed": fleet.failed_side["dashboard"],
        "completed_by_instance": [fleet.completed_by_instance[base] for base in fleet.bases],
        "runner_api_503s": fleet.busy_503, "client_errors": dict(fleet.errors),
        "load_1min_before": round(load_before, 2), "load_1min_after": round(load_after, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runners", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rate", type=float, default=20.0, help="jobs queued per second")
    parser.add_argument("--batch", type=int, default=10, help="jobs per enqueue transaction")
    parser.add_argument("--webhook-rate", type=float, default=5.0, help="signed push webhooks per second")
    parser.add_argument("--dashboard-rate", type=float, default=1.0, help="dashboard home requests per second")
    parser.add_argument("--shapes", default="1x2,2x1", help="instances x workers per instance, comma-separated")
    parser.add_argument("--worker-class", default="gevent", choices=["gevent", "gthread"])
    parser.add_argument("--no-notify", action="store_true", help="PARALLAX_CLAIM_NOTIFY=0: waiters poll the table")
    parser.add_argument("--deadline-s", type=float, default=300.0, help="give up on a shape after this long")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server URL; a scratch database is used")
    parser.add_argument("--tmp", default="var/bench")
    parser.add_argument("--out", default="fleet")
    args = parser.parse_args()
    tmp = Path(args.tmp).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    results = []
    for shape in args.shapes.split(","):
        instances, workers = (int(part) for part in shape.split("x"))
        results.append(run_shape(args.postgres, instances, workers, args, tmp))
        write_results(args.out, {"args": vars(args), "results": results})  # a later shape may fail to start
    print_table(results, [("shape", "shape"), ("waiting", "waiting_before_jobs"), ("done", "completed"),
                          ("once", "exactly_once"), ("claims/s", "claims_per_s"), ("claim p50", "claim_p50_ms"),
                          ("claim p99", "claim_p99_ms"), ("hook p50", "webhook_p50_ms"), ("hook p99", "webhook_p99_ms"),
                          ("hook fail", "webhook_failed"), ("dash p50", "dashboard_p50_ms"),
                          ("dash p99", "dashboard_p99_ms"), ("dash fail", "dashboard_failed"),
                          ("load", "load_1min_after")])
    write_results(args.out, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
