"""Years of history: a PostgreSQL database seeded with COPY to `--scale` x (50,000 default-branch
commits + 10,000 pull-request heads) x 6 platforms x 10 metrics x 5 samples (scale 1 is about
18 M samples in 3.6 M measurement rows), then the service's hot paths timed on it, and the
database size per table before and after retention.

It starts a PostgreSQL of its own (`initdb` in a temporary directory, another port, as the
postgres user; bench/pg_instance.py), never the machine's shared server, and removes it at the
end. Timed in-process through the Flask test client (request to response inside the app):

- home page, series API over the newest 300 and 5,000 commits (a miss: the series cache emptied
  before each request, app/web/series_cache.py; and a hit: the same request again), commit
  page, compare page;
- an incremental detection scan after one new run (stored through claim + complete);
- starting a bisect (`POST /api/v1/bisects`, which answers 202 and leaves git to the duty);
- claim and complete of one job through the runner protocol.

Then `[[retention]]` rules drop the raw samples of superseded PR heads (the heads of closed pull
requests here) and the database is measured again: after a plain VACUUM (space reusable by
PostgreSQL) and after VACUUM FULL (space given back to the file system).

Targets (as at 2,000 commits, issue 15): home < 300 ms, series API < 100 ms, pages < 200 ms,
detection < 50 ms.

Run:

    .venv/bin/python bench/history_scale.py --scale 0.02      # 1,200 commits, a few minutes
    .venv/bin/python bench/history_scale.py --scale 0.1       # 5,000 commits: the smallest with 5,000
    .venv/bin/python bench/history_scale.py --scale 1          # 60,000 commits, ~18 M samples

Prints tables and writes bench/results/history_scale-<scale>.json.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import psycopg  # noqa: E402

from app.core.clock import utcnow  # noqa: E402
from app.core.config import RetentionRule, Settings, parse_catalogue  # noqa: E402
from app.core.migrate import upgrade  # noqa: E402
from app.detection.service import scan_dirty  # noqa: E402
from app.retention.prune import plan, prune  # noqa: E402
from app.web import create_app  # noqa: E402
from bench.backends import print_table, write_results  # noqa: E402
from bench.pg_instance import PgInstance, available, scratch_root  # noqa: E402

REPOSITORY = "bench/engine"
SUITE = "decode-throughput"
PLATFORMS = ("cuda", "rocm", "cpu", "cuda-sim", "rocm-sim", "xpu")
METRICS = [  # name, unit, direction, level
    ("output_throughput", "tok/s", "higher_is_better", 1200.0), ("request_throughput", "req/s", "higher_is_better", 9.0),
    ("itl_p50", "ms", "lower_is_better", 8.0), ("itl_p99", "ms", "lower_is_better", 14.0),
    ("ttft_p50", "ms", "lower_is_better", 45.0), ("ttft_p99", "ms", "lower_is_better", 90.0),
    ("e2e_p50", "ms", "lower_is_better", 900.0), ("e2e_p99", "ms", "lower_is_better", 1500.0),
    ("peak_memory", "MB", "lower_is_better", 2100.0), ("hazards", "count", "lower_is_better", 0.0),
]
SAMPLES = 5
MAIN_COMMITS, PR_HEADS = 50_000, 10_000
TARGETS_MS = {"home": 300, "series API (300), miss": 100, "series API (300), hit": 100,
              "series API (5000), miss": 100, "series API (5000), hit": 100, "commit page": 200,
              "compare page": 200, "detection scan after one run": 50}
ADMIN = "bench-admin-token"


def sha(kind: str, i: int) -> str:
    return hashlib.sha1(f"{kind}:{i}".encode()).hexdigest()


def settings_for(url: str) -> Settings:
    catalogue = parse_catalogue({
        "platforms": list(PLATFORMS),
        "repositories": [{"name": REPOSITORY, "url": "https://github.com/bench/engine.git"}],
        "suites": [{"name": SUITE, "command": ["true"], "platforms": list(PLATFORMS)}],
    })
    return Settings(database_url=url, home_max_age_s=0.0, admin_token=ADMIN, **catalogue)


def seed(url: str, main_commits: int, pr_heads: int, log: Callable[[str], None]) -> dict[str, Any]:
    """COPY the history in: commits, the main branch, pull requests (two heads each: the first
    superseded, the second the current head; all but the newest 50 pull requests closed), one
    succeeded job and run per commit and platform, 10 measurements of 5 samples per run."""
    rng = np.random.default_rng(7)
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    now = utcnow()
    days = max(1, main_commits // 40)          # ~40 merges a day
    start = now - timedelta(days=days)
    ids: dict[str, int] = {}
    with psycopg.connect(dsn) as conn:
        repo_id = conn.execute("SELECT id FROM repositories WHERE name = %s", (REPOSITORY,)).fetchone()[0]  # type: ignore[index]
        suite_id = conn.execute("SELECT id FROM suites WHERE name = %s", (SUITE,)).fetchone()[0]  # type: ignore[index]
        total = main_commits + pr_heads
        at = [start + timedelta(days=days * i / total) for i in range(total)]
        with conn.cursor().copy("COPY commits (id, repository_id, sha, author, summary, committed_at, graph_loaded, created_at)"
                                " FROM STDIN") as copy:
            for i in range(total):
                kind, n = ("main", i) if i < main_commits else ("pr", i - main_commits)
                copy.write_row((i + 1, repo_id, sha(kind, n), "Ada Lovelace", f"engine: change {i}", at[i], True, at[i]))
        conn.execute("INSERT INTO branches (id, repository_id, name, head_commit_id, updated_at) VALUES (1, %s, 'main', %s, %s)",
                     (repo_id, main_commits, now))
        with conn.cursor().copy("COPY branch_commits (branch_id, commit_id, position, active) FROM STDIN") as copy:
            for i in range(main_commits):
                copy.write_row((1, i + 1, i, True))
        prs = pr_heads // 2
        with conn.cursor().copy("COPY pull_requests (id, repository_id, number, title, base_branch, head_commit_id, "
                                "merge_base_commit_id, state, updated_at) FROM STDIN") as copy:
            for p in range(prs):
                head = main_commits + 2 * p + 2       # the second head is current
                base = max(1, int(main_commits * (p + 1) / prs))
                copy.write_row((p + 1, repo_id, p + 1, f"PR {p + 1}", "main", head, base,
                                "open" if p >= prs - 50 else "closed", at[head - 1]))
        log(f"seeded {total} commits and {prs} pull requests")
        runners = []
        for p in PLATFORMS:
            runners.append(conn.execute(
                "INSERT INTO runners (name, platform, labels, facts, token_hash, disabled, created_at, last_seen_at) "
                "VALUES (%s, %s, %s, '{}', %s, false, %s, %s) RETURNING id",
                (f"{p}-box", p, json.dumps({"platform": p}), uuid.uuid4().hex, now, now)).fetchone()[0])  # type: ignore[index]
        regression_at = int(main_commits * 0.7)
        job_id = 0
        measurement_id = 0
        started = time.perf_counter()
        with conn.cursor().copy("COPY jobs (id, repository_id, commit_id, suite_id, platform, state, reason, priority, attempt, "
                                "max_attempts, runner_id, cancel_requested, log_bytes, pull_request_id, created_at, started_at, "
                                "finished_at) FROM STDIN") as jobs_copy:
            for i in range(total):
                pr = None if i < main_commits else (i - main_commits) // 2 + 1
                for k, p in enumerate(PLATFORMS):
                    job_id += 1
                    jobs_copy.write_row((job_id, repo_id, i + 1, suite_id, p, "succeeded",
                                         "push" if pr is None else "pull_request", 0, 1, 3, runners[k], False, 0, pr,
                                         at[i], at[i], at[i] + timedelta(seconds=90)))
        log(f"seeded {job_id} jobs")
        with conn.cursor().copy("COPY runs (id, job_id, attempt, runner_id, commit_id, suite_id, platform, document_sha256, "
                                "environment, context, context_fingerprint, simulated, created_at) FROM STDIN") as runs_copy:
            run_id = 0
            for i in range(total):
                for k, p in enumerate(PLATFORMS):
                    run_id += 1
                    runs_copy.write_row((run_id, run_id, 1, runners[k], i + 1, suite_id, p, "0" * 64,
                                         json.dumps({"platform": p}), '{"model": "SmolLM2-135M"}', f"fp-{p}",
                                         p.endswith("-sim"), at[i] + timedelta(seconds=90)))
        log(f"seeded {run_id} runs")
        with conn.cursor().copy("COPY measurements (id, run_id, metric, unit, direction, samples, sample_count, sample_median, "
                                "sample_min, sample_max) FROM STDIN") as copy:
            run_id = 0
            for i in range(total):
                noise = rng.normal(0.0, 0.01, size=(len(PLATFORMS), len(METRICS), SAMPLES))
                for k, p in enumerate(PLATFORMS):
                    run_id += 1
                    slow = 0.85 if p == "rocm" and regression_at <= i < main_commits else 1.0
                    for m, (name, unit, direction, level) in enumerate(METRICS):
                        factor = slow if direction == "higher_is_better" else 1.0 / slow
                        values = np.round(level * factor * (1.0 + noise[k, m]), 3) if level else np.zeros(SAMPLES)
                        ordered = np.sort(values)
                        measurement_id += 1
                        copy.write_row((measurement_id, run_id, name, unit, direction, json.dumps(values.tolist()), SAMPLES,
                                        float(ordered[SAMPLES // 2]), float(ordered[0]), float(ordered[-1])))
                if (i + 1) % max(1, total // 10) == 0:
                    log(f"  measurements: {i + 1}/{total} commits ({time.perf_counter() - started:.0f} s)")
        for table in ("commits", "branches", "pull_requests", "jobs", "runs", "measurements", "runners"):
            conn.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
        conn.commit()
        ids.update(main=main_commits, total=total, regression_at=regression_at, measurements=measurement_id)
    return ids


def table_sizes(url: str) -> dict[str, int]:
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT relname, pg_total_relation_size(oid) FROM pg_class WHERE relkind = 'r' "
                            "AND relnamespace = 'public'::regnamespace ORDER BY 2 DESC").fetchall()
    return {name: int(size) for name, size in rows}


def timed(call: Callable[[], Any], repeat: int) -> dict[str, Any]:
    call()                                                  # warm: templates, statements, caches
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {"median_ms": round(statistics.median(times), 1),
            "p95_ms": round(times[min(len(times) - 1, int(0.95 * len(times)))], 1)}


def get(client: Any, path: str) -> Callable[[], Any]:
    def call() -> Any:
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code, response.get_data(as_text=True)[:300])
        return response
    return call


def measure(url: str, seeded: dict[str, Any], repeat: int, log: Callable[[str], None], round_: str = "a") -> list[dict[str, Any]]:
    app = create_app(settings_for(url))
    db = app.extensions["parallax.db"]
    client = app.test_client()
    main_shas = [sha("main", i) for i in range(seeded["main"])]
    at = seeded["regression_at"]
    base = f"/api/v1/series?repository={REPOSITORY}&suite={SUITE}&metric=output_throughput&platform=rocm"
    rows: list[dict[str, Any]] = []

    def row(name: str, result: dict[str, Any]) -> None:
        target = TARGETS_MS.get(name)
        rows.append({"what": name, **result, "target_ms": target or "–",
                     "met": "–" if target is None else ("yes" if result["median_ms"] < target else "NO")})
        log(f"{name}: {result['median_ms']} ms (p95 {result['p95_ms']})")

    cache = app.extensions["parallax.series_cache"]

    def missed(path: str) -> Callable[[], Any]:
        """The series API answered from the database: the cache emptied before each request."""
        fetch = get(client, path)

        def call() -> Any:
            cache.clear()
            return fetch()
        return call

    for name, call in {"home": get(client, "/"),
                       "series API (300), miss": missed(base + "&last=300"),
                       "series API (300), hit": get(client, base + "&last=300"),
                       "series API (5000), miss": missed(base + "&last=5000"),
                       "series API (5000), hit": get(client, base + "&last=5000"),
                       "commit page": get(client, f"/commits/{main_shas[at]}"),
                       "compare page": get(client, f"/compare?repository={REPOSITORY}&a={main_shas[at - 1]}&b={main_shas[at]}"),
                       }.items():
        row(name, timed(call, repeat))
        if name.endswith("hit"):  # every request of the row was a hit (the miss row's clear reset the counts)
            assert (cache.stats.hits, cache.stats.misses) == (repeat + 1, 1), cache.stats

    admin = {"Authorization": f"Bearer {ADMIN}"}
    token = client.post("/api/v1/registration-tokens", json={}, headers=admin).get_json()["token"]
    runner = client.post("/api/v1/runners", json={"name": "bench-rocm", "labels": {"platform": "rocm"}},
                         headers={"Authorization": f"Bearer {token}"}).get_json()["token"]
    runner_headers = {"Authorization": f"Bearer {runner}"}
    claims, completes, scans = [], [], []
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    for n in range(repeat + 1):
        new_sha = sha(f"new-{round_}", n)
        with psycopg.connect(dsn) as conn:  # the next merge on main, as a push would record it
            commit_id = conn.execute(
                "INSERT INTO commits (repository_id, sha, graph_loaded, created_at) SELECT id, %s, true, now() "
                "FROM repositories WHERE name = %s RETURNING id", (new_sha, REPOSITORY)).fetchone()[0]  # type: ignore[index]
            conn.execute("INSERT INTO branch_commits (branch_id, commit_id, position, active) "
                         "SELECT 1, %s, max(position) + 1, true FROM branch_commits WHERE branch_id = 1", (commit_id,))
        queued = client.post("/api/v1/jobs", json={"repository": REPOSITORY, "commit": new_sha, "suite": SUITE,
                                                   "platform": "rocm"}, headers=admin)
        assert queued.status_code == 201, queued.get_data(as_text=True)
        start = time.perf_counter()
        job = client.post("/api/v1/jobs/claim", json={"wait_s": 0}, headers=runner_headers).get_json()["job"]
        claims.append((time.perf_counter() - start) * 1000)
        document = {"schema": "parallax.results/1", "suite": SUITE,
                    "metrics": [{"name": m[0], "unit": m[1], "direction": m[2], "samples": [m[3] or 0.0] * SAMPLES}
                                for m in METRICS],
                    "context": {"model": "SmolLM2-135M"}, "environment": {"platform": "rocm"}}
        start = time.perf_counter()
        done = client.post(f"/api/v1/jobs/{job['id']}/complete?attempt={job['attempt']}", data=json.dumps(document),
                           headers=runner_headers)
        completes.append((time.perf_counter() - start) * 1000)
        assert done.status_code == 201, done.get_data(as_text=True)
        start = time.perf_counter()
        scan_dirty(db)
        scans.append((time.perf_counter() - start) * 1000)
    for name, values in (("claim", claims[1:]), ("complete", completes[1:]), ("detection scan after one run", scans[1:])):
        values.sort()
        row(name, {"median_ms": round(statistics.median(values), 1), "p95_ms": round(values[int(0.95 * (len(values) - 1))], 1)})

    def start_bisect() -> Any:
        response = client.post("/api/v1/bisects", json={"repository": REPOSITORY, "suite": SUITE, "metric": "output_throughput",
                                                        "platform": "rocm", "good": main_shas[max(0, at - 100)],
                                                        "bad": main_shas[min(len(main_shas) - 1, at + 100)]},
                               headers=admin)
        assert response.status_code == 202, response.get_data(as_text=True)
    row("start a bisect (202)", timed(start_bisect, repeat))
    db.engine.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.02, help="fraction of 50,000 main commits + 10,000 PR heads")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--keep", action="store_true", help="leave the PostgreSQL instance running (prints its URL)")
    args = parser.parse_args()
    reason = available()
    if reason:
        raise SystemExit(f"cannot start a PostgreSQL of the bench's own: {reason}")
    began = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - began:7.1f} s] {message}", flush=True)

    main_commits, pr_heads = max(300, int(MAIN_COMMITS * args.scale)), max(20, int(PR_HEADS * args.scale) // 2 * 2)
    root = scratch_root()
    instance = PgInstance.create(root / "primary")
    instance.start()
    try:
        url = instance.create_database("history_scale")
        upgrade(url)
        create_app(settings_for(url)).extensions["parallax.db"].engine.dispose()   # the catalogue rows
        samples = (main_commits + pr_heads) * len(PLATFORMS) * len(METRICS) * SAMPLES
        log(f"seeding {main_commits} main commits + {pr_heads} PR heads x {len(PLATFORMS)} platforms x "
            f"{len(METRICS)} metrics x {SAMPLES} samples = {samples:,} samples")
        started = time.perf_counter()
        seeded = seed(url, main_commits, pr_heads, log)
        seed_s = time.perf_counter() - started
        instance.execute("VACUUM ANALYZE", "history_scale")
        log(f"seeded in {seed_s:.0f} s; timing")
        sizes_before = table_sizes(url)
        rows = measure(url, seeded, args.repeat, log)

        settings = replace(settings_for(url), retention=(RetentionRule("superseded-pr-head", 0.0),))
        app = create_app(settings)
        db = app.extensions["parallax.db"]
        found = plan(db, settings)
        log(f"retention would prune {found.measurements} measurements; pruning")
        started = time.perf_counter()
        report = prune(db, settings, progress=lambda r: r.batches % 100 == 0 and log(f"  pruned {r.measurements}"))
        prune_s = time.perf_counter() - started
        db.engine.dispose()
        instance.execute("VACUUM ANALYZE", "history_scale")
        sizes_vacuum = table_sizes(url)
        instance.execute("VACUUM FULL measurements", "history_scale")
        sizes_full = table_sizes(url)
        rows_after = measure(url, seeded, args.repeat, log, round_="b")
    finally:
        if not args.keep:
            instance.destroy()
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept: {instance.url('history_scale')}")

    print()
    print(f"scale {args.scale}: {main_commits} main commits + {pr_heads} PR heads; seeded in {seed_s:.0f} s")
    print_table(rows, [("what", "what"), ("median ms", "median_ms"), ("p95 ms", "p95_ms"), ("target ms", "target_ms"),
                       ("met", "met")])
    print(f"\nafter retention ({report.measurements} measurements pruned in {report.batches} batches, {prune_s:.0f} s):")
    print_table(rows_after, [("what", "what"), ("median ms", "median_ms"), ("p95 ms", "p95_ms"), ("target ms", "target_ms"),
                             ("met", "met")])
    size_rows = [{"table": t, "before MB": round(sizes_before[t] / 2**20, 1),
                  "after VACUUM MB": round(sizes_vacuum[t] / 2**20, 1),
                  "after VACUUM FULL MB": round(sizes_full[t] / 2**20, 1)} for t in list(sizes_before)[:8]]
    size_rows.append({"table": "all tables", "before MB": round(sum(sizes_before.values()) / 2**20, 1),
                      "after VACUUM MB": round(sum(sizes_vacuum.values()) / 2**20, 1),
                      "after VACUUM FULL MB": round(sum(sizes_full.values()) / 2**20, 1)})
    print()
    print_table(size_rows, [("table", "table"), ("before MB", "before MB"), ("after VACUUM MB", "after VACUUM MB"),
                            ("after VACUUM FULL MB", "after VACUUM FULL MB")])
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average (1, 5, 15 min): {' '.join(load)}")
    write_results(f"history_scale-{args.scale:g}", {
        "scale": args.scale, "main_commits": main_commits, "pr_heads": pr_heads, "platforms": len(PLATFORMS),
        "metrics": len(METRICS), "samples": SAMPLES, "seed_s": round(seed_s, 1), "prune_s": round(prune_s, 1),
        "pruned_measurements": report.measurements, "rows": rows, "rows_after_retention": rows_after,
        "sizes_before": sizes_before, "sizes_after_vacuum": sizes_vacuum, "sizes_after_vacuum_full": sizes_full,
        "load_average": load})


if __name__ == "__main__":
    main()
