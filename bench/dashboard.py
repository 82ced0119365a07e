"""Dashboard server time at 2,000 commits.

For each backend (SQLite, PostgreSQL) it migrates a fresh database, seeds 2,000 commits on
`main` x 3 platforms (cuda, rocm, cpu) x 4 metrics x 5 samples (`bench/history.py`; ROCm alone
loses 15 % at commit 1400, every platform 8 % at 1800), runs the detector over it (so the alert
tables hold what a real service would), then times each page in-process through the Flask test
client: the time from request to response inside the app, without network or browser. The
machine's load average is recorded with the results: on a shared machine it moves the numbers.

Targets (issue 15): home < 300 ms, series API < 100 ms, commit and compare pages < 200 ms.

Run:

    .venv/bin/python bench/dashboard.py [--commits 2000] [--repeat 15] [--backend sqlite --backend postgresql]

Prints a table (median and 95th percentile per page) and writes bench/results/dashboard.json.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402

from app.core.config import Settings, parse_catalogue  # noqa: E402
from app.core.migrate import upgrade  # noqa: E402
from app.core.scratch import postgres_unreachable  # noqa: E402
from app.detection.service import rescan  # noqa: E402
from app.web import create_app  # noqa: E402
from bench.backends import DEFAULT_POSTGRES, print_table, scratch_postgres, scratch_sqlite, write_results  # noqa: E402
from bench.history import Step, seed  # noqa: E402

REPOSITORY = "bench/engine"
SUITE = "decode-throughput"
TARGETS_MS = {"home": 300, "series API": 100, "commit page": 200, "compare page": 200}


def settings_for(url: str) -> Settings:
    catalogue = parse_catalogue({
        "repositories": [{"name": REPOSITORY, "url": "https://github.com/bench/engine.git"}],
        "suites": [{"name": SUITE, "command": ["true"], "platforms": ["cuda", "rocm", "cpu"]}],
    })
    # The home page's content rendered per request: this bench times the render, which the
    # service otherwise does once per PARALLAX_HOME_MAX_AGE_S in the background.
    return Settings(database_url=url, home_max_age_s=0.0, **catalogue)


def timed(client: Any, path: str, repeat: int) -> dict[str, Any]:
    for _ in range(2):                                   # warm caches (templates, statements)
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code, response.get_data(as_text=True)[:300])
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200
    times.sort()
    return {"median_ms": round(statistics.median(times), 1),
            "p95_ms": round(times[min(len(times) - 1, int(0.95 * len(times)))], 1), "bytes": len(response.data)}


def run_backend(backend: str, url: str, commits: int, repeat: int) -> list[dict[str, Any]]:
    print(f"[{backend}] migrating", flush=True)
    upgrade(url)
    app = create_app(settings_for(url))
    db = app.extensions["parallax.db"]
    start = time.perf_counter()
    with db.session() as session:
        history = seed(session, repository=REPOSITORY, suite=SUITE, commits=commits, progress=True,
                       steps=(Step(int(commits * 0.7), ("rocm",), 0.85),
                              Step(int(commits * 0.9), ("cuda", "rocm", "cpu"), 0.92)))
    print(f"[{backend}] seeded {commits} commits in {time.perf_counter() - start:.1f} s; detecting", flush=True)
    start = time.perf_counter()
    report = rescan(db)
    print(f"[{backend}] detection: {len(report.created)} alert changes in {time.perf_counter() - start:.1f} s", flush=True)
    # A service in steady state has planner statistics (PostgreSQL's autovacuum gathers them);
    # a table filled a second ago has none.
    with db.engine.begin() as conn:
        conn.execute(sa.text("ANALYZE"))
    client = app.test_client()
    at = int(commits * 0.7)
    shas = history.shas
    pages = {
        "home": "/",
        "series API": f"/api/v1/series?repository={REPOSITORY}&suite={SUITE}&metric=output_throughput&platform=rocm",
        "commit page": f"/commits/{shas[at]}",
        "compare page": f"/compare?repository={REPOSITORY}&a={shas[at - 1]}&b={shas[at]}",
        "series page (300 in view)": f"/series?repository={REPOSITORY}&suite={SUITE}&metric=output_throughput",
        "alerts page": "/alerts",
        "runners page": "/runners",
    }
    rows = []
    for name, path in pages.items():
        result = timed(client, path, repeat)
        target = TARGETS_MS.get(name)
        rows.append({"backend": backend, "page": name, **result, "target_ms": target or "–",
                     "ok": "–" if target is None else ("yes" if result["median_ms"] < target else "NO")})
        print(f"[{backend}] {name}: {result['median_ms']} ms", flush=True)
    db.engine.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"])
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES)
    args = parser.parse_args()
    backends = args.backend or ["sqlite", "postgresql"]
    rows: list[dict[str, Any]] = []
    for backend in backends:
        if backend == "sqlite":
            with scratch_sqlite(ROOT / "var" / "bench-dashboard") as url:
                rows += run_backend(backend, url, args.commits, args.repeat)
        else:
            reason = postgres_unreachable(args.postgres)
            if reason is not None:
                print(f"[postgresql] skipped: {reason}")
                continue
            with scratch_postgres(args.postgres, prefix="parallax_bench_dashboard") as url:
                rows += run_backend(backend, url, args.commits, args.repeat)
    print()
    print_table(rows, [("backend", "backend"), ("page", "page"), ("median ms", "median_ms"), ("p95 ms", "p95_ms"),
                       ("target ms", "target_ms"), ("met", "ok"), ("bytes", "bytes")])
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(f"load average (1, 5, 15 min): {' '.join(load)}")
    write_results("dashboard", {"load_average": load, "commits": args.commits, "platforms": 3, "metrics": 4, "samples": 5,
                                "repeat": args.repeat, "rows": rows})


if __name__ == "__main__":
    main()
