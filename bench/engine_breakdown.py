"""Where the engine's time goes on `bench/engine_vs_transformers.py`'s workload: the same GSM8k
prompts and seeded output lengths, one engine run (the normal loop unless ``--overlap``), with a
timer around every projection (by weight and by whether the call is a decode batch, at most
`cpu_kernels.BLOCK_ROWS_MAX` rows, or a prefill chunk), every decode-attention kernel call, every
RMS norm and every rotary embedding. Projections also get their GFLOP/s (2 x rows x in x out per
call). The timers cost a few microseconds a call, so the run is a little slower than the bench's.

    .venv/bin/python bench/engine_breakdown.py [--prompts 64] [--batch-size 16] [--overlap]

Prints a table and writes JSON to bench/results/engine_breakdown.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.backends import print_table, write_results  # noqa: E402
from bench.engine_vs_transformers import add_workload_arguments, gsm8k_workload, run_engine  # noqa: E402
from scheduler_core import cpu_kernels, decode_attention  # noqa: E402
from scheduler_core.model import llama  # noqa: E402

WEIGHTS = {(960, 576): "qkv", (576, 576): "o", (3072, 576): "gate_up", (576, 1536): "down", (49152, 576): "LM head"}


class Timers:
    """Seconds, calls and FLOPs per part, from wrappers around the functions the model calls."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.flops: dict[str, float] = defaultdict(float)

    def add(self, part: str, seconds: float, flops: float = 0.0) -> None:
        self.seconds[part] += seconds
        self.calls[part] += 1
        self.flops[part] += flops

    def wrap(self, owner: Any, name: str, part: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            out = original(*args, **kwargs)
            self.add(part, time.perf_counter() - start)
            return out
        setattr(owner, name, timed)

    def wrap_projections(self) -> None:
        original: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = llama.linear

        def timed(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
            start = time.perf_counter()
            out = original(x, weight)
            seconds = time.perf_counter() - start
            rows = x.numel() // x.shape[-1]
            phase = "decode" if rows <= cpu_kernels.BLOCK_ROWS_MAX else "prefill"
            shape = tuple(weight.shape)
            self.add(f"projection {WEIGHTS.get(shape, shape)}, {phase}", seconds, 2.0 * rows * weight.numel())
            return out
        llama.linear = timed  # the name the model's `project` calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser)
    parser.add_argument("--overlap", action="store_true", help="the overlap loop instead of the normal one")
    args = parser.parse_args()
    if args.prompts < 1 or args.batch_size < 1:
        parser.error("--prompts and --batch-size must be at least 1")
    torch.set_num_threads(1)
    prompts, lengths = gsm8k_workload(args.prompts, args.min_output, args.max_output, args.seed, args.data)
    timers = Timers()
    timers.wrap_projections()
    timers.wrap(decode_attention, "decode_attention", "decode attention (kernel and its checks)")
    timers.wrap(llama.RMSNorm, "forward", "RMS norms")
    timers.wrap(llama.RotaryAngles, "apply", "rotary embeddings")
    timers.wrap(llama.LlamaModel, "forward", "forward passes (all of the above and the rest)")
    run = run_engine(prompts, lengths, args.batch_size, overlap=args.overlap)
    rows = [{"part": "the whole run", "seconds": round(run["wall_s"], 2), "calls": "", "us_per_call": "",
             "gflop_s": ""}]
    for part in sorted(timers.seconds, key=lambda p: -timers.seconds[p]):
        seconds, calls, flops = timers.seconds[part], timers.calls[part], timers.flops[part]
        rows.append({"part": part, "seconds": round(seconds, 2), "calls": calls,
                     "us_per_call": round(1e6 * seconds / calls, 1), "gflop_s": round(flops / seconds / 1e9, 1) if flops else ""})
    print(f"{len(prompts)} prompts, {run['output_tokens']} output tokens, {run['tok_s']:.1f} tok/s "
          f"({'overlap' if args.overlap else 'normal'} loop, one thread, timers on)", file=sys.stderr)
    print_table(rows, [("part", "part"), ("s", "seconds"), ("calls", "calls"), ("us/call", "us_per_call"),
                       ("GFLOP/s", "gflop_s")])
    write_results("engine_breakdown", {"prompts": len(prompts), "overlap": args.overlap, "tok_s": run["tok_s"],
                                       "parts": rows})


if __name__ == "__main__":
    main()
