"""Randomised workloads on the tiny model under memory pressure: every request finishes with a sane
reason, greedy results match a roomy engine (or a near tie), and the idle invariant holds after each."""
from __future__ import annotations

import random

from scheduler_core.batch import Req
from scheduler_core.sampling import SamplingParams
from tests.scheduler_core.conftest import same_or_near_tie, tiny_engine


def _workload(seed: int) -> tuple[list[str], list[SamplingParams]]:
    rng = random.Random(seed)
    stems = ["alpha beta gamma ", "The same opening line for many. ", ""]
    prompts, params = [], []
    for _ in range(14):
        body = "".join(rng.choice("abcdefgh ,.xyz0123") for _ in range(rng.randint(1, 120)))
        prompts.append(rng.choice(stems) + body)
        params.append(SamplingParams(max_new_tokens=rng.randint(1, 30), ignore_eos=True))
    return prompts, params


def test_random_workloads_under_pressure() -> None:
    retracted = 0
    for seed in range(3):
        prompts, params = _workload(seed)
        ref = tiny_engine(kv_tokens=8192).generate(prompts, params)
        rng = random.Random(100 + seed)
        engine = tiny_engine(kv_tokens=rng.choice([190, 240, 320]), max_running_requests=rng.choice([2, 5, 8]),
                             chunked_prefill_size=rng.choice([None, 7, 32]), schedule_policy=rng.choice(["fcfs", "lpm"]))
        for _ in range(2):  # the second round meets a warm prefix cache
            outs = engine.generate(prompts, params)
            for r, o, p in zip(ref, outs, params):
                assert o.error is None, o.error
                assert o.finish_reason.kind == "length" and len(o.output_ids) == p.max_new_tokens
                same_or_near_tie(r, o)
            engine.scheduler.pools.check_idle_invariant()
        retracted += engine.scheduler.retracted_total
    assert retracted > 0, "the workloads should have forced at least one retraction"


def test_abort_while_running_frees_everything() -> None:
    engine = tiny_engine(max_running_requests=4)
    sched = engine.scheduler
    reqs = [Req(rid=i, input_ids=engine.tokenizer.encode(f"request {i}"),
                sampling=SamplingParams(max_new_tokens=50, ignore_eos=True)) for i in range(4)]
    for r in reqs:
        sched.add_request(r)
    for _ in range(5):  # prefill + a few decode steps
        batch = sched.get_next_batch_to_run()
        sched.process_batch_result(batch, sched.run_batch(batch))
    reqs[1].to_abort = "client went away"
    sched.event_loop_normal()
    assert reqs[1].finish_reason.kind == "abort" and len(reqs[1].output_ids) < 50
    assert all(len(r.output_ids) == 50 for i, r in enumerate(reqs) if i != 1)
    sched.pools.check_idle_invariant()
