"""Engine (continuous batching; normal and overlap loops) against transformers `generate` (static
batches) and this machine's roofline, same prompts, one run.

The same GSM8k questions ("Question: …\\nAnswer:") with seeded output lengths, SmolLM2-135M fp32 on
this CPU. Both sides produce exactly the seeded number of tokens per prompt (EOS ignored on both:
transformers runs with no EOS token, so it neither stops at one nor masks it); a static batch runs
until its longest member is done, which is the cost continuous batching avoids. Prints one table:
useful output tokens/s, x transformers, % of the decode roofline (bench/roofline.py, measured in
the same run) and whether the greedy outputs equal transformers' token for token, which the bench
asserts. Writes JSON to bench/results/.

    .venv/bin/python bench/engine_vs_transformers.py [--prompts 64] [--batch-size 16] [--threads 1]
        [--engine-only] [--no-overlap] [--speculative ngram|self-draft] [--json PATH] [--compare-kernels]

``--engine-only`` skips transformers (``bench/overlap_cost.py`` runs it against another commit's tree);
``--speculative`` turns on speculative decoding and reports the accept length; ``--compare-kernels``
adds the normal loop without the AMX projections (``PARALLAX_CPU_KERNELS=no-amx``), without them and
the AVX-512 block-scaled ones (``=no-blocks``), without those and the decode-attention kernel
(``=onednn``) and on torch's own ops throughout (``=aten``) to the table.
Every side also reports its process CPU time, which other load on the machine moves less than the
wall time, and its share of the whole-run bound (the prompts' prefill plus the decode steps).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.roofline import decode_step, measure_machine, workload_bound  # noqa: E402
from scheduler_core.engine import Engine  # noqa: E402
from scheduler_core.jobs.gsm8k import load_jsonl, resolve_data  # noqa: E402
from scheduler_core.jobs.results import current_commit, environment  # noqa: E402
from scheduler_core.model.loader import smollm2_gguf_path  # noqa: E402
from scheduler_core.sampling import SamplingParams  # noqa: E402


def gsm8k_dir(explicit: str | None) -> Path:
    """The GSM8k directory: ``explicit`` (--data), else PARALLAX_GSM8K, the cache or ../shared's copy;
    `DataNotFound` names what is missing."""
    shared = REPO.parent / "shared" / "data" / "gsm8k"
    return resolve_data(explicit or (str(shared) if shared.is_dir() else None))


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The workload's options, shared with bench/engine_breakdown.py: prompts, batch size, the
    seeded output lengths' range and seed, and the GSM8k directory."""
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16,
                        help="the engine's max running requests (and transformers' batch size, where it runs)")
    parser.add_argument("--min-output", type=int, default=16)
    parser.add_argument("--max-output", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", help="GSM8k directory (default: PARALLAX_GSM8K, the cache, or ../shared)")


def gsm8k_workload(count: int, min_output: int, max_output: int, seed: int,
                   data: str | None = None) -> tuple[list[str], list[int]]:
    """The first ``count`` GSM8k questions as prompts and their seeded output lengths."""
    questions = load_jsonl(gsm8k_dir(data) / "test.jsonl")[:count]
    prompts = [f"Question: {q['question']}\nAnswer:" for q in questions]
    rng = random.Random(seed)
    return prompts, [rng.randint(min_output, max_output) for _ in prompts]


# scheduler_core.cpu_kernels.CPU_KERNELS_ENV, spelled out: overlap_cost.py runs this script in trees
# from before that module.
CPU_KERNELS_ENV = "PARALLAX_CPU_KERNELS"


def run_engine(prompts: list[str], lengths: list[int], batch_size: int, overlap: bool = True,
               speculative: str | None = None) -> dict:
    load = time.perf_counter()
    extra = {} if speculative is None else {"speculative": spec_config(speculative)}
    engine = Engine(model="smollm2-135m", max_running_requests=batch_size, kv_tokens=16384,
                    chunked_prefill_size=1024, overlap=overlap, **extra)
    load = time.perf_counter() - load
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in lengths]
    bar = tqdm(total=len(prompts), desc="engine", file=sys.stderr)
    start, cpu = time.perf_counter(), time.process_time()
    outs = engine.generate(prompts, params, on_finish=lambda _: bar.update())
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    bar.close()
    tokens = sum(len(o.output_ids) for o in outs)
    assert tokens == sum(lengths), "the engine must produce exactly the seeded lengths"
    stats = getattr(engine.scheduler, "spec_stats", None)
    return {"output_tokens": tokens, "wall_s": wall, "tok_s": tokens / wall, "cpu_s": cpu, "load_s": load,
            "accept_length": stats.accept_length if speculative and stats else None,
            "prompt_tokens": sum(len(o.prompt_ids) for o in outs), "outputs": [o.output_ids for o in outs]}


def spec_config(name: str):  # imported here: the bench also runs against trees without spec.py
    from scheduler_core.spec import SpecConfig
    if name == "self-draft":
        return SpecConfig("self-draft", num_draft_tokens=2, draft_layers=10)
    return SpecConfig("ngram", num_draft_tokens=4)


def run_transformers(prompts: list[str], lengths: list[int], batch_size: int) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2_gguf_path()
    load = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    load = time.perf_counter() - load
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.eos_token_id = None  # as the engine's ignore_eos: never stop at EOS, never mask it
    useful, computed, outputs = 0, 0, []
    start, cpu = time.perf_counter(), time.process_time()
    for i in tqdm(range(0, len(prompts), batch_size), desc="transformers", file=sys.stderr):
        chunk, want = prompts[i: i + batch_size], lengths[i: i + batch_size]
        enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
        longest = max(want)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=longest, do_sample=False,
                                 pad_token_id=tokenizer.pad_token_id)
        new = out[:, enc.input_ids.shape[1]:]
        outputs += [row[:n].tolist() for row, n in zip(new, want)]
        useful += sum(want)
        computed += new.numel()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"output_tokens": useful, "computed_tokens": computed, "wall_s": wall, "tok_s": useful / wall, "cpu_s": cpu,
            "load_s": load, "outputs": outputs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_arguments(parser)
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both sides")
    parser.add_argument("--engine-only", action="store_true", help="skip transformers")
    parser.add_argument("--no-overlap", action="store_true", help="the engine's normal loop")
    parser.add_argument("--speculative", choices=["ngram", "self-draft"], default=None)
    parser.add_argument("--json", help="write the engine's result here as JSON (with --engine-only)")
    parser.add_argument("--compare-kernels", action="store_true",
                        help="also the normal loop with PARALLAX_CPU_KERNELS=no-amx, =no-blocks, =onednn and =aten")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    prompts, lengths = gsm8k_workload(args.prompts, args.min_output, args.max_output, args.seed, args.data)
    print(f"{len(prompts)} prompts, output lengths {args.min_output}-{args.max_output} (seed {args.seed}, "
          f"{sum(lengths)} tokens), batch {args.batch_size}, torch threads {torch.get_num_threads()}", file=sys.stderr)
    engine = run_engine(prompts, lengths, args.batch_size, overlap=not args.no_overlap, speculative=args.speculative)
    if args.engine_only:
        engine["output_ids"] = engine.pop("outputs")
        text = json.dumps({**engine, "prompts": len(prompts), "commit": current_commit()})
        if args.json:
            Path(args.json).write_text(text)
        print(f"engine: {engine['output_tokens']} tokens in {engine['wall_s']:.1f} s, {engine['tok_s']:.1f} tok/s"
              + (f", accept length {engine['accept_length']:.2f}" if engine["accept_length"] else ""))
        return
    loops = {"engine, overlap loop" if not args.no_overlap else "engine, normal loop": engine}
    if not args.no_overlap and args.speculative is None:
        loops = {"engine, normal loop": run_engine(prompts, lengths, args.batch_size, overlap=False), **loops}
    if args.compare_kernels:
        for choice, name in (("no-amx", "no AMX"), ("no-blocks", "no block-scaled kernels"),
                             ("onednn", "prepacked projections only"), ("aten", "aten kernels")):
            os.environ[CPU_KERNELS_ENV] = choice
            loops[f"engine, normal loop, {name}"] = run_engine(prompts, lengths, args.batch_size, overlap=False)
        del os.environ[CPU_KERNELS_ENV]
    hf = run_transformers(prompts, lengths, args.batch_size)
    hf_outputs = hf.pop("outputs")
    machine = measure_machine(torch.get_num_threads())
    # The KV cache a decode step reads: the mean prompt plus half the mean output, per request.
    context = (engine["prompt_tokens"] + sum(lengths) / 2) / len(prompts)
    step = decode_step("smollm2-135m", args.batch_size, round(context), machine)
    # The decode roofline leaves out the prompts' prefill, which every side must also compute.
    whole = workload_bound("smollm2-135m", len(prompts), engine["prompt_tokens"], sum(lengths), step, machine)
    rows = []
    for name, side in loops.items():
        side["identical_outputs"] = sum(a == b for a, b in zip(side.pop("outputs"), hf_outputs))
        side["x_transformers"] = side["tok_s"] / hf["tok_s"]
        side["roofline_fraction"] = side["tok_s"] / step.tok_s
        side["workload_bound_fraction"] = side["tok_s"] / whole.tok_s
        rows.append((name, side))
    hf.update(x_transformers=1.0, roofline_fraction=hf["tok_s"] / step.tok_s,
              workload_bound_fraction=hf["tok_s"] / whole.tok_s, identical_outputs=len(prompts))
    rows.append(("transformers generate", hf))
    result = {"prompts": len(prompts), "batch_size": args.batch_size, "seed": args.seed,
              "output_lengths": [args.min_output, args.max_output], "threads": torch.get_num_threads(),
              "sides": dict(rows), "roofline": {"machine": machine.__dict__, "step": step.__dict__, "workload": whole.__dict__},
              "commit": current_commit(), "environment": environment()}
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "engine_vs_transformers.json").write_text(json.dumps(result, indent=1))
    print(f"| side | output tokens | wall s | CPU s | tok/s | x transformers | % of decode roofline "
          f"({step.tok_s:.0f} tok/s) | % of whole-run bound ({whole.tok_s:.0f} tok/s) | greedy outputs = transformers |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, side in rows:
        print(f"| {name} | {side['output_tokens']} | {side['wall_s']:.1f} | {side['cpu_s']:.1f} | {side['tok_s']:.1f} | "
              f"{side['x_transformers']:.2f} | {side['roofline_fraction'] * 100:.0f} % | "
              f"{side['workload_bound_fraction'] * 100:.0f} % | {side['identical_outputs']}/{len(prompts)} |")
    print(f"roofline: {machine.bandwidth_gb_s:.1f} GB/s, {machine.peak_gflop_s:.1f} GFLOP/s, "
          f"{step.weight_bytes / 1e9:.3f} GB and {step.flops / 1e9:.2f} GFLOP per step -> {step.step_ms:.1f} ms; "
          f"whole run: {whole.prompt_tokens} prompt tokens' prefill {whole.prefill_s:.1f} s + "
          f"{whole.output_tokens} output tokens' decode {whole.decode_s:.1f} s")
    different = [name for name, side in rows if side["identical_outputs"] != len(prompts)]
    if different:
        raise SystemExit(f"greedy outputs differ from transformers' for: {', '.join(different)}")

if __name__ == "__main__":
    main()
