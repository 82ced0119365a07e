"""Each deliberate sync bug is reported by the race detector as a hazard on the right buffer, and the
same run without the bug has no such hazard. The bugs are introduced by patching the one call (or by
the policy), exactly as a regression would introduce them."""
from __future__ import annotations

from typing import Callable

import pytest

from scheduler_core.overlap import OverlapPipeline
from scheduler_core.platform import DEFAULT_POLICIES, SyncPolicy
from scheduler_core.sim.device import SimDevice
from scheduler_core.sim.measure import run_reference
from scheduler_core.sim.race import Hazard

from .conftest import SMALL

CUDA = DEFAULT_POLICIES["cuda"]
HIP = DEFAULT_POLICIES["rocm"]


def hazards(tiny, monkeypatch, policy: SyncPolicy, bug: Callable[[OverlapPipeline], None] | None,
            profile: str = "cuda-h100") -> list[Hazard]:
    if bug is not None:
        original = OverlapPipeline.__init__

        def patched(self, *args, **kwargs):
            original(self, *args, **kwargs)
            bug(self)

        monkeypatch.setattr(OverlapPipeline, "__init__", patched)
    return run_reference(tiny, profile, policy, workload=SMALL).hazards


def found(hs: list[Hazard], kind: str, buffer: str) -> list[Hazard]:
    return [h for h in hs if h.kind == kind and h.buffer == buffer]


def no_copy_wait(pipe: OverlapPipeline) -> None:
    """Delete ``copy.wait_stream(fwd)``."""
    pipe.copy.wait_stream = lambda other: None


def copy_done_before_copy(pipe: OverlapPipeline) -> None:
    """Record ``copy_done`` before the copy is queued on the copy stream."""
    device, copy = pipe.device, pipe.copy
    early: list = []
    real_record, real_to_host = copy.record_event, device.to_host

    def to_host(src, out=None):
        if device.current_stream() is copy and not early:
            early.append(real_record())
        return real_to_host(src, out)

    def record_event():
        return early.pop() if early else real_record()

    device.to_host = to_host
    copy.record_event = record_event


def no_prepare_wait(pipe: OverlapPipeline) -> None:
    """Delete ``prepare_d2h.wait_event(ready)``."""
    pipe.prepare_d2h.wait_event = lambda event: None


def one_slot_record_buffer(pipe: OverlapPipeline) -> None:
    """Shorten the record buffer that keeps launched batches alive to one slot."""
    pipe.record_buf = [None]


def read_done_before_the_last_read(pipe: OverlapPipeline) -> None:
    """Record the shared-read-done event before the forward gathers from the request tables."""
    device, forward = pipe.device, pipe.forward
    real_record, real_declare = forward.record_event, device.declare_reads_done
    early: list = []

    def record_event():
        return early.pop() if early else real_record()

    real_resolve = pipe.futures.resolve

    def resolve(input_ids):  # the step before the gather: record (and claim) the event here
        out = real_resolve(input_ids)
        if pipe.policy.war_barrier_read_gated:
            event = real_record()
            real_declare(event, pipe._shared_buffers())
            early.append(event)
        return out

    pipe.futures.resolve = resolve
    forward.record_event = record_event
    device.declare_reads_done = lambda event, tensors: None  # the claim was made with the early event


def test_deleting_the_copy_streams_wait_is_a_read_after_write_on_the_sampled_tokens(tiny, monkeypatch) -> None:
    assert found(hazards(tiny, monkeypatch, CUDA, no_copy_wait), "read-after-write", "next_token_ids")
    monkeypatch.undo()
    assert hazards(tiny, monkeypatch, CUDA, None) == []


def test_recording_copy_done_before_the_copy_is_a_host_read_of_an_unfinished_copy(tiny, monkeypatch) -> None:
    hs = found(hazards(tiny, monkeypatch, CUDA, copy_done_before_copy), "read-after-write", "next_token_ids_host")
    assert hs and {(h.first_stream, h.second_stream) for h in hs} == {("copy", "host")}
    monkeypatch.undo()
    assert hazards(tiny, monkeypatch, CUDA, None) == []


def test_deleting_the_prepare_d2h_wait_is_a_read_after_write_on_the_sequence_lengths(tiny, monkeypatch) -> None:
    hs = found(hazards(tiny, monkeypatch, CUDA, no_prepare_wait), "read-after-write", "seq_lens (forward prepare)")
    assert hs and {(h.first_stream, h.second_stream) for h in hs} == {("forward", "fwd_prepare_d2h")}
    monkeypatch.undo()
    assert hazards(tiny, monkeypatch, CUDA, None) == []


@pytest.mark.parametrize("profile, policy", [("rocm-mi300x", HIP), ("cuda-h100", CUDA)])
def test_a_one_slot_record_buffer_frees_batch_tensors_the_forward_still_reads(tiny, monkeypatch, profile, policy) -> None:
    # HIP: no barrier orders the schedule stream after the forward; CUDA: the read-gated barrier
    # orders it only after the table reads, not after the layers' reads of the batch's tensors.
    hs = [h for h in hazards(tiny, monkeypatch, policy, one_slot_record_buffer, profile) if h.kind == "use-after-free"]
    assert hs and all(h.buffer.startswith("forward_batch.") and h.first_stream == "forward" for h in hs)
    monkeypatch.undo()
    assert not [h for h in hazards(tiny, monkeypatch, policy, None, profile) if h.kind == "use-after-free"]


def test_a_read_done_event_recorded_before_the_last_shared_read_is_reported_with_both_stacks(tiny, monkeypatch) -> None:
    hs = [h for h in hazards(tiny, monkeypatch, CUDA, read_done_before_the_last_read) if h.kind == "read-after-read-done"]
    assert hs and {h.buffer for h in hs} <= {"req_to_token", "seq_lens"}
    assert {(h.first_stream, h.second_stream) for h in hs} == {("forward", "forward")}
    assert all(any("resolve" in frame for frame in h.first_stack) for h in hs)
    assert any("apply" in frame for h in hs for frame in h.second_stack)


def test_the_read_gated_barrier_waits_only_until_the_shared_reads_and_is_race_free(tiny) -> None:
    assert CUDA.war_barrier and CUDA.war_barrier_read_gated
    assert run_reference(tiny, "cuda-h100", CUDA, workload=SMALL).hazards == []


def test_removing_the_war_barrier_is_a_write_after_read_on_the_request_to_token_table(tiny, monkeypatch) -> None:
    no_barrier = SyncPolicy(war_barrier=False, copy_stream=CUDA.copy_stream, fwd_prepare_d2h=CUDA.fwd_prepare_d2h)
    hs = found(hazards(tiny, monkeypatch, no_barrier, None), "write-after-read", "req_to_token")
    assert hs and {(h.first_stream, h.second_stream) for h in hs} == {("forward", "schedule")}
    assert any("prepare_for_decode" in frame for h in hs for frame in h.second_stack)
    assert any("apply" in frame for h in hs for frame in h.first_stack)


@pytest.mark.parametrize("profile", ["cuda-h100", "rocm-mi300x"])
def test_the_cuda_default_policy_is_race_free(tiny, profile) -> None:
    assert run_reference(tiny, profile, CUDA, workload=SMALL).hazards == []


def test_finding_the_hip_default_policy_races_on_the_request_tables(tiny) -> None:
    """HIP's default drops the WAR barrier: the next batch's table writes on the schedule stream are
    not ordered after the in-flight forward's reads. Reported as a finding (docs/sim.md)."""
    hs = run_reference(tiny, "rocm-mi300x", HIP, workload=SMALL).hazards
    assert {(h.kind, h.buffer) for h in hs} == {("write-after-read", "req_to_token"), ("write-after-read", "seq_lens")}


def test_sim_device_counts_hazards_it_reports(tiny) -> None:
    run = run_reference(tiny, "rocm-mi300x", HIP, workload=SMALL)
    assert isinstance(run.device, SimDevice) and len(run.device.hazards) == len(run.hazards) > 0
