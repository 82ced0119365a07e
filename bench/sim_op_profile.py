"""Where the simulator's overhead on the narrow toy goes, op by op: the aten ops one toy run
dispatches as the simulator sees them (counted under a dispatch mode, which makes the model take
the same aten path), and `torch.profiler`'s self time per op name over ``--runs`` plain runs and as
many simulated ones (`sim.measure.REFERENCE` on `tiny-random-8l`, cuda-h100, the CUDA default
policy, one thread). The simulator's per-op work runs below each op's profiler record, so it shows
as that op's self time; the plain run's decode attention is a ctypes call the profiler does not
see, its simulated twin is `scaled_dot_product_attention`.

    .venv/bin/python bench/sim_op_profile.py [--runs 5] [--top 20]
    .venv/bin/python bench/sim_op_profile.py --loop sim --runs 100   # a loop for perf or py-spy

Prints a table and writes JSON to bench/results/sim_op_profile.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.backends import print_table, write_results  # noqa: E402
from scheduler_core.engine import Engine  # noqa: E402
from scheduler_core.model.loader import TINY_RANDOM_8L, load_model  # noqa: E402
from scheduler_core.platform import DEFAULT_POLICIES  # noqa: E402
from scheduler_core.sampling import SamplingParams  # noqa: E402
from scheduler_core.sim.measure import REFERENCE, run_reference  # noqa: E402


class _Counting(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops[str(func)] += 1
        return func(*args, **(kwargs or {}))


def runs(model: Any) -> dict[str, Callable[[], object]]:
    prompts = REFERENCE.prompts(model.config.vocab_size)
    params = SamplingParams(max_new_tokens=REFERENCE.output_len, ignore_eos=True)
    return {"plain": lambda: Engine(model).generate(prompts, params),
            "sim": lambda: run_reference(model, "cuda-h100", DEFAULT_POLICIES["cuda"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--top", type=int, default=20, help="op names in the table, by the simulated run's extra time")
    parser.add_argument("--loop", choices=["plain", "sim"], help="only run this side --runs times (for a profiler)")
    args = parser.parse_args()
    if args.runs < 1 or args.top < 1:
        parser.error("--runs and --top must be at least 1")
    torch.set_num_threads(1)
    model = load_model(TINY_RANDOM_8L)
    sides = runs(model)
    for run in sides.values():
        run()  # warm-up: kernels built, the core loaded
    if args.loop:
        times = []
        for _ in range(args.runs):
            start = time.process_time()
            sides[args.loop]()
            times.append(time.process_time() - start)
        print(f"{args.loop}: best {1000 * min(times):.1f} ms, mean {1000 * sum(times) / len(times):.1f} ms a run")
        return
    counting = _Counting()
    with counting:
        sides["plain"]()
    per_run: dict[str, dict[str, tuple[float, float]]] = {}
    for name, run in sides.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.runs):
                run()
        per_run[name] = {e.key: (e.count / args.runs, e.self_cpu_time_total / 1000 / args.runs)
                         for e in prof.key_averages()}
    plain, sim = per_run["plain"], per_run["sim"]
    names = sorted(set(plain) | set(sim), key=lambda k: -(sim.get(k, (0, 0))[1] - plain.get(k, (0, 0))[1]))
    rows = [{"op": name, "calls_plain": round(plain.get(name, (0, 0))[0]), "calls_sim": round(sim.get(name, (0, 0))[0]),
             "ms_plain": round(plain.get(name, (0, 0))[1], 2), "ms_sim": round(sim.get(name, (0, 0))[1], 2)}
            for name in names[:args.top]]
    totals = {side: round(sum(ms for _, ms in ops.values()), 1) for side, ops in per_run.items()}
    print(f"{sum(counting.ops.values())} aten ops a toy run as the simulator sees them; profiler self time a run: "
          f"plain {totals['plain']} ms, sim {totals['sim']} ms ({args.runs} runs each)", file=sys.stderr)
    print_table(rows, [("op", "op"), ("calls plain", "calls_plain"), ("calls sim", "calls_sim"),
                       ("self ms plain", "ms_plain"), ("self ms sim", "ms_sim")])
    write_results("sim_op_profile", {"ops_per_run": dict(counting.ops), "runs": args.runs, "totals_ms": totals,
                                     "top": rows})


if __name__ == "__main__":
    main()
