"""The overshoot tick, freeing exactly once, the future-token relay, and when the overlap loop syncs.

In the overlap loop a request that finishes at batch N is already in batch N+1 (scheduled before
N's result was read). Its token from N+1 must be dropped and its memory freed once.
"""
from __future__ import annotations

import collections
from types import SimpleNamespace

import pytest
import torch

import scheduler_core.scheduler as scheduler_module
from scheduler_core.batch import Req, ScheduleBatch
from scheduler_core.device import CpuDevice
from scheduler_core.engine import Engine
from scheduler_core.overlap import FutureMap, OverlapLoop, OverlapPipeline
from scheduler_core.records import BatchResult
from scheduler_core.sampling import SamplingParams
from tests.overlap.conftest import mixed_workload, tight_engine

PROMPT = [7, 8, 9, 10, 11]


def _engine(model, overlap: bool) -> Engine:
    return Engine(model=model, max_running_requests=4, kv_tokens=256, chunked_prefill_size=None, overlap=overlap)


@pytest.mark.parametrize("max_new", [1, 3])
def test_overshoot_tick_runs_one_more_step_but_emits_no_extra_token(tiny_model, max_new: int) -> None:
    params = SamplingParams(max_new_tokens=max_new, ignore_eos=True)
    normal, overlap = _engine(tiny_model, False), _engine(tiny_model, True)
    ref = normal.generate([PROMPT], params)[0]
    seen = []
    out = overlap.generate([PROMPT], params, on_finish=seen.append)[0]
    assert out.output_ids == ref.output_ids and len(out.output_ids) == max_new
    assert len(seen) == 1 and out.finish_reason.kind == "length"
    # The overshoot step: the finished request rode in one more decode batch.
    assert len(overlap.scheduler.steps) == len(normal.scheduler.steps) + 1
    assert overlap.scheduler.steps[-1].mode == "decode" and overlap.scheduler.steps[-1].batch_size == 1
    overlap.scheduler.pools.check_idle_invariant()
    pools = overlap.scheduler.pools
    assert pools.allocator.available() + pools.tree.evictable_size == pools.allocator.size


def test_result_for_an_already_finished_request_is_ignored(tiny_model) -> None:
    """process_batch_result: a token for a request that finished earlier is not appended and its
    memory is not released a second time."""
    engine = _engine(tiny_model, False)
    sched = engine.scheduler
    req = Req(rid=0, input_ids=list(PROMPT), sampling=SamplingParams(max_new_tokens=1, ignore_eos=True))
    sched.add_request(req)
    batch = sched.get_next_batch_to_run()
    sched.process_batch_result(batch, sched.run_batch(batch))
    assert req.finished and req.req_pool_idx is None
    available, finished = sched.pools.allocator.available(), list(sched._finished)
    sched.process_batch_result(ScheduleBatch([req]), BatchResult([123], [1.0], 0.0))
    assert req.output_ids != [] and 123 not in req.output_ids
    assert sched.pools.allocator.available() == available
    assert sched._finished == finished
    sched._drain(None)
    sched.pools.check_idle_invariant()


def test_every_request_is_released_once_under_overshoot_and_retraction(tiny_model, monkeypatch) -> None:
    released: collections.Counter[int] = collections.Counter()
    real_release = scheduler_module.release

    def counting(req, pools, cache):
        if req.req_pool_idx is not None and cache:
            released[req.rid] += 1
        return real_release(req, pools, cache)

    monkeypatch.setattr(scheduler_module, "release", counting)
    work = mixed_workload(n=40, seed=1)
    engine = tight_engine(tiny_model, overlap=True, kv_tokens=250)
    outs = engine.generate(work.prompts, work.params)
    assert engine.scheduler.retracted_total > 0
    overshoots = sum(1 for o, p in zip(outs, work.params) if len(o.output_ids) == p.max_new_tokens)
    assert overshoots > 0
    assert set(released.values()) == {1} and len(released) == len(outs)
    assert all(len(o.output_ids) <= p.max_new_tokens for o, p in zip(outs, work.params))
    engine.scheduler.pools.check_idle_invariant()  # includes "no KV slot freed twice"


def test_future_map_resolves_placeholders_on_the_device() -> None:
    futures = FutureMap(CpuDevice(), rows=4)
    slots = [futures.slot_of(row) for row in (0, 1, 2)]
    assert slots == [1, 2, 3]
    futures.stash(torch.tensor(slots), torch.tensor([40, 0, 41]))
    resolved = futures.resolve(torch.tensor([-1, 5, -2, 0, -3]))
    assert resolved.tolist() == [40, 5, 0, 0, 41]


def test_future_map_keeps_a_placeholder_until_its_newest_launch_is_read() -> None:
    futures = FutureMap(CpuDevice(), rows=4)
    req = SimpleNamespace(retractions=0)
    futures.publish([req], [3], launch=7)
    futures.publish([req], [3], launch=8)  # the next batch stashed a newer token for the same row
    futures.retire([req], launch=7)
    assert futures.placeholder(req) == -3
    futures.retire([req], launch=8)
    assert futures.placeholder(req) is None


def test_a_token_stashed_before_a_retraction_is_never_used() -> None:
    futures = FutureMap(CpuDevice(), rows=4)
    req = SimpleNamespace(retractions=0)
    futures.publish([req], [2], launch=1)
    req.retractions += 1  # retracted while launch 1 is in flight: it restarts from its host tokens
    assert futures.placeholder(req) is None


def test_decode_input_ids_come_from_the_relay(tiny_model, monkeypatch) -> None:
    """A request whose previous token is still in flight enters the next batch as -slot, never as a
    real token read on the host."""
    placeholders: list[list[int]] = []
    real_prepare = ScheduleBatch.prepare_for_decode

    def spy(self, pools, device, cascade_min=0):
        placeholders.append([r.output_ids[-1] for r in self.reqs])
        return real_prepare(self, pools, device, cascade_min)

    monkeypatch.setattr(ScheduleBatch, "prepare_for_decode", spy)
    out = _engine(tiny_model, True).generate([PROMPT], SamplingParams(max_new_tokens=4, ignore_eos=True))[0]
    assert placeholders and all(ids[0] < 0 for ids in placeholders)
    assert len(out.output_ids) == 4


def test_retraction_with_a_batch_in_flight_skips_its_stale_results(tiny_model, monkeypatch) -> None:
    """As upstream: scheduling retracts while the previous batch runs; that batch's tokens for the
    retracted requests are dropped, and the outputs equal the normal loop's."""
    loops: list[OverlapLoop] = []
    real_init, real_retract = OverlapLoop.__init__, ScheduleBatch.retract_decode
    in_flight = []

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        loops.append(self)

    def retract(self, pools):
        in_flight.append(loops[-1].pending is not None)
        return real_retract(self, pools)

    monkeypatch.setattr(OverlapLoop, "__init__", init)
    monkeypatch.setattr(ScheduleBatch, "retract_decode", retract)
    work = mixed_workload(n=40, seed=1)
    overlap = tight_engine(tiny_model, overlap=True, kv_tokens=250)
    outs = overlap.generate(work.prompts, work.params)
    assert any(in_flight) and overlap.scheduler.retracted_total > 0
    normal = tight_engine(tiny_model, overlap=False, kv_tokens=250).generate(work.prompts, work.params)
    assert [o.output_ids for o in outs] == [o.output_ids for o in normal]
    overlap.scheduler.pools.check_idle_invariant()


@pytest.mark.parametrize("overlap_prefills", [True, False])
def test_consecutive_prefills_overlap_only_when_allowed(tiny_model, monkeypatch, overlap_prefills: bool) -> None:
    events: list[str] = []
    real_launch, real_finish = OverlapPipeline.launch, OverlapPipeline.finish

    def launch(self, batch, merge_prefilled=True):
        events.append(f"launch {batch.mode}")
        return real_launch(self, batch, merge_prefilled)

    def finish(self, inflight):
        events.append(f"finish {inflight.batch.mode}")
        return real_finish(self, inflight)

    monkeypatch.setattr(OverlapPipeline, "launch", launch)
    monkeypatch.setattr(OverlapPipeline, "finish", finish)
    engine = Engine(model=tiny_model, max_running_requests=8, kv_tokens=1024, chunked_prefill_size=16,
                    enable_mixed_chunk=False, overlap=True)
    engine.scheduler.overlap_consecutive_prefill = overlap_prefills
    engine.generate([list(range(1, 60)), list(range(2, 40))], SamplingParams(max_new_tokens=3, ignore_eos=True))
    back_to_back = any(a == b == "launch extend" for a, b in zip(events, events[1:]))
    assert back_to_back is overlap_prefills
