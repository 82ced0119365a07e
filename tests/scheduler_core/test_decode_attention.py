"""The CPU decode-attention kernel: torch's attention values over each request's own slots, padding
never read, bad shapes and slots refused, built once per source and CPU, torch's path kept (and
the reason logged) where it cannot be built, and aten ops only under a dispatch mode."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from scheduler_core import decode_attention, native_build
from scheduler_core.cpu_kernels import CPU_KERNELS_ENV
from scheduler_core.decode_attention import KernelUnavailable, build
from scheduler_core.model.loader import load_model
from tests.support.decode_step import decode_logits
from tests.support.op_names import OpNames

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def rebuilt(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """An empty kernel cache and a fresh `library()`; the cached library is restored afterwards."""
    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path))
    decode_attention.library.cache_clear()
    yield tmp_path
    decode_attention.library.cache_clear()


def _cache(slots: int, kv_heads: int, head_dim: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    k = torch.randn((slots, kv_heads, head_dim), generator=generator)
    v = torch.randn((slots, kv_heads, head_dim), generator=generator)
    # Slot 0 is the padding slot: values no real key has, so reading it would show.
    k[0], v[0] = 1e4, -1e4
    return k, v


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: list[torch.Tensor]) -> torch.Tensor:
    """Each request alone: its own keys and values gathered, torch's attention, no mask, no padding."""
    rows = []
    for qi, s in zip(q, slots):
        keys, values = k[s].transpose(0, 1), v[s].transpose(0, 1)  # [kv_heads, n, head_dim]
        out = F.scaled_dot_product_attention(qi[:, None, :], keys, values, enable_gqa=True)  # [heads, 1, hd]
        rows.append(out.reshape(-1))
    return torch.stack(rows)


def _ragged(lens: list[int], slots: int, seed: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Scattered slots (1..slots-1) per request; the [B, max] table is padded with slot 0."""
    order = torch.randperm(slots - 1, generator=torch.Generator().manual_seed(seed)) + 1
    table = torch.zeros((len(lens), max(lens) + 3), dtype=torch.int64)
    own, start = [], 0
    for i, n in enumerate(lens):
        own.append(order[start:start + n])
        table[i, :n] = own[-1]
        start += n
    return table, own


@pytest.mark.parametrize("head_dim", [64, 128, 40])  # the two specialised sizes and the general loop
def test_the_kernel_gives_torchs_attention_over_each_requests_own_slots(head_dim: int) -> None:
    heads, kv_heads, lens = 9, 3, [1, 7, 64, 130, 33]
    k, v = _cache(600, kv_heads, head_dim, seed=head_dim)
    table, own = _ragged(lens, 600, seed=1)
    q = torch.randn((len(lens), heads, head_dim), generator=torch.Generator().manual_seed(2))
    out = decode_attention.decode_attention(q, k, v, table, torch.tensor(lens))
    torch.testing.assert_close(out, _reference(q, k, v, own), rtol=1e-5, atol=1e-5)


def test_a_table_row_wider_than_its_length_is_read_only_up_to_it() -> None:
    k, v = _cache(64, 1, 64, seed=3)
    table, own = _ragged([5], 64, seed=4)
    table[0, 5:] = 7  # a real slot past the request's end: a stale table entry must not be read
    q = torch.randn((1, 1, 64))
    out = decode_attention.decode_attention(q, k, v, table, torch.tensor([5]))
    torch.testing.assert_close(out, _reference(q, k, v, own), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("change", "lens"), [
    ("slot past the cache", [3]), ("negative slot", [3]), ("length past the table", [9]), ("empty request", [0]),
])
def test_slots_and_lengths_that_do_not_fit_are_refused_before_any_read(change: str, lens: list[int]) -> None:
    k, v = _cache(16, 1, 64, seed=5)
    table = torch.tensor([[1, 2, 3, 0]])
    if change == "slot past the cache":
        table[0, 1] = 16
    elif change == "negative slot":
        table[0, 3] = -1
    with pytest.raises(ValueError, match="do not fit together"):
        decode_attention.decode_attention(torch.randn((1, 1, 64)), k, v, table, torch.tensor(lens))


def test_the_kernel_is_built_once_per_source_and_kept(rebuilt: Path, monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path_factory: pytest.TempPathFactory) -> None:
    first = build()
    stamp = first.stat().st_mtime_ns
    assert build() == first and first.stat().st_mtime_ns == stamp
    changed = tmp_path_factory.mktemp("source") / "decode_attention.c"
    changed.write_text(decode_attention.SOURCE.read_text() + "\n/* changed */\n")
    monkeypatch.setattr(decode_attention, "SOURCE", changed)
    assert build() != first
    assert sorted(p.name for p in rebuilt.iterdir()) == sorted([first.name, build().name])  # no partial files


def test_a_damaged_cached_kernel_is_built_again(rebuilt: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = build()
    path.write_bytes(b"not a shared object")
    with caplog.at_level(logging.WARNING, logger="scheduler_core.native_build"):  # the rebuild is shared
        assert decode_attention.library() is not None
    assert f"cannot load {path}" in caplog.text and "building it again" in caplog.text
    assert path.read_bytes()[:4] == b"\x7fELF"


def test_a_missing_compiler_keeps_torchs_path_and_says_why(rebuilt: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CC", "no-such-cc")
    with caplog.at_level(logging.WARNING, logger="scheduler_core.decode_attention"):
        assert decode_attention.library() is None
    assert "no C compiler 'no-such-cc' on PATH (set CC)" in caplog.text
    assert not decode_attention.applies(torch.zeros((1, 1, 64)), torch.zeros((2, 1, 64)))
    assert list(rebuilt.iterdir()) == []


def test_a_failing_compiler_is_named_with_what_it_said_and_leaves_no_file(tmp_path: Path) -> None:
    fake = tmp_path / "broken-cc"
    fake.write_text("#!/bin/sh\necho 'internal compiler error: out of cheese' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(KernelUnavailable, match=r"broken-cc failed on decode_attention.c: internal compiler error"):
        build(compiler=str(fake), directory=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_more_than_one_torch_thread_keeps_torchs_parallel_path() -> None:
    q, k = torch.zeros((1, 1, 64)), torch.zeros((2, 1, 64))
    assert decode_attention.applies(q, k)
    torch.set_num_threads(2)
    assert not decode_attention.applies(q, k)


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = decode_attention.decode_attention

    def counted(*args: torch.Tensor) -> torch.Tensor:
        calls.append(args[0].shape[0])
        return real(*args)

    monkeypatch.setattr(decode_attention, "decode_attention", counted)
    return calls


def test_the_models_decode_step_uses_the_kernel_and_gives_the_aten_forwards_logits(
        monkeypatch: pytest.MonkeyPatch, kernel_calls: list[int]) -> None:
    monkeypatch.setenv(CPU_KERNELS_ENV, "aten")
    aten = decode_logits(load_model("tiny-random"))
    assert kernel_calls == []
    monkeypatch.setenv(CPU_KERNELS_ENV, "native")
    native = decode_logits(load_model("tiny-random"))
    assert kernel_calls and set(kernel_calls) == {2}  # each layer's decode attention, both requests
    torch.testing.assert_close(native, aten, rtol=1e-5, atol=1e-5)


def test_under_a_dispatch_mode_decode_attention_is_torchs(kernel_calls: list[int]) -> None:
    loaded = load_model("tiny-random")
    with OpNames() as mode:
        decode_logits(loaded)
    assert kernel_calls == []
    assert any("scaled_dot_product" in name for name in mode.names)


def test_the_onednn_choice_keeps_the_prepacked_projections_and_torchs_attention(
        monkeypatch: pytest.MonkeyPatch, kernel_calls: list[int]) -> None:
    monkeypatch.setenv(CPU_KERNELS_ENV, "onednn")
    loaded = load_model("tiny-random")
    decode_logits(loaded)
    assert loaded.model.layers[0].self_attn.qkv_proj.prepacked and kernel_calls == []


def _gathered(lens: list[int], span: int = 6, heads: int = 4, kv_heads: int = 2, head_dim: int = 32):
    """A decode batch as the model's torch path builds it: q, gathered keys and values (transposed
    views of [B, S, kv_heads, head_dim] rows) and the boolean mask keeping each request's first keys."""
    generator = torch.Generator().manual_seed(len(lens) * 31 + span)
    q = torch.randn((len(lens), heads, 1, head_dim), generator=generator)
    rows_k = torch.randn((len(lens), span, kv_heads, head_dim), generator=generator)
    rows_v = torch.randn((len(lens), span, kv_heads, head_dim), generator=generator)
    mask = (torch.arange(span)[None, :] < torch.tensor(lens)[:, None]).view(len(lens), 1, 1, span)
    return q, rows_k.transpose(1, 2), rows_v.transpose(1, 2), mask


def test_a_gathered_decode_batch_gives_torchs_attention() -> None:
    q, keys, values, mask = _gathered([6, 1, 3])
    got = decode_attention.gathered_decode_attention(q, keys, values, mask)
    expected = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
    assert got is not None and torch.allclose(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("row", [[0, 1, 1, 0, 0, 0], [1, 0, 1, 0, 0, 0], [0, 0, 0, 0, 0, 0]],
                         ids=["a leading gap", "a hole", "no key"])
def test_a_mask_that_keeps_no_prefix_of_keys_is_left_to_torch(row: list[int]) -> None:
    q, keys, values, mask = _gathered([6, 2, 3])
    mask[1, 0, 0] = torch.tensor(row, dtype=torch.bool)
    assert decode_attention.gathered_decode_attention(q, keys, values, mask) is None
