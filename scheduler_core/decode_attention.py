"""The CPU's decode attention: one query token per request against its KV slots, read in place.

torch's path for a decode batch gathers every request's keys and values into a padded copy
(``index_select``) that ``scaled_dot_product_attention`` then reads again; at batch 16 that was a
third of a SmolLM2 decode step on one thread (docs/engine.md). ``decode_attention.c`` reads the
paged cache where it lies, each row once. It is compiled on first use with the machine's C compiler
(``$CC``, else ``cc``; a fraction of a second) into a cache directory
(``$PARALLAX_KERNEL_CACHE``, else ``$XDG_CACHE_HOME/parallax/kernels``, else ``~/.cache/...``),
named by a hash of the source, the flags and the CPU, so a changed source or another CPU builds
its own copy. Where it cannot be built the engine keeps torch's path and logs why, once.

The kernel is single-threaded, so the model uses it on one torch thread only (with more, torch's
own kernels share the work between them), for fp32 on the plain CPU, and never under a dispatch
mode: the GPU simulator times and race-checks aten ops, and this is not one. The simulator sees the
gather and ``scaled_dot_product_attention`` instead, and computes a decode batch's attention with
this kernel over the gathered rows (`gathered_decode_attention`): the same rows in the same order,
so its values are the plain run's, bit for bit.
"""
from __future__ import annotations

import ctypes
import functools
import logging
from pathlib import Path

import torch

from scheduler_core import native_build
from scheduler_core.native_build import KernelUnavailable

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("decode_attention.c")
# -fopenmp-simd: the `omp simd` loops vectorise (reductions included) without OpenMP's runtime;
# -fno-math-errno: no errno stores in the vectorised loops. No -ffast-math: it would change the
# arithmetic everywhere and, linked in, flush denormals for the whole process.
FLAGS = ("-O3", "-march=native", "-fopenmp-simd", "-fno-math-errno", "-shared", "-fPIC")


def build(compiler: str | None = None, directory: Path | None = None) -> Path:
    """The compiled kernel's path, compiling it if this source, compiler and CPU have none yet.
    Raises `KernelUnavailable` naming what is missing or what the compiler said."""
    return native_build.build(SOURCE, FLAGS, compiler, directory)


def _declare(library: ctypes.CDLL) -> None:
    function = library.parallax_decode_attention
    function.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_int64] * 5 + [ctypes.c_float]
    function.restype = ctypes.c_int
    lengths = library.parallax_prefix_lengths
    lengths.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lengths.restype = ctypes.c_int


@functools.cache
def library() -> ctypes.CDLL | None:
    """The loaded kernel, built on first use; None (logged once, with the reason) where it cannot be."""
    try:
        return native_build.build_and_load(SOURCE, FLAGS, _declare)
    except KernelUnavailable as e:
        log.warning("decode attention stays on torch's scaled_dot_product_attention: %s", e)
        return None


def kernel_addresses() -> tuple[int, int] | None:
    """The addresses of ``parallax_decode_attention`` and ``parallax_prefix_lengths``, for a caller
    in C++ (the simulator's core computes ``gathered_decode_attention`` there); None where the kernel
    is not built. The library stays loaded for the process's life (``library`` is cached)."""
    lib = library()
    if lib is None:
        return None
    return (int(ctypes.cast(lib.parallax_decode_attention, ctypes.c_void_p).value or 0),
            int(ctypes.cast(lib.parallax_prefix_lengths, ctypes.c_void_p).value or 0))


def applies(q: torch.Tensor, k_cache: torch.Tensor) -> bool:
    """Whether the kernel takes this decode attention: fp32 on the CPU, one torch thread, built."""
    return (q.device.type == "cpu" and q.dtype == torch.float32 and k_cache.dtype == torch.float32
            and torch.get_num_threads() == 1 and library() is not None)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, kv_indices: torch.Tensor,
                     kv_lens: torch.Tensor) -> torch.Tensor:
    """q [B, heads, head_dim]; k_cache, v_cache [slots, kv_heads, head_dim]; kv_indices [B, >= max
    len] int64, the slots of request b in position order in its first kv_lens[b] entries (the rest
    are never read). Returns [B, heads * head_dim]. Call only where `applies`."""
    lib = library()
    assert lib is not None, "decode_attention called where the kernel does not apply"
    batch, heads, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    if (k_cache.shape != v_cache.shape or k_cache.shape[2] != head_dim or heads % kv_heads
            or kv_indices.dtype != torch.int64 or kv_lens.dtype != torch.int64 or kv_indices.shape[0] != batch
            or kv_lens.shape != (batch,) or int(kv_lens.max()) > kv_indices.shape[1] or int(kv_lens.min()) < 1
            # The kernel reads raw memory: a slot outside the cache must be refused, not read.
            or int(kv_indices.min()) < 0 or int(kv_indices.max()) >= k_cache.shape[0]):
        raise ValueError(f"decode_attention: q {tuple(q.shape)}, caches {tuple(k_cache.shape)} / "
                         f"{tuple(v_cache.shape)}, indices {tuple(kv_indices.shape)} {kv_indices.dtype}, "
                         f"lengths {kv_lens.tolist()} do not fit together")
    return _run(lib, q, k_cache, v_cache, kv_indices, kv_lens)


def _run(lib: ctypes.CDLL, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, kv_indices: torch.Tensor,
         kv_lens: torch.Tensor) -> torch.Tensor:
    """The kernel on operands known to fit together (``decode_attention`` checks them)."""
    batch, heads, head_dim = q.shape
    kv_heads = k_cache.shape[1]
    q = q.contiguous()
    kv_indices = kv_indices if kv_indices.stride(1) == 1 else kv_indices.contiguous()
    kv_lens = kv_lens.contiguous()
    k_cache, v_cache = k_cache.contiguous(), v_cache.contiguous()
    out = torch.empty((batch, heads * head_dim), dtype=q.dtype)
    status = lib.parallax_decode_attention(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), kv_indices.data_ptr(), kv_lens.data_ptr(),
        out.data_ptr(), batch, heads, kv_heads, head_dim, kv_indices.stride(0), head_dim ** -0.5)
    if status != 0:
        raise MemoryError(f"decode_attention: no memory for {heads} x {int(kv_lens.max())} scores")
    return out


def gathered_decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                              attn_mask: torch.Tensor | None) -> torch.Tensor | None:
    """``scaled_dot_product_attention(q, keys, values, attn_mask, enable_gqa=True)`` computed by the
    kernel, where the operands are a decode batch as the model's torch path builds it: q
    [B, heads, 1, head_dim]; keys and values [B, kv_heads, S, head_dim], transposed views of gathered
    [B, S, kv_heads, head_dim] rows; a boolean [B, 1, 1, S] mask that keeps each request's first
    keys. Returns SDPA's [B, heads, 1, head_dim], or None where the operands are anything else (or
    the kernel does not apply), for the caller to run SDPA itself."""
    if (attn_mask is None or attn_mask.dtype != torch.bool or q.dim() != 4 or q.shape[2] != 1
            or keys.dim() != 4 or keys.shape != values.shape or attn_mask.shape != (q.shape[0], 1, 1, keys.shape[2])
            or not applies(q, keys)):
        return None
    batch, heads, _, head_dim = q.shape
    span = keys.shape[2]
    rows_k, rows_v = keys.transpose(1, 2), values.transpose(1, 2)  # [B, S, kv_heads, head_dim]
    if not (rows_k.is_contiguous() and rows_v.is_contiguous()):
        return None
    if not attn_mask.is_contiguous():
        return None
    lib = library()
    lens = torch.empty(batch, dtype=torch.int64)
    # One C call for what five torch ops did (sum, compare with positions, equal, min): the simulator
    # computes every decode attention through here, a few times a step per layer.
    if lib.parallax_prefix_lengths(attn_mask.data_ptr(), batch, span, lens.data_ptr()) != 0:  # type: ignore[union-attr]
        return None
    # The slots are the gathered rows in order and every length is 1..span: they fit by construction.
    out = _run(lib, q.reshape(batch, heads, head_dim), rows_k.view(batch * span, -1, head_dim),  # type: ignore[arg-type]
               rows_v.view(batch * span, -1, head_dim), _slots(batch, span), lens)
    return out.view(batch, 1, heads, head_dim).transpose(1, 2)


@functools.lru_cache(maxsize=16)
def _slots(batch: int, span: int) -> torch.Tensor:
    """Row b's keys are gathered rows b * span ... (only read, never written)."""
    return torch.arange(batch * span).view(batch, span)
