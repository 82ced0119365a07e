"""Rotary embeddings: the tables' rows gathered once per forward and rotate-half as a roll give
the Hugging Face formula's values bit for bit (transformers' ``apply_rotary_pos_emb``)."""
from __future__ import annotations

import pytest
import torch

from scheduler_core.model.llama import Rotary


def rotate_half_reference(x: torch.Tensor, rotary: Rotary, positions: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` as transformers writes it, on the plain tables."""
    half = x.shape[-1] // 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, x.shape[-1], 2, dtype=torch.int64).float() / x.shape[-1]))
    emb = torch.outer(torch.arange(rotary.cos.shape[0], dtype=torch.float32), inv_freq).repeat(1, 2)
    cos, sin = emb.cos()[positions][:, None, :].to(x.dtype), emb.sin()[positions][:, None, :].to(x.dtype)
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_rolled_rotation_equals_rotate_half_bit_for_bit(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    rotary = Rotary(head_dim=64, base=10000.0, max_positions=4096)
    positions = torch.tensor([0, 1, 7, 100, 4095, 2048, 3])
    x = torch.randn(len(positions), 9, 64).to(dtype)
    x[0, 0, :4] = torch.tensor([0.0, -0.0, float("inf"), -1e-40])  # zeros' signs, an infinity, a denormal
    ours = rotary.angles(positions, dtype).apply(x)
    reference = rotate_half_reference(x, rotary, positions)
    assert ours.dtype == dtype
    assert torch.equal(ours.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                       reference.view(torch.int16 if dtype == torch.bfloat16 else torch.int32))


def test_a_query_slice_of_the_fused_projection_is_rotated_like_a_copy() -> None:
    rotary = Rotary(head_dim=64, base=10000.0, max_positions=128)
    qkv = torch.randn(5, 9 * 64 + 2 * 3 * 64)
    q = qkv[:, : 9 * 64].view(5, 9, 64)  # not contiguous: a row of qkv is wider
    angles = rotary.angles(torch.arange(5), torch.float32)
    assert torch.equal(angles.apply(q), angles.apply(q.contiguous()))
