"""Simulator overhead: wall time of a one-batch run on sim:cuda-h100 against the same run on the plain
CPU engine, and whether the greedy outputs are equal. Best of two runs each; prints a table and
writes JSON to bench/results/.

    .venv/bin/python bench/sim_overhead.py [--threads 1]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler_core.engine import Engine  # noqa: E402
from scheduler_core.jobs.results import current_commit  # noqa: E402
from scheduler_core.model.loader import load_model  # noqa: E402
from scheduler_core.platform import DEFAULT_POLICIES  # noqa: E402
from scheduler_core.sampling import SamplingParams  # noqa: E402
from scheduler_core.sim.measure import REFERENCE, Workload, reference_model, run_reference  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cases = [("reference (random 8-layer)", reference_model, REFERENCE),
             ("smollm2-135m", lambda: load_model("smollm2-135m", torch.device("cpu"), torch.float32, 0),
              Workload(batch_size=8, input_len=64, output_len=16))]
    rows = []
    for name, load, workload in cases:
        print(f"{name}: loading and running ...", file=sys.stderr, flush=True)
        model = load()
        prompts = workload.prompts(model.config.vocab_size)
        params = SamplingParams(max_new_tokens=workload.output_len, ignore_eos=True)
        engine = Engine(model)
        cpu_outputs = [o.output_ids for o in engine.generate(prompts, params)]  # warm-up
        cpu_s, sim_s, equal = [], [], True
        for _ in range(2):
            start = time.perf_counter()
            engine.generate(prompts, params)
            cpu_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            run = run_reference(model, "cuda-h100", DEFAULT_POLICIES["cuda"], workload=workload)
            sim_s.append(time.perf_counter() - start)
            equal &= run.outputs == cpu_outputs
        rows.append({"workload": name, "cpu_s": min(cpu_s), "sim_s": min(sim_s), "ratio": min(sim_s) / min(cpu_s),
                     "outputs_equal": equal})
    print("| workload | CPU engine s | sim:cuda-h100 s | ratio | greedy outputs equal |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['cpu_s']:.2f} | {r['sim_s']:.2f} | {r['ratio']:.1f}x | {r['outputs_equal']} |")
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim_overhead.json").write_text(json.dumps({"commit": current_commit(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
