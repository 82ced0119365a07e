"""This machine's decode-step lower bound for a model and batch: the roofline every engine number is
measured against.

A decode step of a batch of B requests reads every weight once (the tied embedding too, as the LM
head) and does about 2 FLOPs per weight per request, plus attention over the KV cache. Its lower
bound is the larger of weight bytes / memory bandwidth and FLOPs / matmul peak, both measured here
on the threads the engine benchmark uses:

- bandwidth: `torch` copies of a 512 MiB fp32 tensor (read + write counted), the best of a few;
- peak: an fp32 2048 x 2048 matmul through each of torch's two CPU GEMM libraries, `torch.mm` (MKL)
  and oneDNN's inner product on a prepacked weight (what the engine's projections use), the best of
  a few; the faster library sets the peak. On AMD CPUs MKL takes its AVX2 path, so `torch.mm` alone
  reported less than half the rate oneDNN reaches there (114 against 259 GFLOP/s on an AMD EPYC
  with AVX-512, 6 December 2026), and an engine on oneDNN then ran above its "bound".

    .venv/bin/python bench/roofline.py [--model smollm2-135m] [--batch-size 16] [--context 160]
        [--threads 1] [--json PATH]

Prints a table and the JSON (also written to bench/results/roofline.json, or --json).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler_core.model.loader import load_model  # noqa: E402


@dataclass(frozen=True)
class Machine:
    threads: int
    bandwidth_gb_s: float    # bytes moved (read + write) per second, 1e9
    peak_gflop_s: float      # fp32 matmul: the faster of the two below
    mkl_gflop_s: float = 0.0     # torch.mm
    onednn_gflop_s: float = 0.0  # oneDNN, prepacked weight


@dataclass(frozen=True)
class Step:
    model: str
    batch_size: int
    context: int             # tokens each request attends over (prompt + half the output, on average)
    weight_bytes: int
    flops: float
    memory_bound_ms: float
    compute_bound_ms: float
    step_ms: float           # the lower bound: the larger of the two
    tok_s: float             # batch_size / step


def best_of(repeats: int, run, clock=time.perf_counter) -> float:  # type: ignore[no-untyped-def]
    """The shortest of `repeats` runs, on `clock` (wall time unless told)."""
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        run()
        best = min(best, clock() - start)
    return best


def copy_bandwidth(repeats: int) -> float:
    """GB/s moved (read + write) by a copy of a 512 MiB fp32 tensor, the best of `repeats`."""
    source = torch.ones(128 * 1024 * 1024, dtype=torch.float32)
    target = torch.empty_like(source)
    target.copy_(source)  # touch every page before timing
    seconds = best_of(repeats, lambda: target.copy_(source))
    return 2 * source.numel() * source.element_size() / seconds / 1e9


def matmul_rates(repeats: int, n: int = 2048) -> tuple[float, float]:
    """GFLOP/s of an fp32 n x n matmul, the best of `repeats`, through `torch.mm` (MKL) and through
    oneDNN with a prepacked weight (0.0 where torch has no oneDNN)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    mkl = 2 * n ** 3 / best_of(repeats, lambda: torch.mm(a, b)) / 1e9
    if not torch.backends.mkldnn.is_available():
        return mkl, 0.0
    packed = torch.ops.mkldnn._reorder_linear_weight(b, n)
    onednn = 2 * n ** 3 / best_of(repeats, lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], ""))
    return mkl, onednn / 1e9


def measure_machine(threads: int, repeats: int = 5) -> Machine:
    torch.set_num_threads(threads)
    mkl, onednn = matmul_rates(repeats)
    return Machine(threads=threads, bandwidth_gb_s=copy_bandwidth(repeats), peak_gflop_s=max(mkl, onednn),
                   mkl_gflop_s=mkl, onednn_gflop_s=onednn)


def decode_step(model_name: str, batch_size: int, context: int, machine: Machine) -> Step:
    loaded = load_model(model_name)
    config = loaded.config
    # Every parameter once (the tied embedding is read whole by the LM head), fp32 as the engine runs.
    weights = {id(p): p for p in loaded.model.parameters()}
    weight_bytes = sum(p.numel() * p.element_size() for p in weights.values())
    matmul_params = sum(p.numel() for p in weights.values() if p.dim() == 2)
    kv_bytes = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 4 * context * batch_size
    attention_flops = 4 * config.num_layers * config.num_heads * config.head_dim * context * batch_size
    flops = 2.0 * matmul_params * batch_size + attention_flops
    memory_s = (weight_bytes + kv_bytes) / (machine.bandwidth_gb_s * 1e9)
    compute_s = flops / (machine.peak_gflop_s * 1e9)
    step_s = max(memory_s, compute_s)
    return Step(model=model_name, batch_size=batch_size, context=context, weight_bytes=weight_bytes + kv_bytes,
                flops=flops, memory_bound_ms=memory_s * 1e3, compute_bound_ms=compute_s * 1e3,
                step_ms=step_s * 1e3, tok_s=batch_size / step_s)


@dataclass(frozen=True)
class Workload:
    """The lower bound of a whole run: the prompts' prefill (compute-bound: every prompt token is
    multiplied by every layer weight, the LM head only for a prompt's last token) plus the decode
    steps, ``output_tokens / batch_size`` of them, each at the decode-step bound."""
    prompt_tokens: int
    output_tokens: int
    prefill_s: float
    decode_s: float
    tok_s: float             # output tokens / (prefill + decode)


def workload_bound(model_name: str, prompts: int, prompt_tokens: int, output_tokens: int, step: Step,
                   machine: Machine) -> Workload:
    loaded = load_model(model_name)
    head = loaded.model.embed_tokens.weight if loaded.model.lm_head is None else loaded.model.lm_head.weight
    weights = {id(p): p for p in loaded.model.parameters()}
    layer_params = sum(p.numel() for p in weights.values() if p.dim() == 2) - head.numel()
    prefill_flops = 2.0 * (layer_params * prompt_tokens + head.numel() * prompts)
    prefill_s = prefill_flops / (machine.peak_gflop_s * 1e9)
    decode_s = output_tokens / step.batch_size * step.step_ms / 1e3
    return Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens, prefill_s=prefill_s,
                    decode_s=decode_s, tok_s=output_tokens / (prefill_s + decode_s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--context", type=int, default=160,
                        help="tokens attended per request (GSM8k prompt ~100 + half of 16-128 output)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "roofline.json")
    args = parser.parse_args()
    if args.batch_size < 1 or args.context < 1 or args.threads < 1:
        parser.error("--batch-size, --context and --threads must be at least 1")
    print(f"measuring bandwidth and matmul peak on {args.threads} thread(s) ...", file=sys.stderr, flush=True)
    machine = measure_machine(args.threads)
    step = decode_step(args.model, args.batch_size, args.context, machine)
    rows = [("memory bandwidth (copy, read + write)", f"{machine.bandwidth_gb_s:.1f} GB/s"),
            ("fp32 matmul peak (2048^3, the faster library)", f"{machine.peak_gflop_s:.1f} GFLOP/s"),
            ("  torch.mm (MKL) / oneDNN prepacked", f"{machine.mkl_gflop_s:.1f} / {machine.onednn_gflop_s:.1f} GFLOP/s"),
            (f"bytes per decode step ({step.model}, batch {step.batch_size}, context {step.context})",
             f"{step.weight_bytes / 1e9:.3f} GB"),
            ("FLOPs per decode step", f"{step.flops / 1e9:.2f} GFLOP"),
            ("memory-bound step", f"{step.memory_bound_ms:.1f} ms"),
            ("compute-bound step", f"{step.compute_bound_ms:.1f} ms"),
            ("decode-step lower bound", f"{step.step_ms:.1f} ms"),
            ("roofline decode throughput", f"{step.tok_s:.0f} tok/s")]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    result = {"machine": asdict(machine), "step": asdict(step)}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
