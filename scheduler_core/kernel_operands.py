"""The operands of Parallax's C projection kernels (`scheduler_core.amx_linear`,
`scheduler_core.block_linear`): the input checked against the packed weight and flattened to
contiguous fp32 rows, and the output the kernel writes into."""
from __future__ import annotations

import torch


def fp32_rows(x: torch.Tensor, in_features: int, out_features: int, kernel: str) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., in_features] as contiguous rows [m, in_features], and an empty fp32 [m, out_features];
    a `ValueError` naming ``kernel`` and both shapes where x is not fp32 on the CPU or does not fit."""
    if x.dtype != torch.float32 or x.device.type != "cpu" or x.shape[-1] != in_features:
        raise ValueError(f"{kernel}: x {tuple(x.shape)} {x.dtype} on {x.device} does not fit a "
                         f"{out_features}x{in_features} fp32 weight")
    rows = x.reshape(-1, in_features).contiguous()
    return rows, torch.empty((rows.shape[0], out_features), dtype=torch.float32)
