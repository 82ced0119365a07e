"""Weights as checkpoints hold them, for the projection kernels' tests (`scheduler_core.amx_linear`,
`scheduler_core.block_linear`): block-scaled as GGUF's Q4_1 and Q8_0 dequantise, or of two bf16
pieces; and a result's error against the exact product."""
from __future__ import annotations

import torch


def two_piece_weight(out_features: int, in_features: int, seed: int = 0) -> torch.Tensor:
    """Values of 16 significand bits, as the GGUF's quantised projections are: two bf16 pieces."""
    g = torch.Generator().manual_seed(seed)
    coarse = (torch.randn(out_features, in_features, generator=g) * 0.05).bfloat16().float()
    fine = (torch.randn(out_features, in_features, generator=g) * 0.05 / 512).bfloat16().float()
    return coarse + fine


def block_weight(out_features: int, in_features: int, symmetric: bool = False, seed: int = 0) -> torch.Tensor:
    """A weight as a quantised checkpoint dequantises it: per 32 values of a row, d * q + m with
    fp16 d and m, q in 0..15 (GGUF's Q4_1), or m = 0 and q in -127..127 (Q8_0)."""
    g = torch.Generator().manual_seed(seed)
    blocks = (out_features, in_features // 32, 1)
    if symmetric:
        q = torch.randint(-127, 128, (*blocks[:2], 32), generator=g)
        q[..., 0] = 127  # Q8_0 maps each block's largest magnitude to +-127
        d = (torch.rand(blocks, generator=g) * 0.002).half().float()
        return (d * q).reshape(out_features, in_features)
    q = torch.randint(0, 16, (*blocks[:2], 32), generator=g)
    q[..., 0], q[..., 1] = 0, 15  # Q4_1 maps each block's least value to 0 and its greatest to 15
    d = (torch.rand(blocks, generator=g) * 0.01).half().float()
    m = (-torch.rand(blocks, generator=g) * 0.08).half().float()
    return (d * q + m).reshape(out_features, in_features)


WEIGHTS = {"q4_1-like blocks": lambda n, k: block_weight(n, k), "q8_0-like blocks": lambda n, k: block_weight(n, k, True),
           "two bf16 pieces": two_piece_weight}


def rms_error(result: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> float:
    exact = x.double() @ weight.double().T
    return float(((result.double() - exact) ** 2).mean().sqrt())
