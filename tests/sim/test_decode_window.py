"""Decode throughput counts decode time only. The overlap loop launches the first decode step while
the prefill still runs on the device; neither the one-batch job nor the reference measurement may
count the prefill's remaining time as decode time, or the overlap loop would look slower than the
loop it improves on whenever the prefill is long."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from scheduler_core.engine import Engine
from scheduler_core.jobs.decode_throughput import one_batch
from scheduler_core.platform import DEFAULT_POLICIES, ActivePolicy, Platform
from scheduler_core.sim.device import SimDevice
from scheduler_core.sim.measure import Workload, run_reference
from scheduler_core.sim.profile import load_profile

# Matmuls 100,000x slower than an H100's: a 4 x 256-token prefill takes milliseconds of device time,
# each 4-token decode step far less.
SLOW_PREFILL = dataclasses.replace(load_profile("cuda-h100"), name="cuda-slow-matmul", matmul_tflops=0.01)
LONG_PREFILL = Workload(batch_size=4, input_len=256, output_len=6)
CUDA = DEFAULT_POLICIES["cuda"]


def job_throughput(tiny, overlap: bool) -> float:
    platform = Platform("sim", SLOW_PREFILL.name)
    engine = Engine(tiny, overlap=overlap, streams=SimDevice(platform, SLOW_PREFILL),
                    sync_policy=ActivePolicy(platform, CUDA))
    args = argparse.Namespace(batch_size=LONG_PREFILL.batch_size, input_len=LONG_PREFILL.input_len,
                              output_len=LONG_PREFILL.output_len)
    return one_batch(engine, args, seed=0)["decode_throughput"]


def test_one_batch_job_does_not_count_a_long_prefill_as_decode_time_under_overlap(tiny) -> None:
    assert job_throughput(tiny, overlap=True) >= job_throughput(tiny, overlap=False)


def test_reference_measurement_does_not_count_a_long_prefill_as_decode_time_under_overlap(tiny) -> None:
    with_overlap = run_reference(tiny, SLOW_PREFILL, CUDA, overlap=True, workload=LONG_PREFILL)
    without = run_reference(tiny, SLOW_PREFILL, CUDA, overlap=False, workload=LONG_PREFILL)
    assert with_overlap.tokens_per_s >= without.tokens_per_s


def test_one_batch_job_refuses_an_output_length_without_decode_steps(tiny) -> None:
    args = argparse.Namespace(batch_size=2, input_len=8, output_len=1)
    with pytest.raises(SystemExit, match="--output-len >= 2"):
        one_batch(Engine(tiny), args, seed=0)
