"""The kernel for block-scaled weights (AVX-512 or AVX2): the fp32 weights rebuilt exactly from 4- or
8-bit q, an fp32 matmul's accuracy, rows independent of their batch, no access outside its operands,
the weights it refuses, the engine's choice of it (one thread, "native" or "no-amx", a weight it
takes), and a shared header that rebuilds every kernel including it."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from scheduler_core import block_linear, cpu_kernels, native_build
from scheduler_core.cpu_kernels import CPU_KERNELS_ENV
from tests.support import weights

# Only a CPU with neither skips: where it has one, a kernel that fails to build fails these tests.
needs_kernel = pytest.mark.skipif(not block_linear.cpu_runs_kernel(), reason="this CPU has neither AVX-512 nor AVX2 with FMA")
REPO = Path(__file__).resolve().parents[2]
BLOCKS = {"q4_1-like": False, "q8_0-like": True}


@needs_kernel
@pytest.mark.parametrize("kind", BLOCKS)
def test_the_product_is_as_accurate_as_an_fp32_matmul(kind: str) -> None:
    weight, x = weights.block_weight(1536, 576, symmetric=BLOCKS[kind]), torch.randn(16, 576)
    packed = block_linear.pack(weight)
    assert packed is not None and packed.bits == {"q4_1-like": 4, "q8_0-like": 8}[kind]
    assert packed.data.numel() == weight.numel() * {"q4_1-like": 0.75, "q8_0-like": 1.25}[kind]
    # The kernel adds each row's products one after another, oneDNN in blocks: both are an fp32
    # sum's rounding of the exact product, a weight value off by one q step would be far over.
    assert weights.rms_error(block_linear.linear(x, packed), x, weight) < 2 * weights.rms_error(F.linear(x, weight), x, weight)


# The kernel takes column blocks of 16 outputs two at a time; an odd last one goes alone.
COLUMN_BLOCKS = {"pairs": 64, "pairs and one alone": 48}


@needs_kernel
@pytest.mark.parametrize("kind", BLOCKS)
@pytest.mark.parametrize("columns", COLUMN_BLOCKS)
def test_the_weights_are_rebuilt_exactly(kind: str, columns: str) -> None:
    weight = weights.block_weight(COLUMN_BLOCKS[columns], 96, symmetric=BLOCKS[kind])
    packed = block_linear.pack(weight)
    # One-hot rows read the weight's columns back: each output is one product with 1.0, so any
    # error in q, d or m shows as a value that is not the weight's own.
    rebuilt = block_linear.linear(torch.eye(96), packed)
    assert torch.equal(rebuilt, weight.T.contiguous())


@needs_kernel
@pytest.mark.parametrize("kind", BLOCKS)
@pytest.mark.parametrize("out_features", [960, 976])
def test_a_row_gives_the_same_bits_in_any_batch(kind: str, out_features: int) -> None:
    weight = weights.block_weight(out_features, 576, symmetric=BLOCKS[kind])
    packed = block_linear.pack(weight)
    weights.check_rows_independent_of_their_batch(lambda x: block_linear.linear(x, packed), 576)


@needs_kernel
def test_leading_dimensions_are_kept() -> None:
    packed = block_linear.pack(weights.block_weight(576, 576))
    x = torch.randn(3, 5, 576)
    result = block_linear.linear(x, packed)
    assert result.shape == (3, 5, 576)
    assert torch.equal(result, block_linear.linear(x.reshape(15, 576), packed).view(3, 5, 576))


@needs_kernel
def test_infinities_and_nans_reach_only_their_own_row() -> None:
    weight = weights.block_weight(576, 576)
    packed = block_linear.pack(weight)
    x = torch.randn(3, 576)
    x[0, 7], x[1, 9] = float("inf"), float("nan")
    result = block_linear.linear(x, packed)
    expected = F.linear(x, weight)
    assert torch.equal(result[0].isfinite(), expected[0].isfinite()) and result[1].isnan().all()
    torch.testing.assert_close(result[2], expected[2], rtol=1e-5, atol=1e-5)


@needs_kernel
def test_weights_it_does_not_take_are_refused() -> None:
    assert block_linear.pack(torch.randn(1536, 576)) is None  # not block-scaled
    assert block_linear.pack(weights.two_piece_weight(1536, 576)) is None
    assert block_linear.pack(weights.block_weight(1530, 576)) is None  # not whole 16-column blocks
    assert block_linear.pack(weights.block_weight(1536, 576)[:, :570]) is None  # not whole 32-wide k blocks
    assert block_linear.pack(weights.block_weight(1536, 576).double()) is None
    nearly = weights.block_weight(1536, 576)
    nearly[100, 200] = torch.nextafter(nearly[100, 200], torch.tensor(1.0))  # one value off its block's grid
    assert block_linear.pack(nearly) is None
    with_infinity = weights.block_weight(576, 576)
    with_infinity[3, 4] = float("inf")
    assert block_linear.pack(with_infinity) is None


@needs_kernel
def test_an_input_that_does_not_fit_the_weight_is_refused_by_shape() -> None:
    packed = block_linear.pack(weights.block_weight(576, 576))
    with pytest.raises(ValueError, match=r"x \(4, 512\) torch.float32 on cpu does not fit a 576x576 fp32 weight"):
        block_linear.linear(torch.randn(4, 512), packed)
    with pytest.raises(ValueError, match=r"x \(4, 576\) torch.float64 on cpu does not fit"):
        block_linear.linear(torch.randn(4, 576, dtype=torch.float64), packed)


@needs_kernel
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("choice", ["native", "no-amx"])
def test_the_engine_multiplies_block_scaled_weights_on_the_kernel_on_one_thread(
        choice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_kernels.amx_linear, "pack", lambda weight: None)  # as on a CPU without AMX
    weight, x = weights.block_weight(1536, 576), torch.randn(16, 576)
    expected = block_linear.linear(x, block_linear.pack(weight))
    monkeypatch.setenv(CPU_KERNELS_ENV, choice)
    weights.check_the_kernel_serves_one_torch_thread_only(block_linear, x, weight, expected, monkeypatch)


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of each call to the block kernel (`weights.count_kernel_calls`)."""
    return weights.count_kernel_calls(block_linear, monkeypatch)


@needs_kernel
@pytest.mark.usefixtures("one_torch_thread")
def test_more_rows_than_a_decode_batch_stay_on_onednn(monkeypatch: pytest.MonkeyPatch, kernel_calls: list[int]) -> None:
    monkeypatch.setattr(cpu_kernels.amx_linear, "pack", lambda weight: None)
    monkeypatch.setenv(CPU_KERNELS_ENV, "native")
    weight = weights.block_weight(1536, 576)
    packed, onednn = block_linear.pack(weight), torch.ops.mkldnn._reorder_linear_weight(weight, 16)
    decode, prefill = torch.randn(cpu_kernels.BLOCK_ROWS_MAX, 576), torch.randn(cpu_kernels.BLOCK_ROWS_MAX + 1, 576)
    expected = block_linear.linear(decode, packed)
    assert torch.equal(cpu_kernels.linear(decode, weight), expected)
    assert torch.equal(cpu_kernels.linear(prefill, weight),
                       torch.ops.mkldnn._linear_pointwise(prefill, onednn, None, "none", [], ""))
    assert kernel_calls == [cpu_kernels.BLOCK_ROWS_MAX] * 2  # the expected result's and the decode batch's


@needs_kernel
@pytest.mark.usefixtures("one_torch_thread")
def test_the_no_blocks_choice_keeps_onednn(monkeypatch: pytest.MonkeyPatch, kernel_calls: list[int]) -> None:
    weight, x = weights.block_weight(1536, 576), torch.randn(16, 576)
    expected = block_linear.linear(x, block_linear.pack(weight))
    monkeypatch.setenv(CPU_KERNELS_ENV, "no-blocks")
    result = cpu_kernels.linear(x, weight)
    assert kernel_calls == [16]  # the expected result's only
    torch.testing.assert_close(result, expected, rtol=1e-4, atol=1e-4)
    assert cpu_kernels.native_decode_attention()


@needs_kernel
@pytest.mark.usefixtures("one_torch_thread")
def test_a_weight_changed_in_place_is_packed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_kernels.amx_linear, "pack", lambda weight: None)
    monkeypatch.setenv(CPU_KERNELS_ENV, "native")
    weights.check_packed_again_after_an_in_place_change(lambda x, weight: block_linear.linear(x, block_linear.pack(weight)))


def test_a_changed_shared_header_builds_the_kernel_again(tmp_path: Path) -> None:
    header, source = tmp_path / "shared.h", tmp_path / "kernel.c"
    header.write_text("static inline int answer(void) { return 41; }\n")
    source.write_text('#include "shared.h"\nint parallax_answer(void) { return answer(); }\n')
    first = native_build.build(source, ("-O1", "-shared", "-fPIC"), directory=tmp_path / "cache")
    assert native_build.build(source, ("-O1", "-shared", "-fPIC"), directory=tmp_path / "cache") == first
    header.write_text("static inline int answer(void) { return 42; }\n")
    second = native_build.build(source, ("-O1", "-shared", "-fPIC"), directory=tmp_path / "cache")
    assert second != first
    assert native_build.load(second, lambda lib: None).parallax_answer() == 42


def _sanitizer_links(compiler: str, directory: Path) -> bool:
    probe = directory / "probe.c"
    probe.write_text("int main(void) { return 0; }\n")
    return subprocess.run([compiler, "-fsanitize=address", str(probe), "-o", str(directory / "probe")],
                          capture_output=True).returncode == 0


@needs_kernel
def test_the_kernel_reads_and_writes_only_its_operands_under_address_sanitizer(tmp_path: Path) -> None:
    """The kernel of this CPU (AVX-512 or AVX2) on every pass split of 1 to 33 rows, both widths,
    four shapes, each operand allocated to its size, built with AddressSanitizer: no access outside
    an operand, and each result the product's (tests/support/block_linear_harness.c)."""
    compiler = os.environ.get("CC", "cc")
    if not _sanitizer_links(compiler, tmp_path):
        pytest.skip(f"{compiler} cannot link -fsanitize=address here")
    harness = tmp_path / "harness"
    subprocess.run([compiler, "-O3", "-march=native", "-fno-math-errno", "-fsanitize=address", "-fno-omit-frame-pointer",
                    "-o", str(harness), str(REPO / "tests/support/block_linear_harness.c"), str(block_linear.SOURCE),
                    "-lm"], check=True, capture_output=True)
    run = subprocess.run([str(harness)], capture_output=True, text=True, env={**os.environ, "ASAN_OPTIONS": "detect_leaks=0"})
    assert (run.returncode, run.stdout.strip()) == (0, "ok"), run.stdout + run.stderr[-3000:]
