"""How steady is each CPU of this machine? One process per CPU, pinned to it, times a fixed probe
(a pure-Python loop plus two 8 MB copies, on its thread's CPU time) every 50 ms for ``--seconds``;
a probe over ``--slow`` times that CPU's 20th percentile is slow. Prints each CPU's slow share and
a timeline (``#`` slow, ``.`` not), and writes JSON to bench/results/vcpu_speed.json.

A shared VM's CPUs run in and out of slow stretches, each on its own (docs/runner.md): a job's
timing on the CPU platform depends on which CPU it ran on and when.

    .venv/bin/python bench/vcpu_speed.py [--seconds 40] [--slow 1.3]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
COPY = bytes(8 << 20)


def probe() -> float:
    start = time.thread_time()
    total = 0
    for i in range(100_000):
        total += i
    for _ in range(2):
        bytearray(COPY)
    return time.thread_time() - start


def watch(cpu: int, seconds: float) -> list[tuple[float, float]]:
    os.sched_setaffinity(0, {cpu})
    end, samples = time.time() + seconds, []
    while time.time() < end:
        samples.append((time.time(), probe()))
        time.sleep(0.05)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--slow", type=float, default=1.3)
    args = parser.parse_args()
    if args.seconds <= 0 or args.slow <= 1:
        parser.error("--seconds must be positive and --slow above 1 (a ratio to the CPU's usual probe time)")
    cpus = sorted(os.sched_getaffinity(0))
    print(f"watching CPUs {cpus} for {args.seconds:g} s ...", file=sys.stderr, flush=True)
    with multiprocessing.Pool(len(cpus)) as pool:
        watched = pool.starmap(watch, [(cpu, args.seconds) for cpu in cpus])
    result = {"seconds": args.seconds, "slow": args.slow, "cpus": {}}
    for cpu, samples in zip(cpus, watched):
        times = np.array([s for _, s in samples])
        ratio = times / np.percentile(times, 20)
        slow = ratio > args.slow
        result["cpus"][str(cpu)] = {"probes": len(times), "slow_share": float(slow.mean()),
                                    "median_ms": float(np.median(times) * 1e3), "ratios": ratio.round(3).tolist()}
        print(f"CPU {cpu}: {len(times)} probes, {slow.mean():.0%} slow (over {args.slow}x its 20th percentile)")
        line = "".join("#" if s else "." for s in slow)
        for i in range(0, len(line), 100):
            print("   " + line[i:i + 100])
    out = REPO / "bench" / "results" / "vcpu_speed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result))
    print(f"written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
