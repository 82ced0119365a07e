"""What both jobs share: engine command-line options, repeats, progress lines and percentiles."""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from typing import Callable

import numpy as np

from scheduler_core.cpu_kernels import KernelChoiceError
from scheduler_core.engine import Engine
from scheduler_core.jobs.results import Metric
from scheduler_core.model.loader import ModelLoadError
from scheduler_core.platform import PlatformError
from scheduler_core.sim.device import SimDevice


def add_engine_args(parser: argparse.ArgumentParser, *, max_running: int, kv_tokens: int) -> None:
    parser.add_argument("--model", default="smollm2-135m",
                        help="smollm2-135m, smollm2-135m-8l (its first 8 layers), tiny-random (seeded, for fast tests), "
                             "tiny-random-8l, a .gguf file or an HF directory")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-running-requests", type=int, default=max_running)
    parser.add_argument("--kv-tokens", type=int, default=kv_tokens)
    parser.add_argument("--chunked-prefill-size", type=int, default=1024)
    parser.add_argument("--schedule-policy", default="fcfs", choices=["fcfs", "lpm"])
    parser.add_argument("--no-radix-cache", action="store_true")
    parser.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=True,
                        help="overlap loop: schedule batch N+1 while batch N runs (default on)")
    parser.add_argument("--disaggregation", choices=["inproc", "torch.distributed"], default=None,
                        help="separate prefill and decode schedulers, in-process or in two processes")
    parser.add_argument("--trace", metavar="OUT.json", default=None,
                        help="simulated platforms: write the virtual timeline as a Chrome/Perfetto trace")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("PARALLAX_THREADS", 0)) or None,
                        help="torch intra-op threads (default: $PARALLAX_THREADS, else torch's default)")


def make_engine(args: argparse.Namespace) -> Engine:
    log(f"loading model {args.model} on {args.device}")
    start = time.perf_counter()
    try:
        engine = Engine(model=args.model, device=args.device, max_running_requests=args.max_running_requests,
                        kv_tokens=args.kv_tokens, chunked_prefill_size=args.chunked_prefill_size or None,
                        schedule_policy=args.schedule_policy, enable_radix_cache=not args.no_radix_cache,
                        num_threads=args.threads, overlap=args.overlap, disaggregation=args.disaggregation)
    # A PARALLAX_* setting (device, sync policy, host clock, CPU kernels) or the model: say which, no traceback.
    except (PlatformError, KernelChoiceError, ModelLoadError) as exc:
        raise SystemExit(f"error: {exc}") from None
    log(f"model loaded in {time.perf_counter() - start:.1f}s")
    return engine


TIMELINE_ARTIFACT = "timeline.json"
PROFILE_ARTIFACT = "torch_profile.json"


def freeze_heap() -> None:
    """Collect once, then move every live object (torch's, the model's, the engine's) out of the
    garbage collector's reach, as serving engines do after start-up (vLLM's engine core does the
    same). Without it a full collection walks that heap in the middle of a timed repeat: with the
    one-batch job on tiny-random-8l, the 4th repeat ran at about half the others' tok/s in 8 of 9
    runs, on the wall clock and on process time alike, and in none with the collector off."""
    gc.collect()
    gc.freeze()


def simulator(engine: Engine) -> SimDevice | None:
    """The engine's simulated device, when it runs on one (PARALLAX_DEVICE=sim:<profile>)."""
    return engine.streams if isinstance(engine.streams, SimDevice) else None


def hazard_metric(samples: list[float]) -> Metric:
    """Unordered cross-stream accesses the race detector found (per repeat); 0 expected."""
    return Metric("hazards", "count", "lower_is_better", samples)


def sim_context(device: SimDevice) -> dict[str, object]:
    """What a simulated run adds to the results document's context."""
    kinds: dict[str, int] = {}
    for h in device.hazards:
        key = f"{h.kind} on {h.buffer} ({h.first_stream} -> {h.second_stream})"
        kinds[key] = kinds.get(key, 0) + 1
    return {"sim_profile": device.profile.name, "sim_noise_cv": device.profile.noise_cv if device.noise else 0.0,
            "sim_stream_busy": {k: round(v, 4) for k, v in device.busy_fraction().items()},
            "sim_hazard_kinds": kinds}


def finish_sim(engine: Engine, args: argparse.Namespace) -> None:
    """Log the hazards and write the trace (--trace) of a simulated run."""
    device = simulator(engine)
    if device is None:
        if args.trace:
            log(f"--trace ignored: {engine.sync_policy.platform.name} is not a simulated platform")
        return
    for hazard in device.hazards[:3]:
        log("hazard: " + hazard.describe())
    trace = args.trace or artifact_path(TIMELINE_ARTIFACT)
    if trace:
        device.write_trace(trace)
        log(f"virtual timeline written to {trace} (open it in ui.perfetto.dev)")


def profile_gpu(engine: Engine, once: Callable[[], object]) -> str | None:
    """On a real GPU, under a runner (which sets $PARALLAX_OUTPUT_DIR): one more run under
    torch.profiler, its Chrome trace kept as an artifact (not measured: profiling slows it)."""
    if engine.device.type != "cuda" or simulator(engine) is not None:
        return None
    path = artifact_path(PROFILE_ARTIFACT)
    if path is None:
        return None
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        once()
    profiler.export_chrome_trace(path)
    log(f"torch.profiler trace written to {path} (open it in ui.perfetto.dev)")
    return path


def artifact_path(name: str) -> str | None:
    """Where a file goes for the runner to upload beside the results ($PARALLAX_OUTPUT_DIR/artifacts/),
    when a runner set that directory; None otherwise."""
    output = os.environ.get("PARALLAX_OUTPUT_DIR")
    if not output:
        return None
    folder = os.path.join(output, "artifacts")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, name)


BEST_OF_ENV = "PARALLAX_BEST_OF"


def positive_env_int(name: str, default: int, meaning: str) -> int:
    """$name as a positive integer (`default` when unset or empty); anything else ends the job with
    one line naming the variable and what it means."""
    raw = os.environ.get(name, "").strip() or str(default)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise SystemExit(f"error: {name}={raw!r} must be a positive integer ({meaning})")
    return value


def best_of() -> int:
    """Runs per reported sample on a real device ($PARALLAX_BEST_OF, default 1); see `best_run`."""
    return positive_env_int(BEST_OF_ENV, 1, "runs per reported sample")


def best_run(run: Callable[[], dict[str, float]], runs: int, key: str) -> dict[str, float]:
    """The values of the fastest of `runs` runs (the largest `key`), each pinned in turn to one of
    the CPUs this process may use, the affinity restored after. On a shared machine interference
    only ever slows a run, and a VM's CPUs slow down each on its own, for seconds at a time
    (docs/runner.md), so the fastest run across the CPUs is the engine's own speed."""
    cpus = sorted(os.sched_getaffinity(0)) if runs > 1 and hasattr(os, "sched_getaffinity") else []
    best: dict[str, float] | None = None
    try:
        for index in range(runs):
            if len(cpus) > 1:
                os.sched_setaffinity(0, {cpus[index % len(cpus)]})
            values = run()
            if best is None or values[key] > best[key]:
                best = values
    finally:
        if len(cpus) > 1:
            os.sched_setaffinity(0, set(cpus))
    assert best is not None
    return best


def repeats(default: int = 3) -> int:
    return positive_env_int("PARALLAX_REPEATS", default, "measured repeats")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0
