"""The AMX projection kernels: fp32 accuracy from bf16 pieces, for block-scaled weights (as GGUF's
Q4_1 and Q8_0 dequantise) and for weights of two bf16 pieces; rows independent of their batch; the
weights it refuses; and the engine's choice of it (one thread, "native", a weight it takes)."""
from __future__ import annotations

import os
import threading

import pytest
import torch
import torch.nn.functional as F

from scheduler_core import amx_linear, cpu_kernels
from scheduler_core.cpu_kernels import CPU_KERNELS_ENV
from tests.support.weights import (
    WEIGHTS,
    block_weight,
    check_packed_again_after_an_in_place_change,
    check_rows_independent_of_their_batch,
    check_the_kernel_serves_one_torch_thread_only,
    rms_error,
    two_piece_weight,
)

# Only a CPU without AMX skips: where it has AMX, a kernel that fails to build fails these tests.
needs_amx = pytest.mark.skipif(not amx_linear.cpu_has_amx(), reason="this CPU has no AMX bf16 tiles")


@needs_amx
@pytest.mark.parametrize("kind", WEIGHTS)
def test_the_product_is_as_accurate_as_an_fp32_matmul(kind: str) -> None:
    weight, x = WEIGHTS[kind](1536, 576), torch.randn(16, 576)
    packed = amx_linear.pack(weight)
    assert packed is not None and (packed.scales is not None) == ("blocks" in kind)
    assert packed.bits == {"q4_1-like blocks": 4, "q8_0-like blocks": 8, "two bf16 pieces": 16}[kind]
    # An fp32 matmul's error against the exact product is its rounding, about 2^-24 per term; one
    # bf16 piece fewer of x (x3 dropped) would be 2^-18 per term, far over twice fp32's.
    assert rms_error(amx_linear.linear(x, packed), x, weight) < 2 * rms_error(F.linear(x, weight), x, weight)


@needs_amx
def test_a_weight_of_three_pieces_is_exact_enough_where_allowed() -> None:
    weight, x = torch.randn(1536, 576) * 0.05, torch.randn(16, 576)
    packed = amx_linear.pack(weight, max_pieces=3)
    assert packed is not None and packed.pieces == 3
    assert rms_error(amx_linear.linear(x, packed), x, weight) < 2 * rms_error(F.linear(x, weight), x, weight)


@needs_amx
@pytest.mark.parametrize("kind", WEIGHTS)
def test_a_row_gives_the_same_bits_in_any_batch(kind: str) -> None:
    weight = WEIGHTS[kind](960, 576)
    packed = amx_linear.pack(weight)
    assert packed is not None
    check_rows_independent_of_their_batch(lambda x: amx_linear.linear(x, packed), 576)


@needs_amx
def test_an_lm_head_wider_than_a_chunk_of_columns_is_whole() -> None:
    weight, x = block_weight(49152 // 8 + 16, 576, symmetric=True), torch.randn(5, 576)  # 385 column blocks
    packed = amx_linear.pack(weight)
    assert packed is not None and packed.scales is not None
    torch.testing.assert_close(amx_linear.linear(x, packed), F.linear(x, weight), rtol=1e-4, atol=1e-4)


@needs_amx
def test_leading_dimensions_are_kept() -> None:
    weight = block_weight(576, 576)
    packed = amx_linear.pack(weight)
    x = torch.randn(3, 5, 576)
    result = amx_linear.linear(x, packed)
    assert result.shape == (3, 5, 576)
    assert torch.equal(result, amx_linear.linear(x.reshape(15, 576), packed).view(3, 5, 576))


@needs_amx
@pytest.mark.parametrize("kind", WEIGHTS)
def test_infinities_and_nans_reach_only_their_own_row(kind: str) -> None:
    weight = WEIGHTS[kind](576, 576)
    packed = amx_linear.pack(weight)
    x = torch.randn(3, 576)
    x[0, 7], x[1, 9] = float("inf"), float("nan")
    result = amx_linear.linear(x, packed)
    # Every output of those rows is not finite, as fp32's are (a block's scaled sum and its offset
    # term may meet as inf - inf, so an infinity may come out as NaN).
    assert not result[0].isfinite().any() and result[1].isnan().all()
    torch.testing.assert_close(result[2], F.linear(x, weight)[2], rtol=1e-5, atol=1e-5)


@needs_amx
def test_weights_it_does_not_take_are_refused() -> None:
    assert amx_linear.pack(torch.randn(1536, 576)) is None  # not block-scaled, needs a third bf16 piece
    assert amx_linear.pack(block_weight(1530, 576)) is None  # not whole 16-column tiles
    assert amx_linear.pack(block_weight(1536, 570 + 6)[:, :570]) is None  # not whole 32-wide k tiles
    assert amx_linear.pack(block_weight(1536, 576).double()) is None
    nearly = block_weight(1536, 576)
    nearly[100, 200] = torch.nextafter(nearly[100, 200], torch.tensor(1.0))  # one value off its block's grid
    packed = amx_linear.pack(nearly, max_pieces=3)
    assert packed is not None and packed.scales is None  # so the whole weight goes to the pieces


@needs_amx
def test_an_input_that_does_not_fit_the_weight_is_refused_by_shape() -> None:
    packed = amx_linear.pack(two_piece_weight(576, 576))
    with pytest.raises(ValueError, match=r"x \(4, 512\) torch.float32 on cpu does not fit a 576x576 fp32 weight"):
        amx_linear.linear(torch.randn(4, 512), packed)


@needs_amx
@pytest.mark.usefixtures("one_torch_thread")
def test_the_engine_multiplies_on_amx_on_one_thread_only(monkeypatch: pytest.MonkeyPatch) -> None:
    weight, x = block_weight(1536, 576), torch.randn(16, 576)
    packed = amx_linear.pack(weight)
    expected = amx_linear.linear(x, packed)
    monkeypatch.setenv(CPU_KERNELS_ENV, "native")
    check_the_kernel_serves_one_torch_thread_only(amx_linear, x, weight, expected, monkeypatch)
    monkeypatch.setenv(CPU_KERNELS_ENV, "no-amx")
    assert not torch.equal(cpu_kernels.linear(x, weight), expected)


@needs_amx
@pytest.mark.usefixtures("one_torch_thread")
def test_a_weight_changed_in_place_is_packed_again_for_amx(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_KERNELS_ENV, "native")
    check_packed_again_after_an_in_place_change(lambda x, weight: amx_linear.linear(x, amx_linear.pack(weight)))


@needs_amx
def test_a_forked_process_multiplies_on_the_tile_state_it_inherits() -> None:
    # Runners fork each job from one interpreter (docs/runner.md): Linux's grant of the AMX tile state
    # must carry over, or the child's first tile instruction would kill it.
    weight, x = block_weight(576, 576), torch.randn(4, 576)
    packed = amx_linear.pack(weight)
    expected = amx_linear.linear(x, packed)
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's result is its exit status)
        os._exit(0 if torch.equal(amx_linear.linear(x, packed), expected) else 3)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@needs_amx
def test_a_value_near_the_largest_fp32_is_split_without_overflowing() -> None:
    # Two-piece weights only: block-scaled ones add q * x before scaling by d, which overflows for
    # |x| beyond about 8e34 (FLT_MAX / (127 * 32)), far above any model's activations (docs/engine.md).
    weight = two_piece_weight(576, 576)
    x = torch.randn(2, 576) * 1e-3
    x[0, 3] = 3.4e38  # above the largest bf16 (3.39e38): rounded to the nearest bf16 it would be infinite
    result = amx_linear.linear(x, amx_linear.pack(weight))
    exact = x.double() @ weight.double().T
    assert result.isfinite().all()
    torch.testing.assert_close(result.double(), exact, rtol=1e-5, atol=1e-5)


def _bits(values: torch.Tensor) -> torch.Tensor:
    return values.view(torch.int32).long() & 0xFFFFFFFF


def _from_bits(halves: torch.Tensor) -> torch.Tensor:
    full = halves << 16
    return torch.where(full >= 2**31, full - 2**32, full).int().view(torch.float32)


def _nearest_bf16(bits: torch.Tensor) -> torch.Tensor:
    """The kernel's rule: round to nearest, ties to even; infinities, NaNs and finite values that
    would round up to an infinity keep their top half."""
    top = bits >> 16
    rounded = ((bits + 0x7FFF + (top & 1)) & 0xFFFFFFFF) >> 16
    keep = ((bits & 0x7F800000) == 0x7F800000) | ((rounded & 0x7F80) == 0x7F80)
    return torch.where(keep, top, rounded)


def _reference_pieces(x: torch.Tensor) -> list[torch.Tensor]:
    h1 = _nearest_bf16(_bits(x))
    r1 = x - _from_bits(h1)
    h2 = torch.where(r1 == r1, _nearest_bf16(_bits(r1)), 0)
    r2 = r1 - _from_bits(h2)
    h3 = torch.where(r2 == r2, _nearest_bf16(_bits(r2)), 0)
    return [h1, h2, h3]


@needs_amx
def test_x_is_split_into_its_nearest_bf16_pieces_bit_for_bit() -> None:
    # 16 values at a time, then one at a time for the last 7: both paths against the rule.
    g = torch.Generator().manual_seed(5)
    wide = torch.randn(4000, generator=g) * torch.exp2(torch.randint(-140, 128, (4000,), generator=g).float())
    # Exactly halfway between two bf16 values: ties go to the even one.
    halfway = (_from_bits(torch.randint(0, 2**16, (512,), generator=g)).view(torch.int32) | 0x8000).view(torch.float32)
    specials = torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0, 0.0, 3.4e38, -3.4e38, 3.3895e38,
                             1e-40, -1e-42, 1.1754942e-38, 65504.0, 1.0 + 2**-23, -(1.0 + 2**-9)])
    x = torch.cat([wide, halfway, specials, torch.randn(16 * 4 + 7 - 14, generator=g)]).contiguous()
    pieces = [torch.zeros(len(x), dtype=torch.int16) for _ in range(3)]
    amx_linear.library().parallax_amx_split(x.data_ptr(), len(x), *(p.data_ptr() for p in pieces))
    for got, expected in zip(pieces, _reference_pieces(x)):
        assert torch.equal(got.long() & 0xFFFF, expected)


@needs_amx
def test_each_block_of_32_is_summed_in_order_and_padding_rows_are_zero() -> None:
    # Values of very different sizes, so that adding them in any other order gives other bits.
    g = torch.Generator().manual_seed(6)
    m, k, m_padded = 13, 576, 16  # 18 blocks a row: 16 at a time, then 2
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-24, 24, (m, k), generator=g).float())
    sums = torch.full((k // 32 * m_padded,), float("nan"))
    amx_linear.library().parallax_amx_block_sums(x.data_ptr(), m, k, m_padded, sums.data_ptr())
    expected = torch.zeros(k // 32, m_padded)
    blocks = x.view(m, k // 32, 32)
    for kk in range(32):
        expected[:, :m] = expected[:, :m] + blocks[:, :, kk].T
    assert torch.equal(sums.view(k // 32, m_padded), expected)
    backwards = torch.zeros(k // 32, m)
    for kk in reversed(range(32)):
        backwards = backwards + blocks[:, :, kk].T
    assert not torch.equal(backwards, expected[:, :m])  # so these values tell the orders apart


@needs_amx
def test_threads_multiplying_at_once_keep_their_own_working_buffers() -> None:
    # Each thread keeps its x pieces and block sums between calls (amx_linear.working_buffers); the C call
    # releases the GIL, so buffers shared between threads would mix their rows.
    weight = block_weight(960, 576)
    packed = amx_linear.pack(weight)
    inputs = [torch.randn(13, 576, generator=torch.Generator().manual_seed(seed)) for seed in range(2)]
    expected = [amx_linear.linear(x, packed) for x in inputs]
    wrong: list[int] = []

    def multiply(index: int) -> None:
        for _ in range(300):
            if not torch.equal(amx_linear.linear(inputs[index], packed), expected[index]):
                wrong.append(index)

    threads = [threading.Thread(target=multiply, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
