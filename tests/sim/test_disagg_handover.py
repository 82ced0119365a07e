"""In-process disaggregation on the simulator: the KV handover from the prefill side's stream to the
decode side's is ordered (an event after the gather, a wait before the write, ``record_stream`` on
the consumer), and removing the wait or the ``record_stream`` is reported on the handed-over K/V."""
from __future__ import annotations

import dataclasses

import pytest

from scheduler_core import disagg
from scheduler_core.engine import Engine
from scheduler_core.model.loader import LoadedModel
from scheduler_core.platform import DEFAULT_POLICIES, PRESETS, ActivePolicy, Platform, SyncPolicy
from scheduler_core.sampling import SamplingParams
from scheduler_core.sim.device import SimDevice
from scheduler_core.sim.profile import load_profile
from scheduler_core.sim.race import Hazard

from .conftest import SMALL

CUDA = DEFAULT_POLICIES["cuda"]
HIP = DEFAULT_POLICIES["rocm"]
HIP_26380 = dataclasses.replace(HIP, **PRESETS["sglang-26380"].switches)  # HIP with the WAR barrier
HANDOFF = {"handoff.k", "handoff.v"}


def run_disaggregated(tiny: LoadedModel, profile: str, policy: SyncPolicy) -> tuple[list[Hazard], list[list[int]]]:
    prof = load_profile(profile)
    platform = Platform("sim", prof.name)
    device = SimDevice(platform, prof, noise=False)
    engine = Engine(tiny, disaggregation="inproc", streams=device, sync_policy=ActivePolicy(platform, policy))
    params = SamplingParams(max_new_tokens=SMALL.output_len, ignore_eos=True)
    outputs = [o.output_ids for o in engine.generate(SMALL.prompts(tiny.config.vocab_size), params)]
    return device.hazards, outputs


def cpu_outputs(tiny: LoadedModel) -> list[list[int]]:
    params = SamplingParams(max_new_tokens=SMALL.output_len, ignore_eos=True)
    return [o.output_ids for o in Engine(tiny).generate(SMALL.prompts(tiny.config.vocab_size), params)]


@pytest.mark.parametrize("profile,policy", [("cuda-h100", CUDA), ("rocm-mi300x", HIP_26380)],
                         ids=["cuda-h100 cuda default", "rocm-mi300x sglang-26380"])
def test_the_inproc_disaggregated_engine_has_no_hazards(tiny, profile: str, policy: SyncPolicy) -> None:
    hazards, outputs = run_disaggregated(tiny, profile, policy)
    assert hazards == [], "\n\n".join(h.describe() for h in hazards[:3])
    assert outputs == cpu_outputs(tiny)


def test_on_the_hip_default_only_the_known_war_finding_remains(tiny) -> None:
    """HIP's default policy has no WAR barrier (docs/sim.md, finding): its hazards are the decode
    side's own req_to_token / seq_lens writes, never the handover."""
    hazards, outputs = run_disaggregated(tiny, "rocm-mi300x", HIP)
    assert not [h for h in hazards if h.buffer in HANDOFF]
    assert {(h.kind, h.buffer) for h in hazards} <= {("write-after-read", "req_to_token"),
                                                     ("write-after-read", "seq_lens")}
    assert outputs == cpu_outputs(tiny)


@pytest.mark.parametrize("profile", ["cuda-h100", "rocm-mi300x"])
def test_without_the_wait_the_decode_write_races_the_prefill_gather(tiny, monkeypatch, profile: str) -> None:
    def record_only(device, ready, tensors):  # the wait deleted, record_stream kept
        for t in tensors:
            device.record_stream(t, device.current_stream())

    monkeypatch.setattr(disagg, "wait_for_handoff", record_only)
    hazards, _ = run_disaggregated(tiny, profile, CUDA)
    raw = [h for h in hazards if h.kind == "read-after-write" and h.buffer in HANDOFF]
    assert {h.buffer for h in raw} == HANDOFF
    assert {(h.first_op, h.first_stream, h.second_op, h.second_stream) for h in raw} == {
        ("index_select", "prefill.schedule", "index_copy_", "decode.schedule")}
    assert any("_hand_off" in frame for frame in raw[0].first_stack)
    assert any("_admit" in frame for frame in raw[0].second_stack)


def test_without_record_stream_the_handed_over_kv_is_freed_under_the_decode_stream(tiny, monkeypatch) -> None:
    def wait_only(device, ready, tensors):  # record_stream deleted, the wait kept
        device.current_stream().wait_event(ready)

    monkeypatch.setattr(disagg, "wait_for_handoff", wait_only)
    hazards, _ = run_disaggregated(tiny, "cuda-h100", CUDA)
    uaf = [h for h in hazards if h.kind == "use-after-free" and h.buffer in HANDOFF]
    assert {h.buffer for h in uaf} == HANDOFF
    assert {h.first_stream for h in uaf} == {"decode.schedule"}
    assert all("prefill.schedule" in h.second_op for h in uaf)  # the block returns to the producer's pool
