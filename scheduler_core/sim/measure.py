"""The reference workload on the simulator: one batch decoding together, under a profile and a sync
policy, measured on the virtual timeline (the calibration tests and bench/sim_policies.py use it).

Decode throughput is the decode tokens over the device-timeline time of the decode steps (from
the first decode step's first op on the forward stream to that stream's last op), never host
launch time alone; device idle is the forward stream's idle share of that window.
"""
from __future__ import annotations

import gc
import random
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from scheduler_core.engine import Engine
from scheduler_core.model.loader import SMOLLM2_8L, LoadedModel, load_model
from scheduler_core.platform import ActivePolicy, Platform, SyncPolicy
from scheduler_core.records import StepRecord
from scheduler_core.sampling import SamplingParams
from scheduler_core.sim.device import SimDevice
from scheduler_core.sim.profile import Profile, load_profile
from scheduler_core.sim.race import Hazard
from scheduler_core.spec import SpecConfig


@dataclass(frozen=True)
class Workload:
    batch_size: int = 8
    input_len: int = 64
    output_len: int = 32
    seed: int = 0

    def prompts(self, vocab: int) -> list[list[int]]:
        rng = random.Random(self.seed)
        top = min(vocab, 1000)
        return [[rng.randrange(1, top) for _ in range(self.input_len)] for _ in range(self.batch_size)]


REFERENCE = Workload()


def reference_model() -> LoadedModel:
    """SmolLM2-135M's real weights and layer shapes, cut to its first 8 layers (docs/sim.md: why)."""
    return load_model(SMOLLM2_8L)


@dataclass
class SimRun:
    profile: str
    policy: SyncPolicy
    overlap: bool
    tokens_per_s: float
    idle_pct: float  # forward-stream idle time between the first decode step and the end, in %
    hazards: list[Hazard]
    busy: dict[str, float]
    outputs: list[list[int]]
    device: SimDevice
    accept_length: float = 0.0  # speculative decoding: mean tokens per request-step (0: off)


def decode_window(steps: list[StepRecord], end_s: float, batch_size: int) -> tuple[float, float]:
    """(start, end) in seconds of the decode phase of a one-batch run."""
    decode = [s for s in steps if s.mode == "decode" and s.batch_size == batch_size]
    if not decode:
        raise ValueError("the run had no full-batch decode step")
    return decode[0].started, end_s


@contextmanager
def older_objects_frozen() -> Iterator[None]:
    """Leave the objects that exist before a run (the model, torch, earlier results) out of the garbage
    collector's full passes during it (``gc.freeze``). A simulated run keeps tens of thousands of small
    records the collector tracks (blocks, accesses with their stack handles), which trigger a full
    pass every second run or so; each walked the whole process (about 0.1 s, a fifth of a toy run).
    The objects go back to the oldest generation afterwards."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run_reference(loaded: LoadedModel, profile: str | Profile, policy: SyncPolicy, overlap: bool = True,
                  workload: Workload = REFERENCE, noise: bool = False, seed: int = 0,
                  keep_spans: bool = True, speculative: SpecConfig | None = None,
                  grammar: Callable[[int], Any] | None = None) -> SimRun:
    """One run of ``workload``; ``profile`` is a profile name or a ``Profile`` (e.g. a variant).
    ``speculative`` turns speculative decoding on; ``grammar(i)`` gives request i a constraint."""
    prof = profile if isinstance(profile, Profile) else load_profile(profile)
    platform = Platform("sim", prof.name)
    params = SamplingParams(max_new_tokens=workload.output_len, ignore_eos=True)
    prompts = workload.prompts(loaded.config.vocab_size)
    grammars = None if grammar is None else [grammar(i) for i in range(len(prompts))]
    with older_objects_frozen():
        device = SimDevice(platform, prof, noise=noise, seed=seed, keep_spans=keep_spans)
        engine = Engine(loaded, overlap=overlap, streams=device, sync_policy=ActivePolicy(platform, policy),
                        speculative=speculative)
        outs = engine.generate(prompts, params, grammars=grammars) if grammars else engine.generate(prompts, params)
    launched, _ = decode_window(engine.scheduler.steps, device.now(), workload.batch_size)
    track = "forward" if overlap else "default"
    start, end = device.timeline.extent(track, launched * 1e6 - 1e-3)  # 1 ns: seconds to us may round up
    tokens = workload.batch_size * (workload.output_len - 1)  # the first token comes from the prefill
    idle = device.timeline.idle_gaps(track, start, end)
    return SimRun(prof.name, policy, overlap, tokens / ((end - start) * 1e-6), 100.0 * idle / (end - start),
                  list(device.hazards), device.busy_fraction(), [o.output_ids for o in outs], device,
                  engine.scheduler.spec_stats.accept_length)
