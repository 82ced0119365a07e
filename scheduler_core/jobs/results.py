"""The results document (contract `parallax.results/1`) written by the jobs, plus the environment and
commit they record. Written here, not imported from `runners`, because scheduler_core runs at old
commits without the runner package; tests check it against `runners.results.validate`."""
from __future__ import annotations

import json
import math
import os
import platform as host
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from scheduler_core import platform as platforms

SCHEMA = "parallax.results/1"
DIRECTIONS = ("higher_is_better", "lower_is_better")


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: str
    samples: list[float]

    def to_json(self) -> dict[str, Any]:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"metric {self.name}: unknown direction {self.direction!r}")
        if not self.samples:
            raise ValueError(f"metric {self.name}: no samples")
        values = [float(s) for s in self.samples]
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"metric {self.name}: non-finite sample in {values}")
        return {"name": self.name, "unit": self.unit, "direction": self.direction, "samples": values}


def detect_platform() -> str:
    if torch.cuda.is_available():
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    return "cpu"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return host.processor() or host.machine() or "cpu"


def environment() -> dict[str, Any]:
    """The platform as scheduler_core.platform sees it (``PARALLAX_DEVICE=sim:<profile>`` gives
    ``<vendor>-sim`` and ``simulated: true``); ``PARALLAX_PLATFORM`` may relabel a real platform."""
    found = platforms.detect_platform()
    env = found.environment()
    if not found.simulated:
        env["platform"] = os.environ.get("PARALLAX_PLATFORM") or env["platform"]
        if env["device"] == "cpu":
            env["device"] = _cpu_name()
    env["torch"] = torch.__version__
    return env


def current_commit() -> str | None:
    """git rev-parse HEAD of the working directory, else $PARALLAX_COMMIT, else None."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("PARALLAX_COMMIT") or None


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def build_document(suite: str, metrics: list[Metric], context: dict[str, Any],
                   items: tuple[str, list[int]] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": SCHEMA, "suite": suite, "metrics": [m.to_json() for m in metrics],
                           "context": _finite(context), "environment": environment()}
    if items is not None:
        name, correct = items
        doc["items"] = {"name": name, "correct": [int(bool(c)) for c in correct]}
    return doc


def write_document(doc: dict[str, Any], path: str | None = None) -> str | None:
    """Write to `path` or $PARALLAX_RESULTS (atomically); returns the path, or None when neither is set."""
    path = path or os.environ.get("PARALLAX_RESULTS")
    if not path:
        return None
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(doc, fh, allow_nan=False, indent=1)
    os.replace(tmp, path)
    return path
