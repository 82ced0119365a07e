"""Grammar-constrained decoding (outlines-core): the output matches the constraint and is the same in
the normal loop, the overlap loop and in-process disaggregation; a grammar batch is not overlapped
with the batch before it, and its result copy goes through a copy stream even under HIP's policy
(upstream's delayed-sampling path has no HIP branch)."""
from __future__ import annotations

import re

import pytest

from scheduler_core.device import CpuDevice, RecordingDevice
from scheduler_core.engine import Engine
from scheduler_core.grammar import GrammarError
from scheduler_core.overlap import OverlapLoop
from scheduler_core.platform import Platform, resolve_policy
from scheduler_core.sampling import SamplingParams

PATTERN = r"[0-9]{1,4}(\+[0-9]{1,3}){0,3}=[0-9]{1,5}"
PROMPTS = [[5 + i, 17, 99, 3 * i + 1, 42, 17, 99] * 3 for i in range(6)]
PARAMS = SamplingParams(max_new_tokens=40)


def constrained(model, **kwargs) -> tuple[Engine, list[str]]:
    engine = Engine(model, kv_tokens=2048, **kwargs)
    grammars = [engine.grammar_backend.regex(PATTERN) for _ in PROMPTS]
    return engine, [o.text for o in engine.generate(PROMPTS, PARAMS, grammars=grammars)]


@pytest.fixture(scope="module")
def reference(tiny_model) -> list[str]:
    return constrained(tiny_model, overlap=False)[1]


def test_constrained_output_matches_the_regular_expression(reference) -> None:
    assert all(re.fullmatch(PATTERN, text) for text in reference), reference


def test_the_unconstrained_model_does_not_match_it_by_itself(tiny_model) -> None:
    outs = Engine(tiny_model, kv_tokens=2048, overlap=False).generate(PROMPTS, PARAMS)
    assert not any(re.fullmatch(PATTERN, o.text) for o in outs)


@pytest.mark.parametrize("loop", [dict(overlap=True), dict(overlap=True, disaggregation="inproc"),
                                  dict(overlap=False, disaggregation="inproc")],
                         ids=["overlap", "inproc-overlap", "inproc-normal"])
def test_constrained_output_is_the_same_in_every_loop(tiny_model, reference, loop) -> None:
    engine, texts = constrained(tiny_model, **loop)
    assert texts == reference
    engine.scheduler.pools.check_idle_invariant()


def test_a_grammar_batch_waits_for_the_batch_before_it(tiny_model, monkeypatch) -> None:
    engine = Engine(tiny_model, kv_tokens=2048, overlap=True)
    seen: list[bool] = []
    original = OverlapLoop.is_disable_overlap_for_batch

    def spy(self, batch):
        seen.append(original(self, batch))
        return seen[-1]

    monkeypatch.setattr(OverlapLoop, "is_disable_overlap_for_batch", spy)
    engine.generate(PROMPTS[:2], PARAMS, grammars=[engine.grammar_backend.regex(PATTERN), None])
    assert any(seen)
    seen.clear()
    engine.generate(PROMPTS[:2], PARAMS)
    assert seen and not any(seen)


def test_hip_policy_copies_grammar_results_on_a_copy_stream_and_plain_ones_on_the_forward_stream(tiny_model) -> None:
    def copies(grammar: bool) -> set[str | None]:
        rec = RecordingDevice(CpuDevice())
        engine = Engine(tiny_model, kv_tokens=2048, overlap=True, streams=rec,
                        sync_policy=resolve_policy(Platform("rocm"), {}))
        grammars = [engine.grammar_backend.regex(PATTERN)] if grammar else None
        engine.generate(PROMPTS[:1], SamplingParams(max_new_tokens=6, ignore_eos=True), grammars=grammars)
        return {c.stream for c in rec.calls_of("to_host")}

    assert copies(grammar=False) == {"forward"}
    assert "copy" in copies(grammar=True)


def test_json_schema_constraint_gives_json_of_that_shape(tiny_model) -> None:
    import json
    engine = Engine(tiny_model, kv_tokens=2048, overlap=True)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "code": {"type": "string", "maxLength": 3}},
              "required": ["ok", "code"], "additionalProperties": False}
    outs = engine.generate(PROMPTS[:3], SamplingParams(max_new_tokens=60),
                           grammars=[engine.grammar_backend.json_schema(schema) for _ in range(3)])
    for o in outs:
        value = json.loads(o.text)
        assert isinstance(value["ok"], bool) and len(value["code"]) <= 3 and o.finish_reason.kind == "stop_token", o.text


def test_a_bad_regular_expression_is_refused_naming_it(tiny_model) -> None:
    engine = Engine(tiny_model, kv_tokens=256)
    with pytest.raises(GrammarError, match=r"cannot compile the regular expression '\[0-9'"):
        engine.grammar_backend.regex("[0-9")


def test_a_grammar_list_of_the_wrong_length_is_refused(tiny_model) -> None:
    engine = Engine(tiny_model, kv_tokens=256)
    with pytest.raises(ValueError, match="6 prompts but 1 grammars"):
        engine.generate(PROMPTS, PARAMS, grammars=[None])
