"""Speculative decoding (n-gram and self-draft) gives the target model's greedy tokens, token for token,
in the normal loop, the overlap loop and in-process disaggregation, on the 100-request workload with
chunked prefill, radix hits and retraction; the pools end leak-free; and the new sequence lengths come
back to the host the way the policy says (forward-prepare D2H stream, HIP publish_ready sync, or a
blocking copy on the forward stream)."""
from __future__ import annotations

import pytest

from scheduler_core.device import CpuDevice, RecordingDevice
from scheduler_core.engine import Engine, GenerateOutput
from scheduler_core.platform import Platform, resolve_policy
from scheduler_core.sampling import SamplingParams
from scheduler_core.spec import NgramDraft, SpecConfig
from tests.overlap.conftest import mixed_workload, tight_engine

WORKLOAD = mixed_workload()
NGRAM = SpecConfig("ngram", num_draft_tokens=4)
SELF_DRAFT = SpecConfig("self-draft", num_draft_tokens=3, draft_layers=1)


@pytest.fixture(scope="module")
def reference(tiny_model) -> list[GenerateOutput]:
    return tight_engine(tiny_model, overlap=False).generate(WORKLOAD.prompts, WORKLOAD.params)


def same_tokens(ref: list[GenerateOutput], got: list[GenerateOutput]) -> None:
    diff = [o.index for o, r in zip(got, ref) if o.output_ids != r.output_ids]
    assert not diff, f"{len(diff)} requests differ, first {diff[:5]}"
    assert [o.finish_reason.kind for o in got] == [o.finish_reason.kind for o in ref]


@pytest.mark.parametrize("spec", [NGRAM, SELF_DRAFT], ids=["ngram", "self-draft"])
@pytest.mark.parametrize("overlap", [False, True], ids=["normal", "overlap"])
def test_speculative_decoding_matches_the_target_token_for_token(tiny_model, reference, spec, overlap) -> None:
    engine = tight_engine(tiny_model, overlap=overlap, speculative=spec)
    same_tokens(reference, engine.generate(WORKLOAD.prompts, WORKLOAD.params))
    stats = engine.scheduler.spec_stats
    assert stats.steps > 0 and stats.drafted > 0  # drafts were proposed and some accepted
    assert engine.scheduler.retracted_total > 0
    engine.scheduler.pools.check_idle_invariant()


def test_speculative_decoding_on_the_decode_side_of_inproc_disaggregation(tiny_model, reference) -> None:
    engine = tight_engine(tiny_model, overlap=True, disaggregation="inproc", speculative=NGRAM)
    same_tokens(reference, engine.generate(WORKLOAD.prompts, WORKLOAD.params))
    assert engine.decode_scheduler.spec_stats.drafted > 0
    engine.scheduler.pools.check_idle_invariant()
    engine.decode_scheduler.pools.check_idle_invariant()


def test_a_repeating_context_is_drafted_and_accepted_several_tokens_a_step(tiny_model) -> None:
    prompt = [7, 8, 9, 10, 11] * 6
    engine = Engine(tiny_model, overlap=True, kv_tokens=1024, speculative=SpecConfig("ngram", num_draft_tokens=4))
    plain = Engine(tiny_model, overlap=False, kv_tokens=1024)
    params = SamplingParams(max_new_tokens=30, ignore_eos=True)
    assert engine.generate([prompt], params)[0].output_ids == plain.generate([prompt], params)[0].output_ids
    assert engine.scheduler.spec_stats.accept_length > 1.0


def test_ngram_draft_continues_the_latest_earlier_occurrence_of_the_longest_suffix() -> None:
    draft = NgramDraft(SpecConfig("ngram", num_draft_tokens=3, ngram_max=2))
    assert draft.lookup([1, 2, 3, 9, 2, 3, 4, 5, 2, 3], room=10) == [4, 5, 2]
    assert draft.lookup([1, 2, 3, 4], room=10) == []
    assert draft.lookup([5, 6, 5, 6, 5], room=1) == [6]  # never past max_new_tokens


@pytest.mark.parametrize("bad, message", [(SpecConfig("medusa"), "algorithm 'medusa'"),
                                          (SpecConfig(num_draft_tokens=0), "num_draft_tokens"),
                                          (SpecConfig("self-draft", draft_layers=2), "draft_layers must be in 1..1")])
def test_a_bad_speculative_setting_is_refused_by_name(tiny_model, bad, message) -> None:
    with pytest.raises(ValueError, match=message):
        Engine(tiny_model, kv_tokens=256, speculative=bad)


def run_spec(tiny_model, platform: str, environ: dict[str, str] | None = None,
             spec: SpecConfig = NGRAM) -> RecordingDevice:
    rec = RecordingDevice(CpuDevice())
    engine = Engine(tiny_model, overlap=True, kv_tokens=1024, speculative=spec, streams=rec,
                    sync_policy=resolve_policy(Platform(platform), environ or {}))
    engine.generate([[3, 4, 5, 3, 4, 5, 3, 4]] * 2, SamplingParams(max_new_tokens=8, ignore_eos=True))
    return rec


def test_cuda_resolves_the_new_sequence_lengths_on_the_prepare_stream_after_publish_ready(tiny_model) -> None:
    rec = run_spec(tiny_model, "cuda")
    waits = [c for c in rec.calls_of("wait_event") if c.stream == "fwd_prepare_d2h"]
    copies = [c for c in rec.calls_of("to_host") if c.stream == "fwd_prepare_d2h"]
    assert waits and copies
    recorded = {c.event for c in rec.calls_of("record_event") if c.stream == "forward"}
    assert {c.event for c in waits} <= recorded


@pytest.mark.parametrize("spec, overlapped", [(SELF_DRAFT, True), (NGRAM, False)], ids=["self-draft", "ngram"])
def test_a_self_draft_verify_step_is_prepared_while_the_previous_one_is_in_flight(tiny_model, spec, overlapped) -> None:
    """The schedule stream waits on the in-flight step's publish_ready (the event the prepare stream
    waits on before copying the lengths) only when it resolves that step's draft state for the next
    step; the n-gram draft needs the host's tokens, so its steps never overlap."""
    rec = run_spec(tiny_model, "cuda", spec=spec)
    publish = {c.event for c in rec.calls_of("wait_event") if c.stream == "fwd_prepare_d2h"}
    resolved = [c for c in rec.calls_of("wait_event") if c.stream == "schedule" and c.event in publish]
    assert publish and bool(resolved) == overlapped


def test_hip_synchronises_the_host_on_publish_ready_before_copying_the_lengths(tiny_model) -> None:
    rec = run_spec(tiny_model, "rocm")
    assert not [c for c in rec.calls if c.stream == "fwd_prepare_d2h"]
    ops = [(c.op, c.stream) for c in rec.calls]
    i = next(i for i, c in enumerate(rec.calls) if c.op == "to_host" and c.stream == "schedule")
    assert ("event_synchronize", None) in ops[i - 3:i]


@pytest.mark.parametrize("platform, environ", [("cpu", {}), ("rocm", {"PARALLAX_HIP_PUBLISH_SYNC": "0"})])
def test_without_either_path_the_lengths_are_copied_on_the_forward_stream(tiny_model, platform, environ) -> None:
    rec = run_spec(tiny_model, platform, environ)
    assert [c for c in rec.calls_of("to_host") if c.stream == "forward"]
    assert not [c for c in rec.calls_of("to_host") if c.stream == "schedule"]


def test_the_engine_settings_record_speculative_decoding_only_when_it_is_on(tiny_model) -> None:
    assert Engine(tiny_model, kv_tokens=256, speculative=NGRAM).settings()["speculative"]["algorithm"] == "ngram"
    assert "speculative" not in Engine(tiny_model, kv_tokens=256).settings()
