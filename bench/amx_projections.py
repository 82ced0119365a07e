"""SmolLM2-135M's projections on AMX tiles (scheduler_core/amx_linear.py) against the oneDNN-prepacked
fp32 kernel the engine uses without AMX: time per call and error against the exact product.

The real weights (the GGUF's, dequantised), one thread, process time, best of 5. "cold" runs the
projection of all 30 layers in a row, so every weight comes from memory as in a decode step; "hot"
repeats layer 0's. Each AMX row says which layout the weight took: block-scaled at 4 bits (Q4_1's
q), at 8 bits (Q8_0's, the tied LM head), or two bf16 pieces (the same weights with the block
layout turned off). Error: the root-mean-square difference from the product computed in float64,
for the kernel and for oneDNN's fp32. Prints a table and writes JSON to
bench/results/amx_projections.json.

    .venv/bin/python bench/amx_projections.py [--rows 13 256]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.prepack_crossover import per_call_us as pass_us  # noqa: E402
from scheduler_core import amx_linear  # noqa: E402
from scheduler_core.jobs.results import current_commit  # noqa: E402
from scheduler_core.model.loader import load_model  # noqa: E402

PROJECTIONS = {"qkv": "self_attn.qkv_proj", "o": "self_attn.o_proj", "gate_up": "mlp.gate_up_proj",
               "down": "mlp.down_proj"}


def per_call_us(calls: list[Callable[[], object]]) -> float:
    """Process time per call of the best of 5 passes over ``calls`` (prepack_crossover's timing,
    one pass a call)."""
    def run() -> None:
        for call in calls:
            call()
    return pass_us(run, 1) / len(calls)


def cold_and_hot_us(linear: Callable[[object], object], packs: list) -> tuple[float, float]:
    """Per-call process time of ``linear`` over every layer's packed weight in a row (cold: each
    weight from memory), and over the first layer's repeated as often (hot: from the cache)."""
    cold = per_call_us([lambda p=p: linear(p) for p in packs])
    hot = per_call_us([lambda: linear(packs[0])] * len(packs))
    return cold, hot


def write_results(name: str, results: list[dict]) -> None:
    out = REPO / "bench" / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": current_commit(), "rows": results}, indent=1))
    print(f"written to {out}", file=sys.stderr)


def onednn_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def rms_error(result: torch.Tensor, exact: torch.Tensor) -> float:
    return float(((result.double() - exact) ** 2).mean().sqrt())


def parse_rows(description: str) -> list[int]:
    """The ``--rows`` to measure, from the command line (each at least 1)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rows", type=int, nargs="+", default=[13, 256],
                        help="rows of x: 13 is the mean decode batch of bench/engine_vs_transformers.py")
    args = parser.parse_args()
    if min(args.rows) < 1:
        parser.error(f"--rows must be at least 1, got {min(args.rows)}")
    return list(args.rows)


def smollm2_weights() -> dict[str, list[torch.Tensor]]:
    """SmolLM2-135M's projection weights, every layer's, by projection, and the (tied) LM head; one
    torch thread from here on."""
    torch.set_num_threads(1)
    model = load_model("smollm2-135m").model
    weights = {name: [layer.get_submodule(path).weight.detach() for layer in model.layers]
               for name, path in PROJECTIONS.items()}
    weights["lm_head"] = [model.embed_tokens.weight.detach()]
    return weights


def prepare(description: str, library: Callable[[], object], kernel: str) -> tuple[list[int], dict[str, list[torch.Tensor]]]:
    """The rows to measure (the command line) and SmolLM2's weights, once the kernel has loaded;
    else exit naming what this machine lacks."""
    rows = parse_rows(description)
    if library() is None:
        raise SystemExit(f"this machine cannot run {kernel}, or it did not build: see the log line above")
    return rows, smollm2_weights()


def onednn_packs(layers: list[torch.Tensor]) -> list[torch.Tensor]:
    return [torch.ops.mkldnn._reorder_linear_weight(w, 16) for w in layers]


def main() -> None:
    rows_to_measure, weights = prepare(__doc__.split("\n\n")[0], amx_linear.library,
                                       "the AMX kernel (no AMX bf16 tiles)")
    results = []
    print(f"{'weight':>8} {'rows':>5} {'layout':>14} {'AMX cold us':>12} {'oneDNN cold us':>15} {'ratio':>6} "
          f"{'AMX hot us':>11} {'oneDNN hot us':>14} {'AMX rms err':>12} {'oneDNN rms err':>15}")
    for name, layers in weights.items():
        onednn = onednn_packs(layers)
        layouts = {"blocks": [amx_linear.pack(w, max_pieces=3) for w in layers],
                   "pieces": [amx_linear.pack(w, max_pieces=3, blocks=False) for w in layers]}
        for rows in rows_to_measure:
            x = torch.randn(rows, layers[0].shape[1])
            exact = x.double() @ layers[0].double().T
            fp32 = onednn_linear(x, onednn[0])
            onednn_cold, onednn_hot = cold_and_hot_us(lambda p: onednn_linear(x, p), onednn)
            for kind, packs in layouts.items():
                first = packs[0]
                layout = (f"{first.bits}-bit blocks" if first.scales is not None else f"{first.pieces} bf16 pieces")
                cold, hot = cold_and_hot_us(lambda p: amx_linear.linear(x, p), packs)
                row = {"weight": name, "shape": list(layers[0].shape), "rows": rows, "layout": layout,
                       "amx_cold_us": cold, "onednn_cold_us": onednn_cold, "amx_hot_us": hot, "onednn_hot_us": onednn_hot,
                       "amx_rms_error": rms_error(amx_linear.linear(x, first), exact), "onednn_rms_error": rms_error(fp32, exact)}
                results.append(row)
                print(f"{name:>8} {rows:>5} {layout:>14} {cold:>12.0f} {onednn_cold:>15.0f} {onednn_cold / cold:>6.2f} "
                      f"{hot:>11.0f} {onednn_hot:>14.0f} {row['amx_rms_error']:>12.2e} {row['onednn_rms_error']:>15.2e}")
    write_results("amx_projections", results)


if __name__ == "__main__":
    main()
