"""SmolLM2-135M's projections on the block-scaled kernel (scheduler_core/block_linear.py, AVX-512 or AVX2)
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

import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.amx_projections import cold_and_hot_us, onednn_linear, onednn_packs, prepare, rms_error, write_results  # noqa: E402
from scheduler_core import block_linear  # noqa: E402


def main() -> None:
    rows_to_measure, weights = prepare(__doc__.split("\n\n")[0], block_linear.library,
                                       "the block-scaled kernel (neither AVX-512 nor AVX2 with FMA)")
    results = []
    print(f"{'weight':>8} {'rows':>5} {'bits':>4} {'blocks cold us':>15} {'oneDNN cold us':>15} {'ratio':>6} "
          f"{'blocks hot us':>14} {'oneDNN hot us':>14} {'blocks rms err':>15} {'oneDNN rms err':>15}")
    for name, layers in weights.items():
        onednn = onednn_packs(layers)
        packs = [block_linear.pack(w) for w in layers]
        if any(p is None for p in packs):
            print(f"{name:>8}: not block-scaled, the kernel does not take it", file=sys.stderr)
            continue
        for rows in rows_to_measure:
            x = torch.randn(rows, layers[0].shape[1])
            exact = x.double() @ layers[0].double().T
            onednn_cold, onednn_hot = cold_and_hot_us(lambda p: onednn_linear(x, p), onednn)
            cold, hot = cold_and_hot_us(lambda p: block_linear.linear(x, p), packs)
            row = {"weight": name, "shape": list(layers[0].shape), "rows": rows, "bits": packs[0].bits,
                   "blocks_cold_us": cold, "onednn_cold_us": onednn_cold, "blocks_hot_us": hot,
                   "onednn_hot_us": onednn_hot, "blocks_rms_error": rms_error(block_linear.linear(x, packs[0]), exact),
                   "onednn_rms_error": rms_error(onednn_linear(x, onednn[0]), exact)}
            results.append(row)
            print(f"{name:>8} {rows:>5} {packs[0].bits:>4} {cold:>15.0f} {onednn_cold:>15.0f} {onednn_cold / cold:>6.2f} "
                  f"{hot:>14.0f} {onednn_hot:>14.0f} {row['blocks_rms_error']:>15.2e} {row['onednn_rms_error']:>15.2e}")
    write_results("block_projections", results)


if __name__ == "__main__":
    main()
