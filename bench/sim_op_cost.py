"""Where the simulator's overhead goes: the cost of one aten op (plain, under a do-nothing
TorchDispatchMode, inside a simulator host step on host memory and on device memory, on the C++
core and on the Python hot path; on device memory also with the step entered 60 frames deep, its
access stacks cut at the frame that entered the step as the simulator does and walked to the root
as it did before), and on the reference workload the process CPU time of the CPU engine, of the
Python hot path with a do-nothing recorder (its dispatch floor), of the simulator on each hot path,
and the garbage collector's share of a C++-core run.

    .venv/bin/python bench/sim_op_cost.py [--ops 5000] [--repeats 7]
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler_core.cpu_kernels import native_decode_attention, prepacked_projections  # noqa: E402
from scheduler_core.engine import Engine  # noqa: E402
from scheduler_core.platform import DEFAULT_POLICIES, Platform  # noqa: E402
from scheduler_core.sampling import SamplingParams  # noqa: E402
from scheduler_core.sim import device as sim_device  # noqa: E402
from scheduler_core.sim.measure import REFERENCE, reference_model, run_reference  # noqa: E402
from scheduler_core.sim.native import NATIVE_ENV  # noqa: E402
from scheduler_core.sim.profile import load_profile  # noqa: E402

PATHS = {"C++ core": "1", "Python": "0"}


@contextmanager
def hot_path(value: str) -> Iterator[None]:
    """Simulators made inside run on this hot path (``PARALLAX_SIM_NATIVE``)."""
    before = os.environ.get(NATIVE_ENV)
    os.environ[NATIVE_ENV] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[NATIVE_ENV]
        else:
            os.environ[NATIVE_ENV] = before


class _Bare(sim_device._OpRecorder):
    """The simulator's own dispatch hook on a device that is always paused: each op runs as in a
    simulated run (projections and decode attention on the plain run's kernels) and nothing is
    recorded, timed or checked: the price of the Python dispatch itself."""

    def __init__(self, device: Any = None) -> None:
        # The recorder holds its device by weak reference: this one must outlive it.
        self._paused_device = _PausedDevice()
        super().__init__(self._paused_device)  # type: ignore[arg-type]


class _PausedDevice:
    """What `_Bare`'s recorder reads of its device: always paused, the plain run's kernels."""

    def __init__(self) -> None:
        self._measure_host = False
        self._paused = True
        self._prepacked_linear = prepacked_projections()
        self._native_attention = native_decode_attention()


def best(fn: Callable[[], float], repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def per_op_us(a: torch.Tensor, b: torch.Tensor, ops: int) -> float:
    start = time.process_time()
    for _ in range(ops):
        a + b
    return (time.process_time() - start) / ops * 1e6


DEEP = 60  # frames above the host step: a test under pytest, a runner's job


def op_costs(ops: int, repeats: int) -> dict[str, float]:
    a, b = torch.randn(64), torch.randn(64)
    profile = load_profile("cuda-h100")

    def bare() -> float:
        with _Bare():
            return per_op_us(a, b, ops)

    def deep(run: Callable[[], float], frames: int = DEEP) -> float:
        return run() if frames == 0 else deep(run, frames - 1)

    def walked_to_the_root(run: Callable[[], float]) -> Callable[[], float]:
        """As before the access stacks stopped at the frame that entered the host step."""
        def walk() -> float:
            entry = sim_device._step_entry
            sim_device._step_entry = lambda frame: None  # type: ignore[assignment]
            try:
                return deep(run)
            finally:
                sim_device._step_entry = entry  # type: ignore[assignment]
        return walk

    out = {"plain": best(lambda: per_op_us(a, b, ops), repeats), "do-nothing dispatch mode": best(bare, repeats)}
    for name, value in PATHS.items():
        with hot_path(value):
            dev = sim_device.SimDevice(Platform("sim", profile.name), profile, noise=False)
        stream = dev.new_stream("forward")
        da, db = a.clone(), b.clone()
        dev.mark_device(da)
        dev.mark_device(db)

        def in_step(x: torch.Tensor, y: torch.Tensor, dev: Any = dev, stream: Any = stream) -> Callable[[], float]:
            def run() -> float:
                with dev.stream(stream):
                    return per_op_us(x, y, ops)
            return run

        out[f"simulator ({name}), host memory"] = best(in_step(a, b), repeats)
        out[f"simulator ({name}), device memory"] = best(in_step(da, db), repeats)
        out[f"  ({name}) the step entered {DEEP} frames deep"] = best(lambda: deep(in_step(da, db)), repeats)
        out[f"  ({name}) the same, stacks walked to the root"] = best(walked_to_the_root(in_step(da, db)), repeats)
    return out


def run_costs(repeats: int) -> dict[str, float]:
    model = reference_model()
    prompts = REFERENCE.prompts(model.config.vocab_size)
    params = SamplingParams(max_new_tokens=REFERENCE.output_len, ignore_eos=True)
    engine = Engine(model)
    engine.generate(prompts, params)

    def timed(fn: Callable[[], object]) -> Callable[[], float]:
        def run() -> float:
            start = time.process_time()
            fn()
            return time.process_time() - start
        return run

    sim = timed(lambda: run_reference(model, "cuda-h100", DEFAULT_POLICIES["cuda"]))
    # A fresh engine per run, as each simulated run builds one: a reused engine would serve every
    # prompt but its last token from its radix cache and skip the prefill the simulated side does.
    out = {"CPU engine": best(timed(lambda: Engine(model).generate(prompts, params)), repeats)}
    recorder = sim_device._OpRecorder
    sim_device._OpRecorder = _Bare  # type: ignore[misc]
    try:
        with hot_path("0"):
            out["simulator (Python), do-nothing recorder"] = best(sim, repeats)
    finally:
        sim_device._OpRecorder = recorder  # type: ignore[misc]
    with hot_path("0"):
        out["simulator (Python)"] = best(sim, repeats)
    collected = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        collected[0] += time.process_time() if phase == "stop" else -time.process_time()

    gc.callbacks.append(on_gc)
    try:
        with hot_path("1"):
            out["simulator (C++ core)"] = best(sim, repeats)
        collected[0] = 0.0
        with hot_path("1"):
            for _ in range(repeats):
                sim()
        out["garbage collector per C++-core run (mean)"] = collected[0] / repeats
    finally:
        gc.callbacks.remove(on_gc)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if args.ops < 1 or args.repeats < 1:
        parser.error("--ops and --repeats must be at least 1")
    torch.set_num_threads(1)
    print(f"one aten op (a + b, 64 floats), process CPU time, best of {args.repeats}:")
    for name, us in op_costs(args.ops, args.repeats).items():
        print(f"  {name:40s} {us:6.1f} us")
    print(f"reference workload, process CPU time, best of {min(args.repeats, 5)}:")
    for name, s in run_costs(min(args.repeats, 5)).items():
        print(f"  {name:45s} {s:6.3f} s")


if __name__ == "__main__":
    main()
