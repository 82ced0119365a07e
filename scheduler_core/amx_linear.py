"""fp32 projections on the CPU's AMX tiles, kept to fp32 accuracy: ``amx_linear.c`` multiplies
bf16 pieces of the activations (three per value, which hold it exactly) by the weight and adds the
products that matter in fp32. On a decode batch of a few dozen rows an fp32 matmul on AVX-512 is
bound by its FMAs; the tiles do those products several times faster (docs/engine.md has the
measurements).

Two layouts of a weight, tried in this order (`pack`):
- block-scaled: every 32 values of a row are d * q + m exactly, q integers of at most 7 bits, as a
  quantised checkpoint (GGUF's Q4_1, Q8_0) dequantises; q is kept at 4 bits where every one lies in
  0..15, else 8, with d and m in fp32 per block: 0.75 or 1.25 bytes per value against fp32's 4;
- two bf16 pieces per value (a bf16 checkpoint, or values of at most 16 significant bits), 4 bytes
  per value. A weight needing three pieces would be read as 6 bytes per value, which costs more
  than it saves, so it stays on oneDNN.

The kernel is used only where it pays and is exact enough:
- the CPU has AMX with bf16 (``amx_tile``, ``amx_bf16`` and ``avx512_bf16`` in /proc/cpuinfo) and
  Linux grants the tile state;
- the weight is fp32, in one of the layouts above, and of whole tiles (``out_features % 16 == 0``,
  ``in_features % 32 == 0``);
- torch runs on one thread (the kernel is single-threaded; with more, oneDNN shares the work).

Built like `scheduler_core.decode_attention` (`scheduler_core.native_build`); where the CPU has no
AMX the projections stay on oneDNN (logged once at INFO), and where it has AMX but the kernel cannot
be built or enabled, with a warning that says why.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import platform
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from scheduler_core import native_build
from scheduler_core.kernel_operands import fp32_rows
from scheduler_core.native_build import KernelUnavailable

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("amx_linear.c")
FLAGS = ("-O3", "-march=native", "-mamx-tile", "-mamx-bf16", "-fno-math-errno", "-shared", "-fPIC")
TILE_COLS, TILE_K, TILE_ROWS = 16, 32, 16
CHUNK_BLOCKS = 32  # amx_linear.c's


@dataclass(frozen=True)
class PackedWeight:
    """A weight (out_features x in_features) in the kernel's tile layout: either ``pieces`` bf16
    pieces of each value, or (``scales`` set) block-scaled, one integer of ``bits`` (8, or 4 where
    every one lies in 0..15) per value in ``data`` and each block's scale and offset in ``scales``."""
    data: torch.Tensor
    pieces: int
    out_features: int
    in_features: int
    scales: torch.Tensor | None = None
    bits: int = 16


def cpu_has_amx() -> bool:
    flags = native_build.cpu_flags_line().split()
    return platform.machine() == "x86_64" and {"amx_tile", "amx_bf16", "avx512_bf16"} <= set(flags)


def _declare(library: ctypes.CDLL) -> None:
    pointer, size = ctypes.c_void_p, ctypes.c_int64
    library.parallax_amx_init.argtypes = []
    library.parallax_amx_init.restype = ctypes.c_int
    library.parallax_amx_weight_pieces.argtypes = [pointer, size]
    library.parallax_amx_weight_pieces.restype = ctypes.c_int
    library.parallax_amx_pack_weight.argtypes = [pointer, size, size, ctypes.c_int, pointer]
    library.parallax_amx_pack_weight.restype = None
    library.parallax_amx_linear.argtypes = [pointer, size, size, pointer, size, ctypes.c_int, pointer, pointer]
    library.parallax_amx_linear.restype = None
    library.parallax_amx_pack_blocks.argtypes = [pointer, size, size, pointer, pointer]
    library.parallax_amx_pack_blocks.restype = ctypes.c_int
    library.parallax_amx_narrow.argtypes = [pointer, size, pointer]
    library.parallax_amx_narrow.restype = ctypes.c_int
    library.parallax_amx_linear_blocks.argtypes = [pointer, size, size, pointer, ctypes.c_int, pointer, size, pointer,
                                                   pointer, pointer, pointer]
    library.parallax_amx_linear_blocks.restype = None
    library.parallax_amx_split.argtypes = [pointer, size, pointer, pointer, pointer]
    library.parallax_amx_split.restype = None
    library.parallax_amx_block_sums.argtypes = [pointer, size, size, size, pointer]
    library.parallax_amx_block_sums.restype = None


@functools.cache
def library() -> ctypes.CDLL | None:
    """The loaded kernel with the tile state granted, built on first use; None (logged once, with
    the reason) where the CPU has no AMX or the kernel cannot be built or enabled."""
    if not cpu_has_amx():
        log.info("fp32 projections stay on oneDNN, not AMX: this CPU has no AMX bf16 tiles "
                 "(amx_tile, amx_bf16, avx512_bf16 in /proc/cpuinfo)")
        return None
    try:
        lib = native_build.build_and_load(SOURCE, FLAGS, _declare)
        if lib.parallax_amx_init() != 0:
            raise KernelUnavailable("Linux refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)")
        log.info("fp32 projections on AMX tiles where a weight fits (%s)", Path(lib._name).name)
        return lib
    except KernelUnavailable as e:
        log.warning("fp32 projections stay on oneDNN, not AMX: %s", e)
        return None


def shape_fits(weight: torch.Tensor) -> bool:
    return weight.dim() == 2 and weight.shape[0] % TILE_COLS == 0 and weight.shape[1] % TILE_K == 0


def pack(weight: torch.Tensor, max_pieces: int = 2, blocks: bool = True) -> PackedWeight | None:
    """The weight in the kernel's layout, or None where the kernel does not take it (no AMX, not
    fp32, not whole tiles, or neither block-scaled, where ``blocks`` allows that, nor within
    ``max_pieces`` bf16 pieces; the engine allows two, see the module's docstring)."""
    lib = library()
    if lib is None or weight.dtype != torch.float32 or not shape_fits(weight):
        return None
    weight = weight.detach().contiguous()
    if blocks:
        packed = _pack_blocks(lib, weight)
        if packed is not None:
            return packed
    pieces = lib.parallax_amx_weight_pieces(weight.data_ptr(), weight.numel())
    if pieces > max_pieces:
        return None
    out_features, in_features = weight.shape
    data = torch.empty(out_features * in_features * pieces, dtype=torch.int16)
    lib.parallax_amx_pack_weight(weight.data_ptr(), out_features, in_features, pieces, data.data_ptr())
    return PackedWeight(data, pieces, out_features, in_features)


def _pack_blocks(lib: ctypes.CDLL, weight: torch.Tensor) -> PackedWeight | None:
    out_features, in_features = weight.shape
    data = torch.empty(out_features * in_features, dtype=torch.int8)
    scales = torch.empty(out_features * (in_features // TILE_K) * 2, dtype=torch.float32)
    if not lib.parallax_amx_pack_blocks(weight.data_ptr(), out_features, in_features, data.data_ptr(),
                                        scales.data_ptr()):
        return None
    narrow = torch.empty(data.numel() // 2, dtype=torch.uint8)
    if lib.parallax_amx_narrow(data.data_ptr(), data.numel(), narrow.data_ptr()):
        return PackedWeight(narrow, 1, out_features, in_features, scales, bits=4)
    return PackedWeight(data, 1, out_features, in_features, scales, bits=8)


def _aligned(count: int) -> torch.Tensor:
    """``count`` int16 at a 64-byte boundary, for the kernel's aligned vector stores."""
    raw = torch.empty(count + 32, dtype=torch.int16)
    skip = (-raw.data_ptr() % 64) // 2
    return raw[skip:skip + count]


# Working buffers kept per thread between calls, up to this many bytes: a decode batch's x pieces,
# block sums and widened tiles (90-180 KB) allocated anew for every call were about 4-6 us of a
# 13-row call's 11-13 us outside C (bench/amx_call_overhead.py, docs/engine.md). Larger calls (long
# prefills) allocate their own and keep nothing. Per thread: the C call releases the GIL.
WORKSPACE_MAX_BYTES = 8 << 20
_workspace = threading.local()


@dataclass
class _Buffers:
    scratch: torch.Tensor  # int16: x's three bf16 pieces
    sums: torch.Tensor  # fp32: x's block sums
    widened: torch.Tensor  # int16, 64-byte aligned: one k block of a chunk, widened


def working_buffers(rows: int, in_features: int) -> _Buffers:
    """The kernel's working buffers for ``rows`` rows of x (which it writes before it reads): this
    thread's kept ones where they are large enough."""
    padded = -(-rows // TILE_ROWS) * TILE_ROWS
    scratch, sums = 3 * padded * in_features, padded * (in_features // TILE_K)
    kept: _Buffers | None = getattr(_workspace, "buffers", None)
    if kept is not None and kept.scratch.numel() >= scratch and kept.sums.numel() >= sums:
        return kept
    fresh = _Buffers(torch.empty(scratch, dtype=torch.int16), torch.empty(sums, dtype=torch.float32),
                     _aligned(CHUNK_BLOCKS * TILE_K * TILE_COLS))
    if 2 * scratch + 4 * sums <= WORKSPACE_MAX_BYTES:
        _workspace.buffers = fresh
    return fresh


def linear(x: torch.Tensor, packed: PackedWeight) -> torch.Tensor:
    """``x @ weight.T`` for fp32 x [..., in_features] on the CPU, the weight packed by `pack`."""
    lib = library()
    assert lib is not None, "amx_linear.linear called where the kernel was not built"
    rows, out = fp32_rows(x, packed.in_features, packed.out_features, "amx_linear")
    m = rows.shape[0]
    if m:
        buffers = working_buffers(m, packed.in_features)
        if packed.scales is None:
            lib.parallax_amx_linear(rows.data_ptr(), m, packed.in_features, packed.data.data_ptr(),
                                    packed.out_features, packed.pieces, out.data_ptr(), buffers.scratch.data_ptr())
        else:
            lib.parallax_amx_linear_blocks(rows.data_ptr(), m, packed.in_features, packed.data.data_ptr(),
                                           packed.bits, packed.scales.data_ptr(), packed.out_features, out.data_ptr(),
                                           buffers.scratch.data_ptr(), buffers.sums.data_ptr(),
                                           buffers.widened.data_ptr())
    return out.view(*x.shape[:-1], packed.out_features)
