"""Decode-throughput job: one-batch mode (fixed batch/input/output lengths → decode tok/s, first token to last)
or serving mode (N requests with seeded random lengths through continuous batching → output
throughput, TTFT and ITL p50/p99, TPOT). Writes the results document to $PARALLAX_RESULTS.

    python -m scheduler_core.jobs.decode_throughput [--mode serving|one-batch] [--model tiny-random]
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys

from scheduler_core.engine import Engine
from scheduler_core.jobs.common import (
    add_engine_args,
    best_of,
    best_run,
    finish_sim,
    freeze_heap,
    log,
    make_engine,
    percentile,
    profile_gpu,
    repeats,
    sim_context,
    simulator,
)
from scheduler_core.jobs.results import Metric, build_document, current_commit, write_document
from scheduler_core.sampling import SamplingParams

SUITE = "decode-throughput"


def random_prompts(engine: Engine, count: int, lengths: list[int], seed: int) -> list[list[int]]:
    """Random token-id prompts (below 1000: ordinary tokens in any byte-level vocab), no shared prefixes."""
    rng = random.Random(seed)
    top = min(engine.loaded.config.vocab_size, 1000)
    return [[rng.randrange(1, top) for _ in range(length)] for length in lengths[:count]]


def one_batch(engine: Engine, args: argparse.Namespace, seed: int) -> dict[str, float]:
    """Decode tokens over the time the decode steps took to deliver them: from the batch's first
    token (the prefill's) to its last, on the engine's clock (wall time, the process's CPU time with
    PARALLAX_HOST_CLOCK=process, or the simulator's virtual time). Not from the first decode step's
    launch: the overlap loop launches it while the prefill is still running, and the prefill's
    remaining time is not decode time."""
    if args.output_len < 2:
        raise SystemExit("one-batch mode needs --output-len >= 2 (no decode step would run)")
    prompts = random_prompts(engine, args.batch_size, [args.input_len] * args.batch_size, seed)
    params = SamplingParams(max_new_tokens=args.output_len, ignore_eos=True)
    engine.flush_cache()
    engine.streams.begin_run()
    hazards_before = _hazards(engine)
    outs = engine.generate(prompts, params)
    failed = next((o for o in outs if o.error), None)
    if failed is not None:
        raise SystemExit(f"one-batch request {failed.index} failed: {failed.error}")
    elapsed = max(sum(o.itl_s) for o in outs)  # first token to last; one batch, so the same for every request
    tokens = args.batch_size * (args.output_len - 1)  # the first token of each request comes from the prefill
    values = {"decode_throughput": tokens / elapsed, "step_latency_p50": elapsed / (args.output_len - 1) * 1e3}
    if simulator(engine) is not None:
        values["hazards"] = float(_hazards(engine) - hazards_before)
    return values


def _hazards(engine: Engine) -> int:
    device = simulator(engine)
    return 0 if device is None else len(device.hazards)


def serving(engine: Engine, args: argparse.Namespace, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    inputs = [rng.randint(min(args.min_input_len, args.input_len), args.input_len) for _ in range(args.num_prompts)]
    outputs = [rng.randint(min(args.min_output_len, args.output_len), args.output_len)
               for _ in range(args.num_prompts)]
    prompts = random_prompts(engine, args.num_prompts, inputs, seed)
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in outputs]
    engine.flush_cache()
    engine.streams.begin_run()
    hazards_before = _hazards(engine)
    start = engine.streams.now()
    outs = engine.generate(prompts, params)
    wall = engine.streams.now() - start
    tokens = sum(len(o.output_ids) for o in outs)
    ttft = [o.ttft_s * 1e3 for o in outs if o.ttft_s is not None]
    itl = [gap * 1e3 for o in outs for gap in o.itl_s]
    tpot = [sum(o.itl_s) / len(o.itl_s) * 1e3 for o in outs if o.itl_s]
    values = {"output_throughput": tokens / wall, "ttft_p50": percentile(ttft, 50), "ttft_p99": percentile(ttft, 99),
              "itl_p50": percentile(itl, 50), "itl_p99": percentile(itl, 99), "tpot": statistics.mean(tpot)}
    if simulator(engine) is not None:
        values["hazards"] = float(_hazards(engine) - hazards_before)
    return values


UNITS = {"decode_throughput": ("tok/s", "higher_is_better"), "step_latency_p50": ("ms", "lower_is_better"),
         "output_throughput": ("tok/s", "higher_is_better"), "ttft_p50": ("ms", "lower_is_better"),
         "ttft_p99": ("ms", "lower_is_better"), "itl_p50": ("ms", "lower_is_better"),
         "itl_p99": ("ms", "lower_is_better"), "tpot": ("ms", "lower_is_better"),
         "hazards": ("count", "lower_is_better")}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["serving", "one-batch"], default="serving")
    parser.add_argument("--batch-size", type=int, default=8, help="one-batch mode: requests in the batch")
    parser.add_argument("--num-prompts", type=int, default=32, help="serving mode: number of requests")
    parser.add_argument("--input-len", type=int, default=128, help="input length (serving: the maximum)")
    parser.add_argument("--output-len", type=int, default=64, help="output length (serving: the maximum)")
    parser.add_argument("--min-input-len", type=int, default=16)
    parser.add_argument("--min-output-len", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", help="write the document here instead of $PARALLAX_RESULTS")
    add_engine_args(parser, max_running=32, kv_tokens=16384)
    args = parser.parse_args(argv)
    if args.mode == "one-batch" and args.disaggregation:
        parser.error("--mode one-batch times the decode steps of one scheduler; use --mode serving with "
                     "--disaggregation")
    runs = best_of()
    engine = make_engine(args)
    run = one_batch if args.mode == "one-batch" else serving
    device = simulator(engine)
    if device is not None:
        runs = 1  # virtual time: no neighbour slows a run, and each run draws its own noise
    key = "decode_throughput" if args.mode == "one-batch" else "output_throughput"
    if device is None or device.host_time == "measured":
        log("warm-up run")
        run(engine, args, args.seed)
    else:
        # A warm-up keeps a run's one-time costs (allocations, cold caches) out of the samples. The
        # simulator's fixed host clock has none: a warm-up would only draw one value of the virtual
        # noise and throw it away (the repeats then draw the next ones).
        log("no warm-up run: the simulated device's fixed host clock has no first-run costs")
    freeze_heap()
    samples: dict[str, list[float]] = {}
    count = repeats()
    best = f" (best of {runs} runs across the CPUs)" if runs > 1 else ""
    for i in range(count):
        seed = args.seed + 1 + i
        values = best_run(lambda: run(engine, args, seed), runs, key)
        for name, value in values.items():
            samples.setdefault(name, []).append(value)
        log(f"repeat {i + 1}/{count}{best}: " + ", ".join(f"{k}={v:.2f}" for k, v in values.items()))
    profile_gpu(engine, lambda: run(engine, args, args.seed))
    metrics = [Metric(name, *UNITS[name], values) for name, values in samples.items()]
    context = {**engine.settings(), "mode": args.mode, "batch_size": args.batch_size if args.mode == "one-batch"
               else args.max_running_requests, "input_len": args.input_len, "output_len": args.output_len,
               "repeats": count, "seed": args.seed, "commit": current_commit(),
               **({"best_of": runs} if runs > 1 else {})}  # only when set: other series keep their key
    if device is not None:
        context.update(sim_context(device))
    finish_sim(engine, args)
    if args.mode == "serving":
        context.update(num_prompts=args.num_prompts, min_input_len=args.min_input_len,
                       min_output_len=args.min_output_len)
    doc = build_document(SUITE, metrics, context)
    path = write_document(doc, args.output)
    log(f"results written to {path}" if path else "PARALLAX_RESULTS not set: document printed to stdout only")
    json.dump(doc, sys.stdout, indent=1)
    print()
    return doc


if __name__ == "__main__":
    main()
