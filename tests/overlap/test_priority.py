"""Priority scheduling with preemption (``schedule_policy="priority"``): a more important request that
arrives while the running batch is full preempts the least important running one, finishes before it,
and every request still gets the greedy tokens it gets alone; in the overlap loop the preempted
request's in-flight result is dropped as stale (upstream's retract-while-in-flight), and the pools end
leak-free."""
from __future__ import annotations

import pytest

from scheduler_core.batch import Req
from scheduler_core.engine import Engine
from scheduler_core.overlap import OverlapLoop
from scheduler_core.policy import order_waiting
from scheduler_core.sampling import SamplingParams
from scheduler_core.scheduler import Scheduler, SchedulerConfig

PARAMS = SamplingParams(max_new_tokens=12, ignore_eos=True)
LOW = [[11, 12, 13, 14], [21, 22, 23, 24]]
HIGH = [31, 32, 33, 34, 35]


def alone(model) -> dict[int, list[int]]:
    outs = Engine(model, overlap=False, kv_tokens=512).generate(LOW + [HIGH], PARAMS)
    return {i: o.output_ids for i, o in enumerate(outs)}


def run(model, overlap: bool, policy: str = "priority") -> tuple[Scheduler, list[Req]]:
    """Two low-priority requests fill the batch; a high-priority one arrives after three steps."""
    sched = Scheduler(model, SchedulerConfig(max_running_requests=2, kv_tokens=512, schedule_policy=policy),
                      model.model.embed_tokens.weight.device)
    done: list[Req] = []
    for i, ids in enumerate(LOW):
        sched.add_request(Req(rid=i, input_ids=ids, sampling=PARAMS, priority=0))
    loop = OverlapLoop(sched, done.append) if overlap else None

    def step() -> None:
        if loop is not None:
            loop.step()
            return
        batch = sched.get_next_batch_to_run()
        if batch is not None:
            sched.process_batch_result(batch, sched.run_batch(batch))
        sched._drain(done.append)

    for _ in range(3):
        step()
    sched.add_request(Req(rid=2, input_ids=HIGH, sampling=PARAMS, priority=5))
    while (loop.busy() if loop is not None else sched.has_work()):
        step()
    return sched, done


@pytest.mark.parametrize("overlap", [False, True], ids=["normal", "overlap"])
def test_a_more_important_request_preempts_and_finishes_first_with_unchanged_tokens(tiny_model, overlap) -> None:
    sched, done = run(tiny_model, overlap)
    assert sched.preempted_total >= 1
    order = [r.rid for r in done]
    assert order.index(2) < max(order.index(0), order.index(1))
    expected = alone(tiny_model)
    assert {r.rid: r.output_ids for r in done} == expected
    assert any(r.retractions > 0 for r in done if r.rid != 2)
    sched.pools.check_idle_invariant()


def test_fcfs_never_preempts(tiny_model) -> None:
    sched, done = run(tiny_model, overlap=True, policy="fcfs")
    assert sched.preempted_total == 0
    assert [r.rid for r in done][-1] == 2


def test_equal_priorities_do_not_preempt(tiny_model) -> None:
    config = SchedulerConfig(max_running_requests=1, kv_tokens=512, schedule_policy="priority")
    sched = Scheduler(tiny_model, config, tiny_model.model.embed_tokens.weight.device)
    sched.add_request(Req(rid=0, input_ids=LOW[0], sampling=PARAMS))
    sched.process_batch_result(batch := sched.get_next_batch_to_run(), sched.run_batch(batch))
    sched.add_request(Req(rid=1, input_ids=LOW[1], sampling=PARAMS))
    sched.get_next_batch_to_run()
    assert sched.preempted_total == 0 and [r.rid for r in sched.running.reqs] == [0]


def test_the_waiting_queue_is_ordered_by_priority_then_arrival(tiny_model) -> None:
    sched = Scheduler(tiny_model, SchedulerConfig(kv_tokens=64), tiny_model.model.embed_tokens.weight.device)
    reqs = [Req(rid=i, input_ids=[1, 2], sampling=PARAMS, priority=p) for i, p in enumerate([0, 3, 1, 3])]
    assert [r.rid for r in order_waiting(reqs, "priority", sched.pools)] == [1, 3, 2, 0]


def test_priorities_of_the_wrong_length_are_refused(tiny_model) -> None:
    with pytest.raises(ValueError, match="2 prompts but 1 priorities"):
        Engine(tiny_model, kv_tokens=256, schedule_policy="priority").generate(LOW, PARAMS, priorities=[1])
