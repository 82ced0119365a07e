"""The simulated device: same outputs as the CPU, a deterministic timeline, seeded noise, traces, profiles."""
from __future__ import annotations

import gc
import inspect
import json
import weakref
from typing import Iterator

import numpy as np
import pytest
import torch

from scheduler_core.engine import Engine
from scheduler_core.platform import DEFAULT_POLICIES, Platform
from scheduler_core.sampling import SamplingParams
from scheduler_core.sim.device import STACK_DEPTH, SimDevice, _format_stack, _stack
from scheduler_core.sim.measure import run_reference
from scheduler_core.sim.profile import FIELDS, ProfileError, available, load_profile

from .conftest import SMALL

CUDA, HIP = DEFAULT_POLICIES["cuda"], DEFAULT_POLICIES["rocm"]


@pytest.mark.parametrize("profile,policy", [("cuda-h100", CUDA), ("rocm-mi300x", HIP)])
def test_greedy_outputs_on_the_simulator_equal_the_cpu_token_for_token(tiny, profile, policy) -> None:
    prompts = SMALL.prompts(tiny.config.vocab_size)
    params = SamplingParams(max_new_tokens=SMALL.output_len, ignore_eos=True)
    cpu = [o.output_ids for o in Engine(tiny).generate(prompts, params)]
    assert run_reference(tiny, profile, policy, workload=SMALL).outputs == cpu


def test_the_same_inputs_give_the_same_timeline_bit_for_bit(tiny) -> None:
    first = run_reference(tiny, "rocm-mi300x", HIP, workload=SMALL)
    second = run_reference(tiny, "rocm-mi300x", HIP, workload=SMALL)
    assert first.device.timeline.signature() == second.device.timeline.signature()
    assert first.tokens_per_s == second.tokens_per_s


def test_noise_follows_the_seed_and_the_attempt(tiny) -> None:
    one = run_reference(tiny, "rocm-mi300x", HIP, workload=SMALL, noise=True, seed=1).tokens_per_s
    again = run_reference(tiny, "rocm-mi300x", HIP, workload=SMALL, noise=True, seed=1).tokens_per_s
    other = run_reference(tiny, "rocm-mi300x", HIP, workload=SMALL, noise=True, seed=2).tokens_per_s
    exact = run_reference(tiny, "rocm-mi300x", HIP, workload=SMALL).tokens_per_s
    assert one == again and one != other and exact not in (one, other)


def test_attempt_changes_the_noise_draw(monkeypatch) -> None:
    platform = Platform("sim", "rocm-mi300x")
    monkeypatch.setenv("PARALLAX_ATTEMPT", "1")
    first = SimDevice(platform, noise=True, seed=0).speed
    monkeypatch.setenv("PARALLAX_ATTEMPT", "2")
    assert SimDevice(platform, noise=True, seed=0).speed != first


def test_trace_has_one_track_per_stream_and_the_host(tiny, tmp_path) -> None:
    run = run_reference(tiny, "cuda-h100", CUDA, workload=SMALL)
    path = tmp_path / "trace.json"
    run.device.write_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"host", "schedule", "forward", "copy", "fwd_prepare_d2h"} <= tracks
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)


def test_device_time_is_counted_per_stream(tiny) -> None:
    run = run_reference(tiny, "cuda-h100", CUDA, workload=SMALL)
    assert 0 < run.busy["forward"] <= 1 and 0 < run.busy["schedule"] < run.busy["forward"]


@pytest.mark.parametrize("name", ["cuda-h100", "rocm-mi300x"])
def test_every_profile_number_has_a_source(name) -> None:
    profile = load_profile(name)
    assert set(profile.sources) == set(FIELDS) and all(len(s) > 20 for s in profile.sources.values())


def test_an_unknown_profile_is_refused_by_name() -> None:
    with pytest.raises(ProfileError, match="no simulator profile 'cuda-b300'.*cuda-h100"):
        load_profile("cuda-b300")
    assert {"cuda-h100", "rocm-mi300x"} <= set(available())


def test_measured_host_time_charges_the_host_steps_wall_time(tiny) -> None:
    import time
    platform = Platform("sim", "cuda-h100")
    device = SimDevice(platform, noise=False, host_time="measured")
    with device.stream(device.current_stream()):
        time.sleep(0.01)  # host work: no device op
    steps = [s for s in device.timeline.spans if s.track == "host"]
    assert len(steps) == 1 and steps[0].end_us - steps[0].start_us >= 10_000
    fixed = SimDevice(platform, noise=False)
    with fixed.stream(fixed.current_stream()):
        time.sleep(0.01)
    assert fixed.timeline.host_us == fixed.profile.host_step_us


def test_an_unknown_host_time_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="PARALLAX_SIM_HOST_TIME='wall'"):
        SimDevice(Platform("sim", "cuda-h100"), host_time="wall")


def test_an_access_stack_names_file_line_and_function_innermost_first() -> None:
    def access() -> object:
        return _stack()
    stack, line = access(), inspect.currentframe().f_lineno  # type: ignore[union-attr]
    inner = inspect.getsourcelines(access)[1] + 1
    frames = _format_stack(stack)
    assert frames[:2] == (f"{__file__}:{inner} in access",
                          f"{__file__}:{line} in test_an_access_stack_names_file_line_and_function_innermost_first")
    assert len(frames) <= STACK_DEPTH


def _read(x: torch.Tensor) -> torch.Tensor:
    return x + 1  # the op a hazard names first


def _written_then_read_on_side(device: SimDevice, x: torch.Tensor) -> torch.Tensor:
    side = device.new_stream("side")
    with device.stream(device.current_stream()):  # one host step: this frame entered it
        x.add_(1)
        with device.stream(side):
            return _read(x)  # on "side", not ordered after the write


def _line_of(function: object, text: str) -> int:
    lines, first = inspect.getsourcelines(function)  # type: ignore[arg-type]
    return first + next(i for i, line in enumerate(lines) if text in line)


def test_a_hazards_stack_runs_from_the_op_through_the_frame_that_entered_the_step_to_its_callers() -> None:
    device = SimDevice(Platform("sim", "cuda-h100"), noise=False)
    x = torch.zeros(4)
    device.mark_device(x)
    _, line = _written_then_read_on_side(device, x), inspect.currentframe().f_lineno  # type: ignore[union-attr]
    (hazard,) = device.hazards
    assert hazard.kind == "read-after-write"
    assert hazard.second_stack[:3] == (
        f"{__file__}:{_line_of(_read, 'return x + 1')} in _read",
        f"{__file__}:{_line_of(_written_then_read_on_side, 'return _read(x)')} in _written_then_read_on_side",
        f"{__file__}:{line} in test_a_hazards_stack_runs_from_the_op_through_the_frame_that_entered_the_step_to_its_callers")


def _step_in_a_generator(device: SimDevice, x: torch.Tensor) -> Iterator[torch.Tensor]:
    side = device.new_stream("side")
    with device.stream(device.current_stream()):
        x.add_(1)
        yield x
        with device.stream(side):
            yield x + 1  # run when the caller resumes the generator, from wherever it does


def test_a_step_entered_in_a_generator_names_the_frame_that_resumed_it() -> None:
    device = SimDevice(Platform("sim", "cuda-h100"), noise=False)
    x = torch.zeros(4)
    device.mark_device(x)
    steps = _step_in_a_generator(device, x)
    next(steps)  # enters the host step
    _, line = next(steps), inspect.currentframe().f_lineno  # type: ignore[union-attr]  # the read, from here
    (hazard,) = device.hazards
    assert hazard.second_stack[:2] == (
        f"{__file__}:{_line_of(_step_in_a_generator, 'yield x + 1')} in _step_in_a_generator",
        f"{__file__}:{line} in test_a_step_entered_in_a_generator_names_the_frame_that_resumed_it")


def test_a_dead_storage_whose_address_comes_back_inside_one_step_is_freed_first(hot_path) -> None:
    """An allocator hands a dead tensor's address to the next tensor, often inside the same host step,
    before any sweep looks. The first op that sees the new tensor must free the old block (and check
    that free against the other streams' unordered uses of it) before it starts a new one: else the
    new tensor inherits the old block's history and the free is never checked."""
    dev = SimDevice(Platform("sim", "rocm-mi300x"))
    forward, side = dev.new_stream("forward"), dev.new_stream("side")
    memory = np.zeros(16, dtype=np.float32)  # outlives its tensors: the next one gets the same address
    old, ones = torch.from_numpy(memory), torch.ones(16)
    with dev.stream(forward):
        dev.mark_device(old)  # the block is forward's
        dev.mark_device(ones)
    with dev.stream(side):
        old.mul(2)  # side reads it; nothing orders that read before forward's next use
        address = old.untyped_storage().data_ptr()
        del old
        new = torch.from_numpy(memory)
        assert new.untyped_storage().data_ptr() == address
        new.add_(ones)  # a kernel reads the new host tensor: copied to the device, a new block
    freed = [h for h in dev.hazards if h.kind == "use-after-free"]
    assert len(freed) == 1 and freed[0].first_stream == "side" and freed[0].second_op.startswith("free"), dev.hazards


def test_a_finished_runs_device_is_freed_when_dropped_without_a_garbage_collection(tiny, hot_path) -> None:
    """Streams and the dispatch mode hold their device weakly: a run's device (its detector, timeline and
    core) goes with the last reference to it, not at the next full collection, which a simulated run
    defers (``older_objects_frozen``)."""
    run = run_reference(tiny, "rocm-mi300x", HIP, workload=SMALL)
    device = weakref.ref(run.device)
    gc.disable()
    try:
        del run
        assert device() is None
    finally:
        gc.enable()


def test_a_stream_whose_device_is_gone_says_so() -> None:
    dev = SimDevice(Platform("sim", "cuda-h100"))
    stream = dev.new_stream("forward")
    del dev
    with pytest.raises(ReferenceError, match="stream 'forward': its SimDevice is gone"):
        stream.wait_stream(stream)
