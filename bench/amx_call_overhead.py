"""What one call of the AMX projection kernel costs beyond its products: a decode batch's x (13
rows) against SmolLM2's real block-scaled weights cut to a few columns, where the weight is too
small for its products to matter, and a whole weight for comparison. Per call: the C function
alone (x's buffers made once, outside the timing) and `amx_linear.linear` with its Python side
(checks, output and buffers). One thread, process time, best of 5 passes (prepack_crossover's
timing), the weight hot in the cache. Prints a table and writes JSON to
bench/results/amx_call_overhead.json.

    .venv/bin/python bench/amx_call_overhead.py
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.amx_projections import per_call_us, prepare, write_results  # noqa: E402
from scheduler_core import amx_linear  # noqa: E402

ROWS = 13  # the mean decode batch of bench/engine_vs_transformers.py
CALLS = 2000  # per pass


def shapes(weights: dict[str, list[torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Layer 0's weights: the first 64 columns of qkv (k = 576) and of down (k = 1536), and qkv whole."""
    qkv, down = weights["qkv"][0], weights["down"][0]
    return {"qkv[:64] 64x576": qkv[:64].contiguous(), "down[:64] 64x1536": down[:64].contiguous(),
            "qkv 960x576": qkv}


def c_call(lib: object, x: torch.Tensor, packed: amx_linear.PackedWeight) -> tuple[Callable[[], object], list[object]]:
    """The C function on buffers got here once: the call, and what it writes (keep them)."""
    out = torch.empty((x.shape[0], packed.out_features))
    buffers = amx_linear.working_buffers(x.shape[0], packed.in_features)
    args = (x.data_ptr(), x.shape[0], packed.in_features, packed.data.data_ptr(), packed.bits,
            packed.scales.data_ptr(), packed.out_features, out.data_ptr(), buffers.scratch.data_ptr(),
            buffers.sums.data_ptr(), buffers.widened.data_ptr())
    return lambda: lib.parallax_amx_linear_blocks(*args), [out, buffers]


def main() -> None:
    _, weights = prepare(__doc__.split("\n\n")[0], amx_linear.library, "the AMX kernel (no AMX bf16 tiles)")
    lib = amx_linear.library()
    results = []
    print(f"{'weight':>18} {'rows':>5} {'C call us':>10} {'linear us':>10} {'Python side us':>15}")
    for name, weight in shapes(weights).items():
        packed = amx_linear.pack(weight)
        if packed is None or packed.scales is None:
            raise SystemExit(f"{name}: not block-scaled here, so not what this bench measures")
        x = torch.randn(ROWS, packed.in_features, generator=torch.Generator().manual_seed(0))
        call, buffers = c_call(lib, x, packed)
        c_us = per_call_us([call] * CALLS)
        linear_us = per_call_us([lambda: amx_linear.linear(x, packed)] * CALLS)
        del buffers
        results.append({"weight": name, "rows": ROWS, "c_call_us": round(c_us, 1), "linear_us": round(linear_us, 1)})
        print(f"{name:>18} {ROWS:>5} {c_us:>10.1f} {linear_us:>10.1f} {linear_us - c_us:>15.1f}")
    write_results("amx_call_overhead", results)


if __name__ == "__main__":
    main()
