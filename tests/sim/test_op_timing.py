"""What the simulator times as device work: the model's matmuls by their FLOPs, and the gathers
from the model's buffers (the rotary tables) in either loop."""
from __future__ import annotations

import dataclasses
from collections import Counter

import pytest
import torch

from scheduler_core.cpu_kernels import linear
from scheduler_core.model.loader import load_model
from scheduler_core.platform import DEFAULT_POLICIES, Platform
from scheduler_core.sim.device import SimDevice
from scheduler_core.sim.measure import run_reference
from scheduler_core.sim.profile import load_profile
from tests.support.decode_step import decode_logits

from .conftest import SMALL

SLOW_MATMUL = dataclasses.replace(load_profile("cuda-h100"), name="cuda-slow-matmul", matmul_tflops=0.01)


def test_a_linear_is_timed_by_its_flops() -> None:
    device = SimDevice(Platform("sim", SLOW_MATMUL.name), SLOW_MATMUL)
    x, weight = torch.randn(1024, 256), torch.randn(512, 256)
    for t in (x, weight):
        device.mark_device(t)
    with device.stream(device.new_stream("forward")), torch.inference_mode():
        torch.nn.functional.linear(x, weight)
    (span,) = [s for s in device.timeline.spans if s.name == "linear"]
    flop_us = 2 * 1024 * 256 * 512 / (SLOW_MATMUL.matmul_tflops * 1e6)
    assert span.end_us - span.start_us >= flop_us


def test_a_simulated_linear_computes_the_plain_cpu_runs_values_bit_for_bit() -> None:
    device = SimDevice(Platform("sim", SLOW_MATMUL.name), SLOW_MATMUL)
    x, weight = torch.randn(16, 576), torch.randn(1536, 576)
    with torch.inference_mode():
        plain = linear(x, weight)
        for t in (x, weight):
            device.mark_device(t)
        with device.stream(device.new_stream("forward")):
            simulated = torch.nn.functional.linear(x, weight)
    assert torch.equal(simulated, plain)
    assert [s.name for s in device.timeline.spans if s.name == "linear"] == ["linear"]  # still timed as itself


def test_rotary_gathers_are_device_work_in_the_normal_loop_too(tiny) -> None:
    run = run_reference(tiny, "cuda-h100", DEFAULT_POLICIES["cuda"], overlap=False, workload=SMALL)
    gathers = Counter(s.name for s in run.device.timeline.spans if s.track == "default")["index.Tensor"]
    forwards = SMALL.output_len  # one prefill and output_len - 1 decode steps
    assert gathers >= 2 * forwards  # cos and sin, once per forward for every layer's q and k


@pytest.mark.usefixtures("one_torch_thread")  # where the plain run's decode attention is the C kernel
def test_a_simulated_decode_step_computes_the_plain_runs_logits_bit_for_bit() -> None:
    loaded = load_model("tiny-random")
    plain = decode_logits(loaded)
    device = SimDevice(Platform("sim", SLOW_MATMUL.name), SLOW_MATMUL)
    for t in [*loaded.model.parameters(), *loaded.model.buffers()]:
        device.mark_device(t)
    with device.stream(device.new_stream("forward")):
        simulated = decode_logits(loaded)
    assert torch.equal(simulated, plain)
    names = Counter(s.name for s in device.timeline.spans)
    assert names["scaled_dot_product_attention"] == 2 * loaded.config.num_layers  # prefill and decode, timed as themselves
