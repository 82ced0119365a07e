"""Engine behaviour on the seeded tiny random model: finish reasons, sampling, bad input, invariants."""
from __future__ import annotations

import pytest

from scheduler_core.batch import Req
from scheduler_core.engine import Engine
from scheduler_core.sampling import SamplingParams
from tests.scheduler_core.conftest import tiny_engine

PROMPTS = ["hello world", "abc", "The quick brown fox jumps", "0123456789" * 3]


def test_generate_returns_tokens_text_reason_and_timings(tiny: Engine) -> None:
    outs = tiny.generate(PROMPTS, SamplingParams(max_new_tokens=7, ignore_eos=True))
    assert [o.index for o in outs] == list(range(len(PROMPTS)))
    for o in outs:
        assert len(o.output_ids) == 7
        assert o.finish_reason.kind == "length" and o.error is None
        assert o.text == tiny.tokenizer.decode(o.output_ids)
        assert o.ttft_s is not None and o.ttft_s > 0 and len(o.itl_s) == 6
        assert all(t >= 0 for t in o.itl_s)


def test_token_id_prompts_and_per_request_params(tiny: Engine) -> None:
    ids = tiny.tokenizer.encode("hello")
    outs = tiny.generate([ids, "hello"], [SamplingParams(max_new_tokens=3), SamplingParams(max_new_tokens=5)])
    assert len(outs[0].output_ids) <= 3 and len(outs[1].output_ids) <= 5
    assert outs[0].output_ids == outs[1].output_ids[: len(outs[0].output_ids)]


def test_finish_priority_stop_string_before_eos_and_length(tiny: Engine) -> None:
    free = tiny.generate(["hello world"], SamplingParams(max_new_tokens=12, ignore_eos=True))[0]
    stop = free.text[3:5]
    assert stop, "need some text to stop on"
    first = free.text.find(stop)
    out = tiny.generate(["hello world"], SamplingParams(max_new_tokens=12, stop=[stop], ignore_eos=True))[0]
    assert out.finish_reason.kind == "stop_str" and out.finish_reason.matched == stop
    assert out.text == free.text[:first]
    # A stop token that is also the last token of the max_new_tokens budget: stop token wins over length.
    tok = free.output_ids[4]
    out = tiny.generate(["hello world"], SamplingParams(max_new_tokens=5, stop_token_ids=[tok], ignore_eos=True))[0]
    assert out.finish_reason.kind == "stop_token" and out.finish_reason.matched == tok
    assert out.output_ids[-1] == tok


def test_eos_finishes_unless_ignored(tiny: Engine) -> None:
    free = tiny.generate(["hello world"], SamplingParams(max_new_tokens=8, ignore_eos=True))[0]
    tiny.tokenizer.eos_token_id = free.output_ids[2]  # make the model's 3rd token the EOS
    out = tiny.generate(["hello world"], SamplingParams(max_new_tokens=8))[0]
    assert out.finish_reason.kind == "stop_token" and out.output_ids == free.output_ids[:3]
    out = tiny.generate(["hello world"], SamplingParams(max_new_tokens=8, ignore_eos=True))[0]
    assert out.finish_reason.kind == "length" and out.output_ids == free.output_ids


def test_abort_has_top_priority(tiny: Engine) -> None:
    from scheduler_core.batch import Req

    req = Req(rid=10_000, input_ids=tiny.tokenizer.encode("abc"), sampling=SamplingParams(max_new_tokens=3))
    req.to_abort = "cancelled by the user"
    done = []
    tiny.scheduler.add_request(req)
    tiny.scheduler.event_loop_normal(done.append)
    assert done == [req] and req.finish_reason.kind == "abort"
    assert req.finish_reason.message == "cancelled by the user"
    tiny.scheduler.pools.check_idle_invariant()


def test_seeded_sampling_is_reproducible_and_batch_independent(tiny: Engine) -> None:
    p = SamplingParams(max_new_tokens=10, temperature=0.8, top_k=50, top_p=0.9, seed=1234, ignore_eos=True)
    alone = tiny.generate(["hello world"], p)[0].output_ids
    batched = tiny.generate(["abc", "hello world", "xyz"], p)[1].output_ids
    assert alone == batched
    other = tiny.generate(["hello world"], SamplingParams(max_new_tokens=10, temperature=0.8, seed=99,
                                                          ignore_eos=True))[0].output_ids
    assert other != alone


def test_top_k_one_is_greedy(tiny: Engine) -> None:
    greedy = tiny.generate(["hello"], SamplingParams(max_new_tokens=6, ignore_eos=True))[0].output_ids
    topk1 = tiny.generate(["hello"], SamplingParams(max_new_tokens=6, temperature=1.0, top_k=1,
                                                    ignore_eos=True))[0].output_ids
    assert greedy == topk1


@pytest.mark.parametrize("prompt, params, needle", [
    ("", SamplingParams(max_new_tokens=4), "empty prompt"),
    ("x" * 4100, SamplingParams(max_new_tokens=4), "longer than the model context"),
    ("hello", SamplingParams(max_new_tokens=0), "max_new_tokens"),
    ("hello", SamplingParams(max_new_tokens=-3), "max_new_tokens"),
    ("hello", SamplingParams(max_new_tokens=4, top_p=0.0), "top_p"),
])
def test_bad_request_is_refused_and_others_still_served(tiny: Engine, prompt, params, needle) -> None:
    outs = tiny.generate(["good one", prompt, "another good"],
                         [SamplingParams(max_new_tokens=4), params, SamplingParams(max_new_tokens=4)])
    assert outs[1].error is not None and needle in outs[1].error
    assert outs[1].finish_reason.kind == "abort" and outs[1].output_ids == []
    assert outs[0].error is None and outs[0].output_ids and outs[2].error is None and outs[2].output_ids


def test_unknown_model_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown model 'no-such-model'"):
        Engine(model="no-such-model")


def test_bad_engine_settings() -> None:
    with pytest.raises(ValueError, match="schedule_policy"):
        tiny_engine(schedule_policy="random")


def test_context_limit_finishes_with_length() -> None:
    engine = tiny_engine()
    prompt = "y" * 4092  # context is 4096
    out = engine.generate([prompt], SamplingParams(max_new_tokens=50, ignore_eos=True))[0]
    assert out.finish_reason.kind == "length" and len(out.prompt_ids) + len(out.output_ids) == 4096


def test_a_lone_request_that_fits_the_pool_waits_while_other_slots_are_held() -> None:
    """A disaggregated decode side lost a request's tail under load: after retraction left one
    running request, the slots a chunked re-prefill held made it look as if it could not fit."""
    engine = tiny_engine(kv_tokens=64)
    sched = engine.scheduler
    req = Req(rid=1, input_ids=list(range(1, 41)), sampling=SamplingParams(max_new_tokens=20, ignore_eos=True))
    sched.add_request(req)
    batch = sched.get_next_batch_to_run()
    sched.process_batch_result(batch, sched.run_batch(batch))
    assert sched.running.reqs == [req] and req.seq_len == 41
    held = sched.pools.alloc_tokens(sched.pools.allocator.available())  # what a chunked re-prefill holds
    sched._update_running_batch()
    assert not sched._finished and sched.waiting == [req] and req.retractions == 1
    sched.pools.allocator.free(held)
    again = sched.get_next_batch_to_run()  # the slots are back: it is admitted again, output kept
    assert again is not None and again.reqs == [req] and len(req.output_ids) == 1


def test_lone_request_larger_than_the_pool_is_aborted_cleanly() -> None:
    engine = tiny_engine(kv_tokens=40)
    outs = engine.generate(["a" * 30, "b"], SamplingParams(max_new_tokens=30, ignore_eos=True))
    assert outs[0].finish_reason.kind == "abort" and "KV pool exhausted" in outs[0].error
    assert outs[1].error is None and len(outs[1].output_ids) == 30
