"""The CPU's fp32 projection kernels: AMX tiles where the CPU has them (`scheduler_core.amx_linear`),
block-scaled weights read at 4 or 8 bits on AVX-512 or AVX2 where it has no AMX
(`scheduler_core.block_linear`), else ``F.linear`` with a oneDNN-prepacked copy of the weight; and
the choice between Parallax's CPU kernels (these projections, `scheduler_core.decode_attention`) and
plain aten ops.

A decode batch of a few dozen rows streams every weight from memory once per step, and the default
CPU ``F.linear`` (MKL) repacks its weight operand on every call; oneDNN's prepacked layout is made
once per weight and reused (docs/engine.md has the measurements). torch ships oneDNN, so this is a
choice of kernel, not a new dependency. On one torch thread, a weight that `amx_linear` takes (the
CPU has AMX; the weight is block-scaled, as a quantised checkpoint dequantises, or two bf16 pieces)
goes there instead; on a CPU without AMX, a block-scaled weight goes to the block kernel (AVX-512 or AVX2).
``PARALLAX_CPU_KERNELS=aten`` turns every kernel off.

The model calls `linear` on the plain CPU; the GPU simulator, which sees ``aten.linear`` under its
dispatch mode, computes that op with `linear` too, so a simulated run's outputs are the plain
run's, value for value. `ops_observed` tells the model when such a hook is watching.
"""
from __future__ import annotations

import os
import threading
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import is_in_torch_dispatch_mode
from torch.utils.weak import WeakIdKeyDictionary

from scheduler_core import amx_linear, block_linear

CPU_KERNELS_ENV = "PARALLAX_CPU_KERNELS"  # "native" (default), "no-amx", "no-blocks", "onednn" or "aten"
CHOICES = ("native", "no-amx", "no-blocks", "onednn", "aten")
# oneDNN blocks a prepacked weight for an expected number of rows; the engine's decode batches are
# tens of rows (prefill chunks of hundreds run faster prepacked too, whatever the hint).
_ROWS_HINT = 16
# Smaller weights stay on F.linear: a prepacked call costs about 25 us more than F.linear's before
# any arithmetic, which a small weight does not win back (bench/prepack_crossover.py, one thread,
# 8-64 rows, prepacked time over F.linear's: a 64-wide model's projections, up to 64x256, 1.7-5.4;
# SmolLM2's 576x576 0.92-1.24, about even; its 576x960 and larger 0.53-0.91).
PREPACK_MIN_ELEMENTS = 1 << 18
# The block-scaled kernel reads a weight at a fifth of fp32's bytes but rebuilds its values for every
# 16 rows, so oneDNN's fp32 overtakes it between 32 and 64 rows (bench/block_projections.py, SmolLM2's
# weights, one thread, AMD EPYC with AVX-512: oneDNN's time over the kernel's 1.3-1.5 at 13-16 rows,
# 1.04-1.08 at 32, 0.87-0.92 at 64; the AVX2 build on an AVX2-only EPYC: 1.5-2.4 at 13 rows, 1.1-1.4
# at 32). Decode batches take it; prefill chunks stay on oneDNN.
BLOCK_ROWS_MAX = 32
# weight -> (its storage address and version counter when packed, {kernel: its packed copy}), the
# kernels "onednn", "amx" and "blocks" (None where that kernel does not take the weight; a weight
# the block kernel takes has a oneDNN copy too, for prefill chunks). Weakly keyed by the tensor
# object: a dropped weight drops its copies, and a weight changed in place (its version counter
# moves) or given new storage is packed again.
_packed: WeakIdKeyDictionary = WeakIdKeyDictionary()


_observer = threading.local()


def ops_observed() -> bool:
    """Whether something watches this thread's aten ops one by one (a Python dispatch mode, or the
    simulator's C++ core, which says so with `set_ops_observed`): the model then calls the plain
    aten ops instead of these kernels, and the watcher computes those ops with these kernels."""
    return getattr(_observer, "on", False) or is_in_torch_dispatch_mode()


def set_ops_observed(on: bool) -> bool:
    """Say whether this thread's aten ops are watched by a hook that is no dispatch mode; returns
    what was said before, to restore."""
    before = getattr(_observer, "on", False)
    _observer.on = on
    return before


class KernelChoiceError(ValueError):
    """``PARALLAX_CPU_KERNELS`` names no choice; the message says what it holds and the choices."""


def cpu_kernels() -> str:
    """The CPU kernels chosen: "native" (AMX projections where they apply, else the block-scaled
    ones (AVX-512 or AVX2) where they apply, the prepacked ones elsewhere, and the decode-attention
    kernel), "no-amx" (the same without AMX), "no-blocks" (neither AMX nor the block-scaled kernel:
    prepacked projections and the decode-attention kernel), "onednn" (the prepacked projections
    only) or "aten" (torch's own ops throughout)."""
    choice = os.environ.get(CPU_KERNELS_ENV, "native")
    if choice not in CHOICES:
        raise KernelChoiceError(f"{CPU_KERNELS_ENV}={choice!r}: expected one of {', '.join(CHOICES)}")
    return choice


def prepacked_projections() -> bool:
    """Whether projections multiply by oneDNN-prepacked weights (chosen, and torch has oneDNN)."""
    return cpu_kernels() != "aten" and torch.backends.mkldnn.is_available()


def native_decode_attention() -> bool:
    """Whether decode attention may use `scheduler_core.decode_attention` (it also checks, per call,
    that it applies and was built)."""
    return cpu_kernels() in ("native", "no-amx", "no-blocks")


def weight_fits(weight: torch.Tensor) -> bool:
    """Whether the prepacked kernels take this weight: fp32, on the CPU, 2-D, of at least
    PREPACK_MIN_ELEMENTS."""
    return (weight.device.type == "cpu" and weight.dtype == torch.float32 and weight.dim() == 2
            and weight.numel() >= PREPACK_MIN_ELEMENTS)


def applies(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear` uses the prepacked kernel for these operands (fp32 x on the CPU, and a weight
    that `weight_fits`)."""
    return x.device.type == "cpu" and x.dtype == torch.float32 and x.dim() >= 1 and weight_fits(weight)


# How each kernel packs a weight (looked up on its module at each call, so a test can patch it).
PACKERS = {
    "amx": lambda weight: amx_linear.pack(weight),
    "blocks": lambda weight: block_linear.pack(weight),
    "onednn": lambda weight: torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _ROWS_HINT),
}


def _packed_copies(weight: torch.Tensor) -> dict:
    key = (weight.data_ptr(), weight._version)
    entry = _packed.get(weight)
    if entry is None or entry[0] != key:
        entry = _packed[weight] = (key, {})
    return entry[1]


def _copy(copies: dict, kernel: str, weight: torch.Tensor) -> Any:  # each kernel's own type, or None
    if kernel not in copies:
        copies[kernel] = PACKERS[kernel](weight)
    return copies[kernel]


# How each kernel multiplies by its packed copy (looked up at each call, as PACKERS).
RUNNERS = {
    "amx": lambda x, packed: amx_linear.linear(x, packed),
    "blocks": lambda x, packed: block_linear.linear(x, packed),
    "onednn": lambda x, packed: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""),
}


def kernel_order() -> tuple[str, ...]:
    """The kernels `linear` tries, first to last, on this thread count and kernel choice; the first
    whose copy of the weight exists takes the call. AMX takes calls of any rows, the block-scaled
    kernel calls of at most `BLOCK_ROWS_MAX` rows, oneDNN every call. The one place that says the
    order: `linear` and `pack_ahead` both follow it."""
    choice = cpu_kernels()
    if torch.get_num_threads() == 1 and choice in ("native", "no-amx"):
        return ("amx", "blocks", "onednn") if choice == "native" else ("blocks", "onednn")
    return ("onednn",)


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.linear(x, weight)`` (no bias): where `applies`, on the first kernel of `kernel_order` that
    takes the weight and the call's rows (AMX tiles, the block-scaled kernel for AVX-512 or AVX2,
    oneDNN's prepacked copy), else F.linear itself. A copy not made yet (`pack_ahead`) is made on
    first use."""
    if not applies(x, weight):
        return F.linear(x, weight)
    copies = _packed_copies(weight)
    few_rows = x.numel() <= BLOCK_ROWS_MAX * x.shape[-1]
    for kernel in kernel_order():
        if kernel == "blocks" and not few_rows:
            continue
        packed = _copy(copies, kernel, weight)
        if packed is not None:
            return RUNNERS[kernel](x, packed)
    raise AssertionError("oneDNN, last in every kernel order, takes every weight that fits")


def pack_ahead(weight: torch.Tensor, prefill_rows: bool = True) -> None:
    """Makes now the copies `linear` would make on its first calls with this weight, on this thread
    count and kernel choice (`kernel_order`): the AMX or block-scaled kernel's (decode batches) and
    oneDNN's (calls of more rows, and every call where neither kernel takes the weight).
    ``prefill_rows=False`` for a weight that rarely sees more than `BLOCK_ROWS_MAX` rows (an LM head
    multiplies one row per request): its oneDNN copy is left to a first call that needs it. The
    engine calls this when it loads a model, as serving engines prepare their weights after loading,
    so that the first requests do not pay for it (1.6 s of SmolLM2's first 32 prompts on an AMD EPYC
    with AVX2 only, py-spy; docs/engine.md). Nothing to do where the prepacked kernels are off or do
    not take it."""
    if not prepacked_projections() or not weight_fits(weight):
        return
    copies = _packed_copies(weight)
    for kernel in kernel_order():
        taken = _copy(copies, kernel, weight) is not None
        if taken and (kernel == "amx" or (kernel == "blocks" and not prefill_rows)):
            return  # AMX takes every call, whatever its rows; the block kernel every call expected
