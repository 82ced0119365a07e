"""The sync policy as the three overlap loops apply it, read from a RecordingDevice.

Under the CUDA policy every loop (plain overlap, disaggregated prefill, disaggregated decode) issues
the WAR barrier ``schedule.wait_stream(forward)``, copies results on the copy stream and keeps the
forward-prepare D2H stream with pinned buffers; under HIP none of them does; each environment
override flips exactly one of these behaviours.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduler_core.batch import Req
from scheduler_core.device import CpuDevice, RecordingDevice
from scheduler_core.disagg import run_inproc
from scheduler_core.engine import Engine
from scheduler_core.platform import OVERRIDE_ENV, ActivePolicy, Platform, resolve_policy
from scheduler_core.sampling import SamplingParams
from scheduler_core.scheduler import Scheduler, SchedulerConfig

PROMPTS = [[5 + i, 17, 99, 3 * i + 1, 42] for i in range(6)]
PARAMS = SamplingParams(max_new_tokens=4, ignore_eos=True)


@dataclass(frozen=True)
class Behaviour:
    """What a loop did, as seen through the device calls."""

    war_barrier: bool  # schedule.wait_stream(forward), or schedule.wait_event(shared-read-done)
    read_gated: bool  # the barrier waits on the forward's shared-read-done event, not the whole stream
    copy_stream: bool  # results copied to the host on a "copy" stream
    fwd_prepare_d2h: bool  # a forward-prepare D2H stream with pinned buffers
    forward_waits_schedule: bool  # forward.wait_stream(schedule) before each launch
    results_copied: int  # device->host copies of sampled tokens and margins


def role(stream: str | None) -> str | None:
    """A stream's role: the disaggregated loops name theirs "prefill.schedule", "decode.forward", ..."""
    return None if stream is None else stream.rpartition(".")[2]


def behaviour(rec: RecordingDevice) -> Behaviour:
    waits = {(role(c.stream), role(c.other)) for c in rec.calls_of("wait_stream")}
    read_done = {c.event for c in rec.calls_of("reads_done") if role(c.stream) == "forward"}
    gated = any(role(c.stream) == "schedule" and c.event in read_done for c in rec.calls_of("wait_event"))
    streams = {role(c.stream) for c in rec.calls_of("new_stream")}
    result_copies = [c for c in rec.calls_of("to_host") if role(c.stream) in ("copy", "forward")]
    on_copy = [c for c in result_copies if role(c.stream) == "copy"]
    assert not on_copy or len(on_copy) == len(result_copies), "results copied on two different streams"
    return Behaviour(
        war_barrier=("schedule", "forward") in waits or gated,
        read_gated=gated,
        copy_stream="copy" in streams and bool(on_copy),
        fwd_prepare_d2h="fwd_prepare_d2h" in streams and bool(rec.calls_of("empty_pinned")),
        forward_waits_schedule=("forward", "schedule") in waits,
        results_copied=len(result_copies),
    )


def run_overlap(model, policy: ActivePolicy) -> RecordingDevice:
    rec = RecordingDevice(CpuDevice())
    engine = Engine(model=model, max_running_requests=4, kv_tokens=512, chunked_prefill_size=None,
                    overlap=True, sync_policy=policy, streams=rec)
    engine.generate(PROMPTS, PARAMS)
    return rec


def run_disagg(model, policy: ActivePolicy) -> tuple[RecordingDevice, RecordingDevice]:
    """Prefill and decode schedulers, each with its own recorder, through the in-process transfer."""
    config = SchedulerConfig(max_running_requests=4, kv_tokens=512, chunked_prefill_size=None)
    recs = RecordingDevice(CpuDevice()), RecordingDevice(CpuDevice())
    prefill, decode = (Scheduler(model, config, CpuDevice().torch_device, streams=r, sync_policy=policy)
                       for r in recs)
    for i, ids in enumerate(PROMPTS):
        prefill.add_request(Req(rid=i, input_ids=ids, sampling=PARAMS))
    done = []
    run_inproc(prefill, decode, overlap=True, on_finish=done.append)
    assert sorted(len(r.output_ids) for r in done) == [PARAMS.max_new_tokens] * len(PROMPTS)
    prefill.pools.check_idle_invariant()
    decode.pools.check_idle_invariant()
    return recs


def loops(model, policy: ActivePolicy) -> dict[str, Behaviour]:
    prefill, decode = run_disagg(model, policy)
    return {"overlap": behaviour(run_overlap(model, policy)), "disagg_prefill": behaviour(prefill),
            "disagg_decode": behaviour(decode)}


CUDA = resolve_policy(Platform("cuda"), {})
HIP = resolve_policy(Platform("rocm"), {})


def test_cuda_policy_uses_barrier_copy_stream_and_d2h_stream_in_all_three_loops(tiny_model) -> None:
    for name, seen in loops(tiny_model, CUDA).items():
        assert seen.war_barrier and seen.copy_stream and seen.fwd_prepare_d2h, name
        assert seen.forward_waits_schedule and seen.results_copied > 0, name


def test_hip_policy_uses_none_of_them_in_any_loop(tiny_model) -> None:
    for name, seen in loops(tiny_model, HIP).items():
        assert not (seen.war_barrier or seen.copy_stream or seen.fwd_prepare_d2h), name
        assert seen.forward_waits_schedule and seen.results_copied > 0, name


def test_cuda_barrier_is_read_gated_and_forced_coarse_by_the_override(tiny_model) -> None:
    assert behaviour(run_overlap(tiny_model, CUDA)).read_gated
    coarse = behaviour(run_overlap(tiny_model, resolve_policy(Platform("cuda"), {"PARALLAX_WAR_BARRIER_READ_GATED": "0"})))
    assert coarse.war_barrier and not coarse.read_gated


def test_read_done_event_is_recorded_on_the_forward_stream_before_the_layers_run(tiny_model) -> None:
    rec = run_overlap(tiny_model, CUDA)
    ops = [(c.op, c.stream) for c in rec.calls]
    first = ops.index(("reads_done", "forward"))
    assert ("record_event", "forward") == ops[first - 1]
    # the schedule stream's wait on it comes after the batch's forward work was queued
    assert ("wait_event", "schedule") in ops[first:]


def test_barrier_comes_after_the_launch_it_guards(tiny_model) -> None:
    """The coarse barrier waits on the forward stream after the batch's forward-stream work was queued."""
    rec = run_overlap(tiny_model, resolve_policy(Platform("cuda"), {"PARALLAX_WAR_BARRIER_READ_GATED": "0"}))
    ops = [(c.op, c.stream, c.other) for c in rec.calls]
    barrier = ops.index(("wait_stream", "schedule", "forward"))
    assert ("enter_stream", "forward", None) in ops[:barrier]
    assert ("wait_stream", "forward", "schedule") in ops[:barrier]


@pytest.mark.parametrize("variable", ["PARALLAX_WAR_BARRIER", "PARALLAX_COPY_STREAM", "PARALLAX_FWD_PREPARE_D2H"])
@pytest.mark.parametrize("platform", ["cuda", "rocm"])
def test_each_override_flips_exactly_one_behaviour(tiny_model, variable: str, platform: str) -> None:
    base = resolve_policy(Platform(platform), {})
    flipped_value = "0" if getattr(base, OVERRIDE_ENV[variable]) else "1"
    changed = resolve_policy(Platform(platform), {variable: flipped_value})
    before, after = behaviour(run_overlap(tiny_model, base)), behaviour(run_overlap(tiny_model, changed))
    fields = ("war_barrier", "copy_stream", "fwd_prepare_d2h")
    differing = [f for f in fields if getattr(before, f) != getattr(after, f)]
    assert differing == [OVERRIDE_ENV[variable]]
    assert after.forward_waits_schedule and after.results_copied == before.results_copied


def test_override_applies_in_the_disaggregated_loops_too(tiny_model) -> None:
    barrier_on_hip = resolve_policy(Platform("rocm"), {"PARALLAX_WAR_BARRIER": "1"})
    for name, seen in loops(tiny_model, barrier_on_hip).items():
        assert seen.war_barrier and not seen.copy_stream and not seen.fwd_prepare_d2h, name


def test_engine_context_records_policy_and_overrides(tiny_model) -> None:
    policy = resolve_policy(Platform("rocm"), {"PARALLAX_COPY_STREAM": "1"})
    engine = Engine(model=tiny_model, kv_tokens=256, overlap=True, sync_policy=policy,
                    streams=CpuDevice(Platform("rocm")))
    settings = engine.settings()
    assert settings["overlap"] is True and settings["disaggregation"] is None
    assert settings["platform"] == "rocm"
    assert settings["sync_policy"] == {"war_barrier": False, "copy_stream": True, "fwd_prepare_d2h": False,
                                       "war_barrier_read_gated": False, "hip_publish_sync": True}
    assert [o["variable"] for o in settings["sync_policy_overrides"]] == ["PARALLAX_COPY_STREAM"]
