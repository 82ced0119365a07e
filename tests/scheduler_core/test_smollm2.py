"""SmolLM2-135M (fp32) against Hugging Face transformers loading the same GGUF file, and batch
invariance of the real model under the near-tie rule. Slow: loading both models takes about a minute."""
from __future__ import annotations

import functools

import gguf
import pytest
import torch
from filelock import FileLock

from scheduler_core.engine import Engine
from scheduler_core.model.llama import ForwardBatch, KVCache
from scheduler_core.model.loader import smollm2_gguf_path
from scheduler_core.sampling import SamplingParams
from tests.scheduler_core.conftest import NEAR_TIE_EPS, same_or_near_tie

pytestmark = pytest.mark.slow

PROMPTS = [
    "Question: Natalia sold clips to 48 of her friends in April. How many clips did she sell?\nAnswer:",
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, there was a little",
    "<|im_start|>user\nWhat is the boiling point of water?<|im_end|>\n<|im_start|>assistant\n",
    "1, 2, 3, 4,",
    "Translate to French: good morning",
    "The three primary colours are",
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # The test machine's 2 cores are shared; 2 OpenMP threads under contention run ~8x slower than 1.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(model="smollm2-135m", max_running_requests=8, kv_tokens=4096, chunked_prefill_size=None)


@pytest.fixture(scope="module")
def hf(tmp_path_factory: pytest.TempPathFactory):
    """transformers' own reading of the GGUF file: model and tokenizer. Its conversion costs about
    13 s of CPU and worksteal spreads this module over several workers, so the first worker of a
    run keeps the converted weights, config and tokenizer in the run's shared temporary directory
    (keyed by the file and the transformers version) and the others load those (about 2 s)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    path = smollm2_gguf_path()
    stat = path.stat()
    key = f"{path.name}-{stat.st_size}-{stat.st_mtime_ns}-transformers-{transformers.__version__}"
    # Under xdist the base temp is per worker and its parent is this run's; alone, the parent is
    # the user's, where the key above keeps a stale conversion from being used.
    cache = tmp_path_factory.getbasetemp().parent / "smollm2-transformers" / key
    cache.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache) + ".lock"):
        if not (cache / "complete").exists():
            with pytest.MonkeyPatch.context() as patch:
                # transformers parses the file's metadata (49k tokens and merges) anew for the
                # config, the weights and the tokenizer, and rebuilds gguf's tensor-name table once
                # per tensor: both pure in their arguments, so each is made once (31 -> 12 CPU-s,
                # the same weights and tokenizer; docs/testing.md).
                patch.setattr(gguf, "GGUFReader", functools.cache(gguf.GGUFReader))
                patch.setattr(gguf, "get_tensor_name_map", functools.cache(gguf.get_tensor_name_map))
                model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                                          dtype=torch.float32).eval()
                tokenizer = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            cache.mkdir(exist_ok=True)
            torch.save(model.state_dict(), cache / "weights.pt")
            model.config.to_json_file(cache / "config.json")
            tokenizer.save_pretrained(cache)
            (cache / "complete").touch()
            return model, tokenizer
    config = transformers.AutoConfig.from_pretrained(cache)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(torch.load(cache / "weights.pt", mmap=True, weights_only=True))
    return model.eval(), transformers.AutoTokenizer.from_pretrained(cache)


def test_tokenizer_matches_transformers(engine: Engine, hf) -> None:
    _, tokenizer = hf
    for prompt in PROMPTS + ["  spaces\tand 12345 digits, ünïcödé 😀"]:
        assert engine.tokenizer.encode(prompt) == tokenizer(prompt, add_special_tokens=False).input_ids


def test_logits_match_transformers(engine: Engine, hf) -> None:
    model, _ = hf
    loaded = engine.loaded
    worst = 0.0
    for prompt in PROMPTS[:4]:
        ids = loaded.tokenizer.encode(prompt)
        n = len(ids)
        kv = KVCache(loaded.config, n, torch.float32, torch.device("cpu"))
        slots = torch.arange(1, n + 1)
        batch = ForwardBatch.build(ids, [0], [n], [slots], slots, torch.device("cpu"), all_logits=True)
        ours = loaded.model(batch, kv)
        with torch.no_grad():
            ref = model(torch.tensor([ids])).logits[0].float()
        worst = max(worst, (ours - ref).abs().max().item())
    print(f"max abs logit difference vs transformers: {worst:.2e}")
    assert worst < 1e-3


def test_greedy_generations_match_transformers(engine: Engine, hf) -> None:
    model, _ = hf
    outs = engine.generate(PROMPTS, SamplingParams(max_new_tokens=20))
    for prompt, out in zip(PROMPTS, outs):
        ids = torch.tensor([out.prompt_ids])
        with torch.no_grad():
            ref = model.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=engine.tokenizer.eos_token_id,
                                 pad_token_id=engine.tokenizer.eos_token_id)
        assert out.output_ids == ref[0, ids.shape[1]:].tolist(), prompt


def test_batch_invariance_real_model(engine: Engine) -> None:
    params = SamplingParams(max_new_tokens=12, ignore_eos=True)
    ref = [engine.generate([p], params)[0] for p in PROMPTS]
    kinds: list[str] = []
    engine.flush_cache()
    kinds += [same_or_near_tie(a, b) for a, b in zip(ref, engine.generate(PROMPTS, params))]  # one batch
    outs = engine.generate(PROMPTS, params)  # every prompt is now a prefix-cache hit
    assert all(o.cached_tokens > 0 for o in outs)
    kinds += [same_or_near_tie(a, b) for a, b in zip(ref, outs)]
    engine.scheduler.pools.check_idle_invariant()
    chunked = Engine(model=engine.loaded, max_running_requests=8, kv_tokens=4096, chunked_prefill_size=8,
                     enable_radix_cache=False)
    kinds += [same_or_near_tie(a, b) for a, b in zip(ref, chunked.generate(PROMPTS, params))]
    chunked.scheduler.pools.check_idle_invariant()
    mixed = Engine(model=engine.loaded, max_running_requests=3, kv_tokens=4096, chunked_prefill_size=16)
    kinds += [same_or_near_tie(a, b) for a, b in zip(ref, mixed.generate(PROMPTS, params))]
    assert any(s.mixed for s in mixed.scheduler.steps)
    mixed.scheduler.pools.check_idle_invariant()
    # The normal loop without mixed batches: its admission is known to overrun this pool and retract.
    tight = Engine(model=engine.loaded, max_running_requests=8, kv_tokens=120, chunked_prefill_size=None,
                   enable_mixed_chunk=False, overlap=False)
    outs = tight.generate(PROMPTS, params)
    assert tight.scheduler.retracted_total > 0
    kinds += [same_or_near_tie(a, b) for a, b in zip(ref, outs)]
    tight.scheduler.pools.check_idle_invariant()
    print(f"near-tie divergences accepted (eps {NEAR_TIE_EPS}): {kinds.count('near_tie')} of {len(kinds)}")
