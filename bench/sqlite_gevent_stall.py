"""Does a gevent worker on SQLite stall? `parallax serve --workers 1` on a scratch SQLite
database (its background duties running, as in production), runner registrations one after the
other, optionally beside busy loops that load the machine as a CI run does; per run the slowest
registration and how many took over 1 s. Before `app/core/sqlite_gate.py` a request whose
greenlet waited inside SQLite's busy handler froze the worker for SQLite's 30 s.

    .venv/bin/python bench/sqlite_gevent_stall.py [--runs 12] [--registrations 150] [--busy-loops 6]

Another tree's service: PYTHONPATH=/path/to/exported/tree .venv/bin/python /path/to/exported/tree/bench/...
(the service runs as a child process and imports what PYTHONPATH names first).
Prints a table and writes JSON to bench/results/sqlite_gevent_stall.json.
"""
from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.demo.service_process import ServiceProcess  # noqa: E402
from bench.backends import print_table, scratch_sqlite, seed, service_env, write_results  # noqa: E402

SLOW_S = 1.0


def busy() -> None:
    while True:
        pass


def one_run(registrations: int, tmp: Path) -> dict[str, float | int]:
    with scratch_sqlite(tmp) as url:
        token = seed(url)
        with ServiceProcess(service_env(url, tmp), workers=1) as service:
            took = []
            for i in range(registrations):
                start = time.monotonic()
                response = requests.post(f"{service.base}/api/v1/runners",
                                         json={"name": f"r{i}", "labels": {"platform": "cpu"}},
                                         headers={"Authorization": f"Bearer {token}"}, timeout=120)
                response.raise_for_status()
                took.append(time.monotonic() - start)
    return {"registrations": registrations, "slowest_s": round(max(took), 3),
            "over_1s": sum(t > SLOW_S for t in took)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--registrations", type=int, default=150)
    parser.add_argument("--busy-loops", type=int, default=6, help="processes spinning beside the service")
    args = parser.parse_args()
    loops = [multiprocessing.Process(target=busy, daemon=True) for _ in range(args.busy_loops)]
    for loop in loops:
        loop.start()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for run in range(1, args.runs + 1):
                row = {"run": run, **one_run(args.registrations, Path(tmp))}
                print(f"run {run}/{args.runs}: slowest {row['slowest_s']} s, {row['over_1s']} over {SLOW_S:g} s",
                      file=sys.stderr, flush=True)
                rows.append(row)
    finally:
        for loop in loops:
            loop.terminate()
    print_table(rows, [("run", "run"), ("registrations", "registrations"), ("slowest s", "slowest_s"),
                       ("over 1 s", "over_1s")])
    write_results("sqlite_gevent_stall", {"busy_loops": args.busy_loops, "runs": rows})


if __name__ == "__main__":
    main()
