"""The simulator's virtual results, pinned bit for bit: timeline spans (start, end and the host clock
when each was queued), per-stream busy time, the decode throughput and idle share, the greedy
outputs and every hazard report (kind, buffer, ops, streams, stack frames as ``file in function``;
sorted, since the order in which freed blocks are found follows their addresses).

The expected digests were produced by the simulator before its hot path was optimised (issue 31),
so a change to the per-op bookkeeping that moves any virtual number or hazard fails here. They also
move, legitimately, when the tiny model's ops, the scheduler's streams or a profile change; then
re-derive them on the commit before such a change and check the new ones against it
(``.venv/bin/python -m tests.sim.test_pinned_results`` prints the current digests). Re-derived on
7 December 2026 when the model gathered the rotary tables once per forward and rotated by a roll
(six fewer kernels per layer): the greedy outputs and every hazard's kind, buffer, ops and streams
were the same before and after; one hazard's first stack now starts in ``angles``, where the gather
of ``forward_batch.positions`` moved; the timeline is shorter.

Every case runs on both hot paths (the ``hot_path`` fixture): the C++ core and the Python one.

``synthetic`` drives a ``SimDevice`` directly (no model, no scheduler): two streams, an event, a
stream wait, copies, a read-done claim read too early, a write-after-read, a read-after-write and a
use-after-free, so it keeps pinning the detector's reports when the engine changes.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable

import pytest
import torch

from scheduler_core.model.loader import LoadedModel, tiny_random
from scheduler_core.overlap import OverlapPipeline
from scheduler_core.platform import DEFAULT_POLICIES, Platform
from scheduler_core.sim.device import SimDevice
from scheduler_core.sim.measure import SimRun, Workload, run_reference
from scheduler_core.sim.race import Hazard

from .conftest import SMALL

CUDA, HIP = DEFAULT_POLICIES["cuda"], DEFAULT_POLICIES["rocm"]


def _frames(stack: tuple[str, ...]) -> tuple[str, ...]:
    """The engine's frames (and ``synthetic``'s) as ``path in function``: no line, so the pin survives
    edits elsewhere in a file; no checkout path and no caller's frames (pytest, ``__main__``), so it
    is the same wherever it runs."""
    out = []
    for frame in stack:
        path, function = frame.split(":")[0], frame.rsplit(" in ", 1)[-1]
        if "scheduler_core/" in path:
            out.append(f"scheduler_core/{path.rsplit('scheduler_core/', 1)[1]} in {function}")
        elif function == "synthetic":
            out.append(function)
    return tuple(out)


def _hazard(h: Hazard) -> tuple:
    return (h.kind, h.buffer, h.first_op, h.first_stream, _frames(h.first_stack),
            h.second_op, h.second_stream, _frames(h.second_stack))


def device_digest(device: SimDevice) -> dict[str, Any]:
    timeline = device.timeline
    state = (timeline.signature(), list(timeline._issued), sorted(timeline.busy_us.items()), timeline.host_us,
             timeline.first_us, sorted(device.ready.items()), sorted(_hazard(h) for h in device.hazards))
    return {"spans": len(timeline.signature()), "hazards": len(device.hazards),
            "sha256": hashlib.sha256(repr(state).encode()).hexdigest()}


def run_digest(run: SimRun) -> dict[str, Any]:
    out = device_digest(run.device)
    extra = (run.tokens_per_s, run.idle_pct, sorted(run.busy.items()), run.outputs)
    out["sha256"] = hashlib.sha256((out["sha256"] + repr(extra)).encode()).hexdigest()
    return out


def one_slot_record_buffer(pipe: OverlapPipeline) -> None:
    pipe.record_buf = [None]


def no_copy_wait(pipe: OverlapPipeline) -> None:
    pipe.copy.wait_stream = lambda other: None


def engine_run(tiny: LoadedModel, profile: str, policy, overlap: bool = True, noise: bool = False,
               bug: Callable[[OverlapPipeline], None] | None = None, workload: Workload = SMALL) -> SimRun:
    if bug is None:
        return run_reference(tiny, profile, policy, overlap=overlap, workload=workload, noise=noise, seed=1)
    original = OverlapPipeline.__init__

    def patched(self, *args, **kwargs):
        original(self, *args, **kwargs)
        bug(self)

    OverlapPipeline.__init__ = patched  # type: ignore[method-assign]
    try:
        return run_reference(tiny, profile, policy, overlap=overlap, workload=workload, noise=noise, seed=1)
    finally:
        OverlapPipeline.__init__ = original  # type: ignore[method-assign]


def synthetic(profile: str) -> SimDevice:
    """A hand-written stream program on the device facade, with every hazard kind in it."""
    dev = SimDevice(Platform("sim", profile), noise=False)
    schedule, forward = dev.new_stream("schedule"), dev.new_stream("forward")
    torch.manual_seed(0)
    weight = torch.randn(16, 32)
    dev.mark_device(weight)
    dev.name_buffer(weight, "weight")
    table = torch.zeros(4, 8, dtype=torch.int64)
    dev.mark_device(table)
    dev.name_buffer(table, "table")
    host = dev.empty_pinned((4, 16), torch.float32)
    for step in range(3):
        with dev.stream(schedule):
            table[:, step] = step + 1  # the schedule stream writes the table
            rows = torch.arange(4) + step
            dev.copy_(table[:, step + 1], rows)
            ready = schedule.record_event()
        with dev.stream(forward):
            if step != 1:
                forward.wait_event(ready)  # step 1: the forward reads the table unordered
            x = torch.randn(4, 32)
            gathered = table.float().sum(dim=1, keepdim=True)
            done = forward.record_event()
            dev.declare_reads_done(done, [table])
            if step == 2:
                table.sum()  # a read after the read-done claim
            y = torch.nn.functional.linear(x, weight) + gathered
            y = torch.relu(y).softmax(dim=-1)
            dev.to_host(y, out=host)
            copied = forward.record_event()
        if step != 0:
            with dev.stream(schedule):
                schedule.wait_stream(forward)
        copied.synchronize()
        dev.host_list(host)
    with dev.stream(forward):
        table.float()  # a read the next write is not ordered after (no host sync in between)
    with dev.stream(schedule):
        table.zero_()
        scratch = weight.sum(dim=0) * 2  # device memory allocated on the schedule stream
    with dev.stream(forward):
        (scratch + 1).sum()  # used on the forward stream, then freed unordered
    del scratch
    dev.synchronize()
    return dev


CASES: dict[str, Callable[[LoadedModel], dict[str, Any]]] = {
    "cuda overlap": lambda m: run_digest(engine_run(m, "cuda-h100", CUDA)),
    "rocm overlap (HIP default: its WAR races)": lambda m: run_digest(engine_run(m, "rocm-mi300x", HIP)),
    "cuda normal loop": lambda m: run_digest(engine_run(m, "cuda-h100", CUDA, overlap=False)),
    "rocm normal loop": lambda m: run_digest(engine_run(m, "rocm-mi300x", HIP, overlap=False)),
    "rocm overlap, noise on": lambda m: run_digest(engine_run(m, "rocm-mi300x", HIP, noise=True)),
    "cuda, one-slot record buffer (use-after-free)": lambda m: run_digest(
        engine_run(m, "cuda-h100", CUDA, bug=one_slot_record_buffer)),
    "cuda, no copy wait (read-after-write)": lambda m: run_digest(engine_run(m, "cuda-h100", CUDA, bug=no_copy_wait)),
    "synthetic cuda": lambda m: device_digest(synthetic("cuda-h100")),
    "synthetic rocm": lambda m: device_digest(synthetic("rocm-mi300x")),
}

EXPECTED: dict[str, dict[str, Any]] = {
    'cuda overlap':
        {'spans': 1006, 'hazards': 0, 'sha256': 'afab0578d9e29b92ed48cd3ba3c9b61011b3eb836741a0341ed21f13d92726fc'},
    'rocm overlap (HIP default: its WAR races)':
        {'spans': 925, 'hazards': 14, 'sha256': '8dc2541e80fe07084f65642ae87de6d0213545cfd597c977b449597696387f27'},
    'cuda normal loop':
        {'spans': 719, 'hazards': 0, 'sha256': '08592af1cb6fac116c54f37a042415b101aba182395a73076cb87f38c77a58bc'},
    'rocm normal loop':
        {'spans': 719, 'hazards': 0, 'sha256': '34a47570351b87999a96f566ac0245c8cd17055855f0af6a827d8a7eb4aa8047'},
    'rocm overlap, noise on':
        {'spans': 925, 'hazards': 14, 'sha256': 'aaad2243a6ab3554626399de01b6be08b958734f62140781465a59c1c171f837'},
    'cuda, one-slot record buffer (use-after-free)':
        {'spans': 1006, 'hazards': 27, 'sha256': '7076e04d998c4cf9f2ec614ce25a43066923247de274e184ea2c38d78aa608d5'},
    'cuda, no copy wait (read-after-write)':
        {'spans': 988, 'hazards': 26, 'sha256': '4482fde2026871f84f3a1658eb0aba99dce658eb5ba63f3789a8f18424f20f17'},
    'synthetic cuda':
        {'spans': 64, 'hazards': 6, 'sha256': '35820c7fa758b194067925561265a929ae6b876ee4db8abeec834629d2bab092'},
    'synthetic rocm':
        {'spans': 64, 'hazards': 6, 'sha256': 'e0633cba55358d7f9bbdc41d18b83e3db647818cbc5931e80963fb1f5c8ef832'},
}


@pytest.mark.parametrize("case", list(CASES))
def test_virtual_results_are_pinned_bit_for_bit(tiny, hot_path, case) -> None:
    assert CASES[case](tiny) == EXPECTED[case]


def test_the_synthetic_program_has_every_hazard_kind() -> None:
    kinds = {h.kind for h in synthetic("cuda-h100").hazards}
    assert kinds == {"read-after-write", "write-after-read", "read-after-read-done", "use-after-free"}


if __name__ == "__main__":
    torch.set_num_threads(1)
    model = tiny_random(0)
    for name, case in CASES.items():
        print(f"    {name!r}:\n        {case(model)},")
