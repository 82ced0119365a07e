"""The GPU checks behind scripts/gpu_check.sh, one subcommand each; every one prints a JSON line.

    python scripts/gpu_check.py require-gpu     exit 2 with a message when no CUDA GPU is visible
    python scripts/gpu_check.py equivalence     normal / overlap / in-process / torch.distributed
                                                disaggregation on CUDA, 100 seeded requests
    python scripts/gpu_check.py sanitize        short overlap runs (plain and disaggregated) under
                                                the CUDA policy; run with TORCH_CUDA_SANITIZER=1
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402


def require_gpu() -> None:
    if not (torch.cuda.is_available() and torch.version.cuda):
        print(f"gpu_check: no CUDA GPU visible (torch {torch.__version__}, torch.version.cuda="
              f"{torch.version.cuda!r}, torch.cuda.is_available()={torch.cuda.is_available()}); "
              "nothing was checked", file=sys.stderr)
        sys.exit(2)
    print(json.dumps({"gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda,
                      "torch": torch.__version__}))


def equivalence() -> None:
    from scheduler_core.engine import Engine
    from scheduler_core.model.loader import load_model
    from tests.overlap.conftest import mixed_workload
    from tests.scheduler_core.conftest import same_or_near_tie

    model = load_model("tiny-random", torch.device("cuda"), torch.float32, 0)
    work = mixed_workload()
    settings = dict(model=model, device="cuda", max_running_requests=16, kv_tokens=350, chunked_prefill_size=64)
    report: dict[str, object] = {}
    ref = None
    for name, extra in [("normal", dict(overlap=False)), ("overlap", dict(overlap=True)),
                        ("inproc", dict(overlap=True, disaggregation="inproc")),
                        ("torch.distributed", dict(overlap=True, disaggregation="torch.distributed"))]:
        engine = Engine(**settings, **extra)
        engine.config.init_new_token_ratio = 0.05
        engine.scheduler.new_token_ratio = 0.05
        start = time.perf_counter()
        outs = engine.generate(work.prompts, work.params)
        seconds = time.perf_counter() - start
        if ref is None:
            ref = outs
        kinds = [same_or_near_tie(a, b) for a, b in zip(ref, outs)]  # raises on a real divergence
        report[name] = {"seconds": round(seconds, 2), "same": kinds.count("same"),
                        "near_tie": kinds.count("near_tie"),
                        "retractions": sum(o.retractions for o in outs),
                        "cached_tokens": sum(o.cached_tokens for o in outs)}
    print(json.dumps({"equivalence": report}))


def sanitize() -> None:
    import os

    from scheduler_core.device import CudaDevice
    from scheduler_core.engine import Engine
    from scheduler_core.model.loader import load_model
    from scheduler_core.platform import Platform, resolve_policy
    from tests.overlap.conftest import mixed_workload

    if os.environ.get("TORCH_CUDA_SANITIZER") != "1":
        sys.exit("sanitize must run with TORCH_CUDA_SANITIZER=1")
    policy = resolve_policy(Platform("cuda"), {})
    model = load_model("tiny-random", torch.device("cuda"), torch.float32, 0)
    work = mixed_workload(n=12, seed=5)
    report = {}
    for name, extra in [("overlap", {}), ("inproc", dict(disaggregation="inproc"))]:
        engine = Engine(model=model, device="cuda", max_running_requests=8, kv_tokens=1024, chunked_prefill_size=64,
                        overlap=True, sync_policy=policy, streams=CudaDevice(Platform("cuda")), **extra)
        outs = engine.generate(work.prompts, work.params)
        torch.cuda.synchronize()
        report[name] = sum(len(o.output_ids) for o in outs)
    print(json.dumps({"sanitizer": "no race reported", "policy": policy.as_context(), "tokens": report}))


if __name__ == "__main__":
    commands = {"require-gpu": require_gpu, "equivalence": equivalence, "sanitize": sanitize}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        sys.exit(f"usage: {sys.argv[0]} {{{'|'.join(commands)}}}")
    commands[sys.argv[1]]()
