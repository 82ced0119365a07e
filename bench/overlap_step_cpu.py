"""The overlap loop's own per-step cost, this tree against another commit's, in process CPU seconds.

On the tiny random model the forward is almost free, so the time is the scheduler's and the overlap
machinery's bookkeeping: what issue 27's features could add per step. Exports ``--base`` (default:
the merge base with ``main``) with ``git archive``, then runs the same workload (64 seeded prompts of
5-60 tokens, 8-64 new tokens, ``max_running_requests=16``, the overlap loop, one thread) in a child
process per tree, alternating, and reports each run's best-of-3 process CPU seconds (which another
session's load changes far less than wall time) and the step count.

    .venv/bin/python bench/overlap_step_cpu.py [--base REV] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKLOAD = r'''
import random, time, torch
torch.set_num_threads(1)
from scheduler_core.engine import Engine
from scheduler_core.model.loader import load_model
from scheduler_core.sampling import SamplingParams
model = load_model("tiny-random", torch.device("cpu"), torch.float32, 0)
rng = random.Random(0)
prompts = [[rng.randrange(1, 250) for _ in range(rng.choice([5, 20, 60]))] for _ in range(64)]
params = [SamplingParams(max_new_tokens=rng.choice([8, 32, 64]), ignore_eos=True) for _ in prompts]
best = float("inf")
for _ in range(3):
    engine = Engine(model, overlap=True, kv_tokens=8192, max_running_requests=16)
    start = time.process_time()
    engine.generate(prompts, params)
    best = min(best, time.process_time() - start)
print(best, len(engine.scheduler.steps))
'''


def run(tree: Path) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", WORKLOAD], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), int(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = args.base or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=REPO, check=True,
                                       capture_output=True, text=True).stdout.strip()
    seconds: dict[str, list[float]] = {"base": [], "head": []}
    steps: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp)
        archive = subprocess.run(["git", "archive", base, "scheduler_core"], cwd=REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        for i in range(args.rounds):
            for side in (("base", "head") if i % 2 == 0 else ("head", "base")):
                cpu, steps[side] = run(tree if side == "base" else REPO)
                seconds[side].append(cpu)
                print(f"round {i + 1}: {side} {cpu:.3f} s", file=sys.stderr)
    print(f"base {base[:10]}; best-of-3 process CPU seconds per round\n")
    print("| tree | CPU s per round | median | vs base | steps |")
    print("|---|---|---|---|---|")
    b = statistics.median(seconds["base"])
    for side, values in seconds.items():
        m = statistics.median(values)
        print(f"| {side} | {', '.join(f'{v:.3f}' for v in values)} | {m:.3f} | {100 * (m / b - 1):+.1f} % | {steps[side]} |")


if __name__ == "__main__":
    main()
