"""SmolLM2-135M on GSM8k questions: the normal loop, the overlap loop, speculative decoding (self-draft
and n-gram) and in-process disaggregation give the same greedy tokens; with a grammar, the
constrained answers are the same in every loop and match the constraint.

Loops that run the same batches match exactly. A speculative verify step computes a position's logits
in a several-token forward where the plain loop ran a one-token one, and fp32 CPU matmuls are not
batch-invariant (docs/engine.md), so there the near-tie rule applies: a divergence is accepted only at
a step whose top-2 logit margin is below NEAR_TIE_EPS, and the test reports how many it saw.
Slow: loads the real model (tests/scheduler_core/test_smollm2.py explains the single thread)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

from scheduler_core.engine import Engine, GenerateOutput
from scheduler_core.jobs.gsm8k import DataNotFound, load_jsonl, resolve_data
from scheduler_core.model.loader import LoadedModel, load_model
from scheduler_core.sampling import SamplingParams
from scheduler_core.spec import SpecConfig
from tests.scheduler_core.conftest import GSM8K_DIR, same_or_near_tie

pytestmark = pytest.mark.slow

PARAMS = SamplingParams(max_new_tokens=24, ignore_eos=True)
ANSWER = r" [0-9]{1,5}\n"


@pytest.fixture(scope="module")
def smollm2() -> LoadedModel:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_model("smollm2-135m")
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def prompts() -> list[str]:
    # ../shared next to the checkout; PARALLAX_SHARED_DIR points elsewhere (a worktree one level deeper).
    shared = os.environ.get("PARALLAX_SHARED_DIR")
    local = Path(shared) / "data" / "gsm8k" if shared else GSM8K_DIR
    try:
        data = local if (local / "test.jsonl").is_file() else resolve_data(None)
    except DataNotFound as exc:
        pytest.skip(str(exc))
    return [f"Question: {q['question']}\nAnswer:" for q in load_jsonl(data / "test.jsonl")[:6]]


def engine(model: LoadedModel, **kwargs) -> Engine:
    return Engine(model, max_running_requests=8, kv_tokens=4096, chunked_prefill_size=None, **kwargs)


@pytest.fixture(scope="module")
def reference(smollm2, prompts) -> list[GenerateOutput]:
    return engine(smollm2, overlap=False).generate(prompts, PARAMS)


@pytest.mark.parametrize("loop", [dict(overlap=True), dict(overlap=True, disaggregation="inproc")],
                         ids=["overlap", "inproc"])
def test_same_batches_give_the_same_tokens_exactly(smollm2, prompts, reference, loop) -> None:
    outs = engine(smollm2, **loop).generate(prompts, PARAMS)
    assert [o.output_ids for o in outs] == [r.output_ids for r in reference]


@pytest.mark.parametrize("spec", [SpecConfig("self-draft", num_draft_tokens=2, draft_layers=10),
                                  SpecConfig("ngram", num_draft_tokens=4)], ids=["self-draft", "ngram"])
@pytest.mark.parametrize("overlap", [False, True], ids=["normal", "overlap"])
def test_speculative_decoding_gives_the_target_tokens(smollm2, prompts, reference, spec, overlap) -> None:
    eng = engine(smollm2, overlap=overlap, speculative=spec)
    outs = eng.generate(prompts, PARAMS)
    verdicts = [same_or_near_tie(r, o) for r, o in zip(reference, outs)]
    print(f"\n{spec.algorithm}: {verdicts.count('near_tie')} near-tie divergences of {len(verdicts)}, "
          f"accept length {eng.scheduler.spec_stats.accept_length:.2f}")
    assert verdicts.count("same") >= len(verdicts) - 1
    assert eng.scheduler.spec_stats.steps > 0


def test_a_grammar_constrains_the_answer_alike_in_every_loop(smollm2, prompts) -> None:
    texts = []
    for loop in (dict(overlap=False), dict(overlap=True), dict(overlap=True, disaggregation="inproc")):
        eng = engine(smollm2, **loop)
        grammars = [eng.grammar_backend.regex(ANSWER) for _ in prompts]
        outs = eng.generate(prompts, SamplingParams(max_new_tokens=12), grammars=grammars)
        texts.append([o.text for o in outs])
    assert texts[0] == texts[1] == texts[2]
    assert all(re.fullmatch(ANSWER.strip("\n") + r"\n?", t) for t in texts[0]), texts[0]
