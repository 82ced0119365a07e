"""SmolLM2-135M's projections on the AVX-512 block-scaled kernel (scheduler_core/block_linear.py)
against the oneDNN-prepacked fp32 kernel the engine uses otherwise: time per call and error against
the exact product.

The real weights (the GGUF's, dequantised), one thread, process time, best of 5, measured as
bench/amx_projections.py does: "cold" runs the projection of all 30 layers in a row, so every weight
comes from memory as in a decode step; "hot" repeats layer 0's. Each row says at how many bits the
kernel reads the weight's q (4 for Q4_1's projections, 8 for the Q8_0 LM head). Error: the
root-mean-square difference from the product computed in float64. Prints a table and writes JSON to
bench/results/block_projections.json.

    .venv/bin/python bench/block_projections.py [--rows 13 256]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.amx_projections import PROJECTIONS, per_call_us, rms_error  # noqa: E402
from scheduler_core import block_linear  # noqa: E402
from scheduler_core.jobs.results import current_commit  # noqa: E402
from scheduler_core.model.loader import load_model  # noqa: E402


def onednn_linear(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[13, 256],
                        help="rows of x: 13 is the mean decode batch of bench/engine_vs_transformers.py")
    args = parser.parse_args()
    if min(args.rows) < 1:
        parser.error(f"--rows must be at least 1, got {min(args.rows)}")
    if block_linear.library() is None:
        raise SystemExit("this machine cannot run the block-scaled kernel (no AVX-512, or it did not build): "
                         "see the log line above")
    torch.set_num_threads(1)
    model = load_model("smollm2-135m").model
    weights = {name: [layer.get_submodule(path).weight.detach() for layer in model.layers]
               for name, path in PROJECTIONS.items()}
    weights["lm_head"] = [model.embed_tokens.weight.detach()]
    results = []
    print(f"{'weight':>8} {'rows':>5} {'bits':>4} {'blocks cold us':>15} {'oneDNN cold us':>15} {'ratio':>6} "
          f"{'blocks hot us':>14} {'oneDNN hot us':>14} {'blocks rms err':>15} {'oneDNN rms err':>15}")
    for name, layers in weights.items():
        onednn = [torch.ops.mkldnn._reorder_linear_weight(w, 16) for w in layers]
        packs = [block_linear.pack(w) for w in layers]
        if any(p is None for p in packs):
            print(f"{name:>8}: not block-scaled, the kernel does not take it", file=sys.stderr)
            continue
        for rows in args.rows:
            x = torch.randn(rows, layers[0].shape[1])
            exact = x.double() @ layers[0].double().T
            onednn_cold = per_call_us([lambda p=p: onednn_linear(x, p) for p in onednn])
            onednn_hot = per_call_us([lambda: onednn_linear(x, onednn[0])] * len(onednn))
            cold = per_call_us([lambda p=p: block_linear.linear(x, p) for p in packs])
            hot = per_call_us([lambda: block_linear.linear(x, packs[0])] * len(packs))
            row = {"weight": name, "shape": list(layers[0].shape), "rows": rows, "bits": packs[0].bits,
                   "blocks_cold_us": cold, "onednn_cold_us": onednn_cold, "blocks_hot_us": hot,
                   "onednn_hot_us": onednn_hot, "blocks_rms_error": rms_error(block_linear.linear(x, packs[0]), exact),
                   "onednn_rms_error": rms_error(onednn_linear(x, onednn[0]), exact)}
            results.append(row)
            print(f"{name:>8} {rows:>5} {packs[0].bits:>4} {cold:>15.0f} {onednn_cold:>15.0f} {onednn_cold / cold:>6.2f} "
                  f"{hot:>14.0f} {onednn_hot:>14.0f} {row['blocks_rms_error']:>15.2e} {row['onednn_rms_error']:>15.2e}")
    out = REPO / "bench" / "results" / "block_projections.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"commit": current_commit(), "rows": results}, indent=1))
    print(f"written to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
