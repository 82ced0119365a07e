"""Weights as checkpoints hold them, for the projection kernels' tests (`scheduler_core.amx_linear`,
`scheduler_core.block_linear`): block-scaled as GGUF's Q4_1 and Q8_0 dequantise, or of two bf16
pieces; and a result's error against the exact product."""
from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

import pytest
import torch

from scheduler_core import cpu_kernels


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


def check_packed_again_after_an_in_place_change(kernel: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
    """`cpu_kernels.linear` on a block-scaled weight, then on the same weight scaled in place by -4,
    gives ``kernel(x, weight)`` (the kernel on a fresh packing) after the change."""
    weight, x = block_weight(1536, 576), torch.randn(8, 576)
    before = cpu_kernels.linear(x, weight)
    with torch.no_grad():
        weight.mul_(-4.0)  # a power of two: still block-scaled (d and m times -4, the least value now the greatest)
    after = cpu_kernels.linear(x, weight)
    assert torch.equal(after, kernel(x, weight))
    # Scaled by -4 the greatest value becomes the least and each block is found again with other q,
    # so the sums are not exactly -4 times; a stale packed copy would be off by the whole factor.
    torch.testing.assert_close(after, before * -4.0, rtol=1e-4, atol=1e-4)


def check_rows_independent_of_their_batch(linear: Callable[[torch.Tensor], torch.Tensor], in_features: int) -> None:
    """``linear`` gives each row the same bits alone, in the first m rows of a batch of 37 (two whole
    groups of 16 rows and a partial one), and from the middle of the batch."""
    x = torch.randn(37, in_features)
    together = linear(x)
    for m in (1, 13, 16, 17):
        assert torch.equal(linear(x[:m]), together[:m])
    assert torch.equal(linear(x[20:21]), together[20:21])


def count_kernel_calls(kernel: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each call to ``kernel.linear`` from here on (the test's monkeypatch undoes it).
    Counted, not told apart by bits: on AVX2, oneDNN's small-batch sum adds in k order as the block
    kernel does, and the bits agree."""
    calls: list[int] = []
    served = kernel.linear

    def counted(x: torch.Tensor, packed: Any) -> torch.Tensor:
        calls.append(x.numel() // x.shape[-1])
        return served(x, packed)
    monkeypatch.setattr(kernel, "linear", counted)
    return calls


def check_the_kernel_serves_one_torch_thread_only(kernel: ModuleType, x: torch.Tensor, weight: torch.Tensor,
                                                 expected: torch.Tensor, monkeypatch: pytest.MonkeyPatch) -> None:
    """On one torch thread `cpu_kernels.linear` calls ``kernel.linear`` and gives its ``expected``
    bits; on two it does not call it (oneDNN shares the work) and gives the same product, rounded
    its own way."""
    calls = count_kernel_calls(kernel, monkeypatch)
    assert torch.equal(cpu_kernels.linear(x, weight), expected)
    assert len(calls) == 1
    torch.set_num_threads(2)
    try:
        two_threads = cpu_kernels.linear(x, weight)
    finally:
        torch.set_num_threads(1)
    assert len(calls) == 1
    torch.testing.assert_close(two_threads, expected, rtol=1e-4, atol=1e-4)
