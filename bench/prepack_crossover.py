"""Where the oneDNN-prepacked projection (scheduler_core/cpu_kernels.py) beats ``F.linear``: both
on the same random operands, one thread, process time (best of 5 timings of N calls), for the
projection shapes of SmolLM2-135M and of the 64-wide toy at decode batch sizes. Prints a table and
writes JSON to bench/results/prepack_crossover.json. ``PREPACK_MIN_ELEMENTS`` is set from it.

    .venv/bin/python bench/prepack_crossover.py
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler_core.cpu_kernels import PREPACK_MIN_ELEMENTS  # noqa: E402
from scheduler_core.jobs.results import current_commit  # noqa: E402

SHAPES = [(64, 64), (64, 192), (64, 256), (256, 64), (64, 49152),             # the toy
          (576, 576), (576, 960), (576, 3072), (1536, 576), (576, 49152)]     # SmolLM2-135M
ROWS = (8, 16, 64)


def per_call_us(call: Callable[[], object], calls: int) -> float:
    for _ in range(3):
        call()
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(calls):
            call()
        best = min(best, (time.process_time() - start) / calls)
    return best * 1e6


def main() -> None:
    torch.set_num_threads(1)
    packed_call = torch.ops.mkldnn._linear_pointwise
    rows_out = []
    print(f"{'rows':>4} {'in->out':>12} {'F.linear us':>12} {'prepacked us':>13} {'ratio':>6}")
    for rows in ROWS:
        for fan_in, fan_out in SHAPES:
            x, weight = torch.randn(rows, fan_in), torch.randn(fan_out, fan_in)
            packed = torch.ops.mkldnn._reorder_linear_weight(weight, 16)
            calls = max(3, int(2e6 / (fan_in * fan_out)))
            plain = per_call_us(lambda: F.linear(x, weight), calls)
            prepacked = per_call_us(lambda: packed_call(x, packed, None, "none", [], ""), calls)
            rows_out.append({"rows": rows, "in": fan_in, "out": fan_out, "elements": fan_in * fan_out,
                             "f_linear_us": plain, "prepacked_us": prepacked, "ratio": prepacked / plain})
            print(f"{rows:>4} {f'{fan_in}->{fan_out}':>12} {plain:>12.1f} {prepacked:>13.1f} {prepacked / plain:>6.2f}")
    out = REPO / "bench" / "results" / "prepack_crossover.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": current_commit(), "prepack_min_elements": PREPACK_MIN_ELEMENTS,
                               "rows": rows_out}, indent=1))
    print(f"written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
