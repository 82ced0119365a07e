"""The plain-CPU forward's prepacked oneDNN projections: the same results as the aten ops, a fresh
pack when a weight changes, plain aten ops wherever a dispatch mode (the simulator) watches, and
oneDNN where the CPU cannot run the AMX or AVX-512 kernels (with the reason logged)."""
from __future__ import annotations

import logging
import pickle
from collections import Counter
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from scheduler_core import amx_linear, block_linear, native_build
from scheduler_core import cpu_kernels as cpu_kernels_module
from scheduler_core.cpu_kernels import CPU_KERNELS_ENV, PREPACK_MIN_ELEMENTS, applies, cpu_kernels, linear
from scheduler_core.engine import Engine
from scheduler_core.model.config import ModelConfig
from scheduler_core.model.llama import ForwardBatch, KVCache, LlamaModel
from scheduler_core.model.loader import LoadedModel, load_model
from scheduler_core.model.tokenizer import TextTokenizer
from scheduler_core.sampling import SamplingParams
from tests.support.op_names import OpNames
from tests.support.weights import block_weight

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch without oneDNN")


def _logits(loaded: LoadedModel) -> torch.Tensor:
    """A prefill of two prompts (4 and 3 tokens) on a fresh KV cache: their last-token logits."""
    kv = KVCache(loaded.config, 16, torch.float32, torch.device("cpu"))
    slots = [torch.arange(1, 5), torch.arange(5, 8)]
    batch = ForwardBatch.build([3, 7, 11, 13, 17, 19, 23], [0, 0], [4, 3], slots, torch.cat(slots),
                               torch.device("cpu"))
    return loaded.model(batch, kv)



def test_the_prepacked_forward_gives_the_aten_forwards_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_KERNELS_ENV, "aten")
    aten = _logits(load_model("tiny-random"))
    monkeypatch.setenv(CPU_KERNELS_ENV, "native")
    packed = load_model("tiny-random")
    assert packed.model.layers[0].mlp.gate_up_proj.prepacked and packed.model.prepacked_head
    torch.testing.assert_close(_logits(packed), aten, rtol=1e-5, atol=1e-5)


def test_a_weight_changed_in_place_is_packed_again() -> None:
    x, weight = torch.randn(8, 512), torch.randn(1024, 512)  # over PREPACK_MIN_ELEMENTS: prepacked
    before = linear(x, weight)
    with torch.no_grad():
        weight.mul_(-3.0)
    after = linear(x, weight)
    assert not torch.allclose(after, before)
    # Outputs here are sums of 512 terms of about +-3, so about 70 in size, and oneDNN and MKL add
    # them in different orders: 1,000 draws on 5 December differed by up to 3.7e-4, and 12 of them
    # failed the earlier atol=1e-4 (a CI-like run did too). A stale packed copy would be off by the
    # whole change (after = -3x before).
    torch.testing.assert_close(after, F.linear(x, weight), rtol=1e-4, atol=1e-3)


def test_only_weights_worth_it_are_prepacked() -> None:
    x = torch.randn(8, 512)
    large, small = torch.randn(PREPACK_MIN_ELEMENTS // 512, 512), torch.randn(PREPACK_MIN_ELEMENTS // 512 - 1, 512)
    assert applies(x, large) and not applies(x, small)
    # fp32 rounding again (see above): 2,000 draws on 5 December differed by up to 1.4e-4, past the
    # atol=1e-4 this had, and passed only through rtol.
    torch.testing.assert_close(linear(x, large), F.linear(x, large), rtol=1e-4, atol=1e-3)
    assert torch.equal(linear(x, small), F.linear(x, small))  # F.linear itself, bit for bit


def test_under_a_dispatch_mode_the_forward_runs_only_aten_ops() -> None:
    loaded = load_model("tiny-random")
    _logits(loaded)  # packed already: the mode must still see the plain matmuls
    with OpNames() as mode:
        _logits(loaded)
    assert "aten.linear.default" in mode.names
    assert not [name for name in mode.names if "mkldnn" in name]


def test_a_model_that_ran_prepacked_still_pickles_and_packs_again_after() -> None:
    loaded = load_model("tiny-random")
    expected = _logits(loaded)
    copy = pickle.loads(pickle.dumps(loaded))
    torch.testing.assert_close(_logits(copy), expected, rtol=0, atol=0)


def test_an_unknown_kernel_choice_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_KERNELS_ENV, "mkl")
    with pytest.raises(ValueError, match="PARALLAX_CPU_KERNELS='mkl': expected one of native, no-amx, no-blocks, onednn, aten"):
        cpu_kernels()


@pytest.mark.parametrize(("kernel", "flags", "reason"), [
    (amx_linear, "fpu sse2 avx2 avx512f", "this CPU has no AMX bf16 tiles"),
    (block_linear, "fpu sse2 avx", "this CPU has neither AVX-512 nor AVX2 with FMA"),
    (block_linear, "fpu sse2 avx2", "this CPU has neither AVX-512 nor AVX2 with FMA"),
], ids=["amx", "blocks-avx", "blocks-avx2-without-fma"])
@pytest.mark.usefixtures("one_torch_thread")  # where `linear` asks the kernels (as under xdist)
def test_a_kernel_the_cpu_cannot_run_says_why_and_projections_stay_on_onednn(
        kernel: ModuleType, flags: str, reason: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(native_build, "cpu_flags_line", lambda: f"flags\t\t: {flags}")
    # Both kernels' loads are cached per process and `linear` below asks each: whichever it loads
    # under these flags must not stay cached for later tests (a test worker kept AMX off so).
    kernels = (amx_linear, block_linear)
    for each in kernels:
        each.library.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger=kernel.__name__):
            assert kernel.library() is None
            assert kernel.pack(block_weight(1536, 576)) is None
        assert reason in caplog.text
        weight, x = block_weight(1536, 576), torch.randn(8, 576)
        torch.testing.assert_close(linear(x, weight), F.linear(x, weight), rtol=1e-4, atol=1e-3)
    finally:
        for each in kernels:
            each.library.cache_clear()


def _wide_random_model() -> LoadedModel:
    """A seeded random model whose every projection is wide enough to be prepacked (tiny-random's
    are not): 2 layers of width 512."""
    tokenizer = TextTokenizer.byte_level()
    config = ModelConfig(name="wide-random", vocab_size=tokenizer.vocab_size, hidden_size=512,
                         intermediate_size=1024, num_layers=2, num_heads=8, num_kv_heads=4, rope_theta=10000.0,
                         rms_norm_eps=1e-5, max_context=256, tie_word_embeddings=False,
                         eos_token_id=tokenizer.eos_token_id)
    model, generator = LlamaModel(config), torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.endswith("norm.weight"):
                param.copy_(torch.randn(param.shape, generator=generator) / 512 ** 0.5)
    return LoadedModel(model=model, config=config, tokenizer=tokenizer, source="wide-random")


@pytest.fixture
def packs(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many weights each kernel packs from here on."""
    counts: Counter[str] = Counter()
    for kernel, packer in list(cpu_kernels_module.PACKERS.items()):
        def counted(weight: torch.Tensor, kernel: str = kernel, packer=packer):  # noqa: ANN001, ANN202
            counts[kernel] += 1
            return packer(weight)
        monkeypatch.setitem(cpu_kernels_module.PACKERS, kernel, counted)
    return counts


@pytest.mark.parametrize("threads", [1, 2])
def test_an_engine_packs_its_projections_when_it_loads_not_during_its_first_requests(
        threads: int, packs: Counter[str]) -> None:
    loaded = _wide_random_model()
    before = torch.get_num_threads()
    try:
        engine = Engine(model=loaded, max_running_requests=4, kv_tokens=256, num_threads=threads)
        assert packs["onednn"] == 4 * loaded.config.num_layers  # qkv, o, gate_up and down in each layer
        at_load = packs.copy()
        outputs = engine.generate(["a prompt", "another, longer prompt"], SamplingParams(max_new_tokens=4))
    finally:
        torch.set_num_threads(before)
    assert [len(out.output_ids) for out in outputs] == [4, 4]
    assert packs == at_load


@pytest.mark.usefixtures("one_torch_thread")
def test_a_weight_packed_ahead_gives_what_packing_on_first_use_gives(packs: Counter[str]) -> None:
    weight = block_weight(1536, 576)
    decode, prefill = torch.randn(8, 576), torch.randn(64, 576)
    on_first_use = [linear(decode, weight.clone()), linear(prefill, weight.clone())]
    cpu_kernels_module.pack_ahead(weight)
    packed_ahead = packs.copy()
    assert torch.equal(linear(decode, weight), on_first_use[0])
    assert torch.equal(linear(prefill, weight), on_first_use[1])
    assert packs == packed_ahead


@pytest.mark.skipif(not block_linear.cpu_runs_kernel(), reason="this CPU has neither AVX-512 nor AVX2 with FMA")
@pytest.mark.usefixtures("one_torch_thread")
def test_an_lm_head_packed_ahead_gets_its_onednn_copy_only_when_a_call_needs_it(
        packs: Counter[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(amx_linear, "pack", lambda weight: None)  # as on a CPU without AMX
    head = block_weight(1536, 576)
    cpu_kernels_module.pack_ahead(head, prefill_rows=False)
    assert (packs["blocks"], packs["onednn"]) == (1, 0)
    linear(torch.randn(16, 576), head)  # one row per request of a decode batch: the block kernel
    assert packs["onednn"] == 0
    linear(torch.randn(64, 576), head)
    assert packs["onednn"] == 1
