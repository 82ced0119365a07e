"""Runs inside the bench's own virtual environment (var/bench-peers/otava), never the project's.

Reads one JSON request on stdin and writes one JSON answer on stdout:
- {"mode": "generate", "seed": S, "cvs": [...]}: labelled series from the `otava-test-data`
  package (steps, regression then fix, single outliers, banding, multiple changes, noise);
- {"mode": "detect", "series": [[...], ...]}: Apache Otava's change points for each series
  (`otava.analysis.compute_change_points`, its default window 50 and p-value 0.001).
"""
from __future__ import annotations

import json
import sys
import time


def generate(seed: int, cvs: list[float]) -> list[dict]:
    from otava_test_data import banding, multiple_changes, noise_normal, outlier, regression_fix, step_function
    out = []
    k = 0
    for cv in cvs:
        sigma = 100.0 * cv
        for length in (50, 500):
            cases = [
                step_function(length, 100.0, 95.0 if k % 2 else 110.0, change_index=length // 2, sigma=sigma, seed=seed + k),
                regression_fix(length, 100.0, 90.0, regression_start=length // 3, regression_duration=max(5, length // 10),
                               sigma=sigma, seed=seed + k + 1),
                outlier(length, 100.0, 140.0, outlier_index=length // 2, sigma=sigma, seed=seed + k + 2),
                banding(length, 100.0, 102.0, sigma=sigma, seed=seed + k + 3),
                multiple_changes(length, [100.0, 108.0, 97.0, 104.0], sigma=sigma, seed=seed + k + 4),
                noise_normal(length, 100.0, sigma=sigma, seed=seed + k + 5),
            ]
            k += 6
            for ts in cases:
                truth = sorted({cp.index for cp in ts.change_points if cp.change_type != "outlier"})
                out.append({"source": "otava-test-data", "name": f"{ts.generator_name}-n{length}-cv{cv}",
                            "pattern": ts.generator_name, "cv": cv, "values": [float(v) for v in ts.data],
                            "truth": truth})
    return out


def detect(series: list[list[float]]) -> dict:
    from otava.analysis import compute_change_points
    results, seconds = [], 0.0
    for values in series:
        start = time.perf_counter()
        cps, _ = compute_change_points(values, window_len=50, max_pvalue=0.001, min_magnitude=0.0)
        seconds += time.perf_counter() - start
        results.append(sorted(int(cp.index) for cp in cps))
    return {"change_points": results, "seconds": seconds}


def main() -> None:
    request = json.load(sys.stdin)
    if request["mode"] == "generate":
        json.dump({"series": generate(int(request["seed"]), list(request["cvs"]))}, sys.stdout)
    elif request["mode"] == "detect":
        json.dump(detect(request["series"]), sys.stdout)
    else:
        raise SystemExit(f"unknown mode {request['mode']!r}")


if __name__ == "__main__":
    main()
