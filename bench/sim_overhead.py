"""Simulator overhead: wall time of a one-batch run on sim:cuda-h100 against the same run on the plain
CPU engine, and whether the greedy outputs are equal. Best of ``--repeats`` runs each, the kinds
interleaved; also the process CPU time (less sensitive than the wall time to other load on the
machine), and the median of the process-time ratios of each simulated run to the CPU run just before
it, with their range (steadier than the ratio of two bests where the machine's speed drifts).
Prints a table and writes JSON to bench/results/.

Both sides build a fresh ``Engine`` per run (``run_reference`` must: each simulated run has its own
virtual clock), so the ratio is the simulator's cost alone. The table also gives the CPU run on one
reused engine with its prefix cache flushed before each run (until issue 31 this script compared
against a reused engine without flushing, which served every prompt but its last token from the
radix cache, so the CPU side skipped the prefill the simulated side did); the difference left is
building the engine (its KV pool), about 0.3 s on the 30-layer model.

Workloads: the reference (SmolLM2-135M's first 8 layers, the calibration workload); the 64-wide
random toy with 8 layers (the demo's quick model: almost no arithmetic per op, so the worst case
for a per-op cost); the whole SmolLM2-135M (skipped with ``--reference-only``).

    .venv/bin/python bench/sim_overhead.py [--threads 1] [--repeats 5] [--reference-only]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler_core.engine import Engine  # noqa: E402
from scheduler_core.jobs.results import current_commit  # noqa: E402
from scheduler_core.model.loader import SMOLLM2, TINY_RANDOM_8L, load_model  # noqa: E402
from scheduler_core.platform import DEFAULT_POLICIES  # noqa: E402
from scheduler_core.sampling import SamplingParams  # noqa: E402
from scheduler_core.sim.measure import REFERENCE, Workload, reference_model, run_reference  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--reference-only", action="store_true", help="only the reference workload")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    torch.set_num_threads(args.threads)
    cases = [("reference (smollm2-135m, first 8 layers)", reference_model, REFERENCE),
             ("tiny-random-8l (64 wide: the worst case)", lambda: load_model(TINY_RANDOM_8L), REFERENCE),
             ("smollm2-135m (30 layers)", lambda: load_model(SMOLLM2), Workload(batch_size=8, input_len=64, output_len=16))
             ][:1 if args.reference_only else 3]
    rows = []
    for name, load, workload in cases:
        print(f"{name}: loading and running ...", file=sys.stderr, flush=True)
        model = load()
        prompts = workload.prompts(model.config.vocab_size)
        params = SamplingParams(max_new_tokens=workload.output_len, ignore_eos=True)
        engine = Engine(model)
        cpu_outputs = [o.output_ids for o in engine.generate(prompts, params)]  # warm-up
        cpu_s, sim_s, cpu_cpu_s, sim_cpu_s, reused_s, reused_cpu_s, equal = [], [], [], [], [], [], True
        for _ in range(args.repeats):
            engine.flush_cache()  # else the reused engine serves the prompts from its radix cache
            start, cpu_start = time.perf_counter(), time.process_time()
            engine.generate(prompts, params)
            reused_s.append(time.perf_counter() - start)
            reused_cpu_s.append(time.process_time() - cpu_start)
            start, cpu_start = time.perf_counter(), time.process_time()
            Engine(model).generate(prompts, params)
            cpu_s.append(time.perf_counter() - start)
            cpu_cpu_s.append(time.process_time() - cpu_start)
            start, cpu_start = time.perf_counter(), time.process_time()
            run = run_reference(model, "cuda-h100", DEFAULT_POLICIES["cuda"], workload=workload)
            sim_s.append(time.perf_counter() - start)
            sim_cpu_s.append(time.process_time() - cpu_start)
            equal &= run.outputs == cpu_outputs
        rows.append({"workload": name, "cpu_s": min(cpu_s), "sim_s": min(sim_s), "ratio": min(sim_s) / min(cpu_s),
                     "cpu_process_s": min(cpu_cpu_s), "sim_process_s": min(sim_cpu_s),
                     "process_ratio": min(sim_cpu_s) / min(cpu_cpu_s), "outputs_equal": equal,
                     "reused_engine_s": min(reused_s), "reused_engine_process_s": min(reused_cpu_s),
                     "ratio_to_reused": min(sim_s) / min(reused_s),
                     "process_ratio_to_reused": min(sim_cpu_s) / min(reused_cpu_s),
                     # Each simulated run against the fresh CPU run just before it: this VM's speed
                     # drifts within minutes, and a pair shares the drift where two bests need not.
                     "pair_process_ratios": [sim / cpu for cpu, sim in zip(cpu_cpu_s, sim_cpu_s)]})
    print("| workload | CPU engine s | sim:cuda-h100 s | ratio | ratio of process CPU time "
          "| process ratio per interleaved pair: median (min-max) | greedy outputs equal "
          "| CPU engine reused s | ratio to it (wall / process) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        pairs = r["pair_process_ratios"]
        print(f"| {r['workload']} | {r['cpu_s']:.2f} | {r['sim_s']:.2f} | {r['ratio']:.2f}x | "
              f"{r['process_ratio']:.2f}x ({r['cpu_process_s']:.2f} / {r['sim_process_s']:.2f} s) | "
              f"{statistics.median(pairs):.2f}x ({min(pairs):.2f}-{max(pairs):.2f}) | {r['outputs_equal']} | "
              f"{r['reused_engine_s']:.2f} | {r['ratio_to_reused']:.2f}x / {r['process_ratio_to_reused']:.2f}x |")
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim_overhead.json").write_text(json.dumps({"commit": current_commit(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
