"""fp32 projections with block-scaled weights read at 4 or 8 bits, on AVX-512 or AVX2 FMAs
(``block_linear.c``), for CPUs without AMX tiles (`scheduler_core.amx_linear` takes those).

A quantised checkpoint's weights, dequantised to fp32, are d * q + m per 32 values of a row with
small integers q (GGUF's Q4_1: q in 0..15; Q8_0: m = 0, |q| <= 127). A decode batch of a few dozen
rows streams every weight once per step, and on a CPU whose FMAs outrun its memory that
stream bounds the step: kept as q plus d and m per block, a projection is read at 0.75 bytes per
value (4 bits) or 1.25 (8 bits) instead of 4. The kernel rebuilds each value as fma(q, d, m), which
is the fp32 weight exactly, and multiplies in fp32: the result is an fp32 matmul's up to the order
of the additions, and each row's is independent of the other rows of the batch.

The kernel is used only where it applies:
- the CPU has AVX-512 (``avx512f`` in /proc/cpuinfo), or AVX2 with FMA (``avx2`` and ``fma``), and
  the kernel builds (the AVX2 build reads each block as two halves of 8 columns; the results are
  the same bits);
- the weight is fp32, block-scaled exactly (`pack` checks every block), with
  ``out_features % 16 == 0`` and ``in_features % 32 == 0``;
- torch runs on one thread (the kernel is single-threaded; with more, oneDNN shares the work).

Built like `scheduler_core.decode_attention` (`scheduler_core.native_build`); elsewhere the
projections stay on oneDNN, with the reason logged once.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

from scheduler_core import native_build
from scheduler_core.kernel_operands import fp32_rows
from scheduler_core.native_build import KernelUnavailable

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("block_linear.c")
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-shared", "-fPIC")
COLUMNS, SCALE_BLOCK = 16, 32  # block_linear.c's


@dataclass(frozen=True)
class BlockWeight:
    """A weight (out_features x in_features) in the kernel's layout: per 16 columns and 32 values of
    k, the q at ``bits`` bits (4 or 8), then the 16 scales and 16 offsets (fp32)."""
    data: torch.Tensor
    bits: int
    out_features: int
    in_features: int


def cpu_has_avx512() -> bool:
    return platform.machine() == "x86_64" and "avx512f" in native_build.cpu_flags_line().split()


def cpu_runs_kernel() -> bool:
    """Whether the CPU has the vector FMAs the kernel is written for: AVX-512, or AVX2 with FMA."""
    flags = native_build.cpu_flags_line().split()
    return platform.machine() == "x86_64" and ("avx512f" in flags or {"avx2", "fma"} <= set(flags))


def declare(library: ctypes.CDLL) -> None:
    """The C functions' argument and result types on a loaded build of the kernel (this tree's, or
    another revision's in `bench/block_kernel_ab.py`)."""
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    library.parallax_blocks_find.argtypes = [pointer, size, size, pointer, pointer]
    library.parallax_blocks_find.restype = ctypes.c_int
    library.parallax_blocks_packed_bytes.argtypes = [size, size, ctypes.c_int]
    library.parallax_blocks_packed_bytes.restype = size
    library.parallax_blocks_layout.argtypes = [pointer, pointer, size, size, ctypes.c_int, pointer]
    library.parallax_blocks_layout.restype = None
    library.parallax_blocks_linear.argtypes = [pointer, size, size, pointer, ctypes.c_int, size, pointer]
    library.parallax_blocks_linear.restype = None


@functools.cache
def library() -> ctypes.CDLL | None:
    """The loaded kernel, built on first use; None (logged once, with the reason) where the CPU has
    neither AVX-512 nor AVX2 with FMA, or the kernel cannot be built."""
    if not cpu_runs_kernel():
        log.info("block-scaled projections stay on oneDNN: this CPU has neither AVX-512 nor AVX2 with FMA "
                 "(avx512f, avx2 and fma in /proc/cpuinfo)")
        return None
    try:
        lib = native_build.build_and_load(SOURCE, FLAGS, declare)
    except KernelUnavailable as e:
        log.warning("block-scaled projections stay on oneDNN: %s", e)
        return None
    log.info("block-scaled fp32 projections read at 4 or 8 bits on %s (%s)",
             "AVX-512" if cpu_has_avx512() else "AVX2", Path(lib._name).name)
    return lib


def shape_fits(weight: torch.Tensor) -> bool:
    return weight.dim() == 2 and weight.shape[0] % COLUMNS == 0 and weight.shape[1] % SCALE_BLOCK == 0


def pack(weight: torch.Tensor) -> BlockWeight | None:
    """The weight in the kernel's layout, or None where the kernel does not take it (no AVX-512 or
    AVX2 with FMA, not fp32, not whole blocks, or some block not d * q + m exactly)."""
    lib = library()
    if lib is None or weight.dtype != torch.float32 or not shape_fits(weight):
        return None
    weight = weight.detach().contiguous()
    out_features, in_features = weight.shape
    q = torch.empty(out_features * in_features, dtype=torch.int8)
    scales = torch.empty(out_features * (in_features // SCALE_BLOCK) * 2, dtype=torch.float32)
    bits = lib.parallax_blocks_find(weight.data_ptr(), out_features, in_features, q.data_ptr(), scales.data_ptr())
    if bits == 0:
        return None
    data = torch.empty(lib.parallax_blocks_packed_bytes(out_features, in_features, bits), dtype=torch.uint8)
    lib.parallax_blocks_layout(q.data_ptr(), scales.data_ptr(), out_features, in_features, bits, data.data_ptr())
    return BlockWeight(data, bits, out_features, in_features)


def linear(x: torch.Tensor, packed: BlockWeight) -> torch.Tensor:
    """``x @ weight.T`` for fp32 x [..., in_features] on the CPU, the weight packed by `pack`."""
    lib = library()
    assert lib is not None, "block_linear.linear called where the kernel was not built"
    rows, out = fp32_rows(x, packed.in_features, packed.out_features, "block_linear")
    if rows.shape[0]:
        lib.parallax_blocks_linear(rows.data_ptr(), rows.shape[0], packed.in_features, packed.data.data_ptr(),
                                   packed.bits, packed.out_features, out.data_ptr())
    return out.view(*x.shape[:-1], packed.out_features)
