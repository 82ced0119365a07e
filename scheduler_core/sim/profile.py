"""Simulator profiles: the timing numbers of one GPU platform, read from a data file in ``profiles/``.

Every number in a profile file carries its unit and a ``source`` line (a vendor datasheet, a public
benchmark, or a calibration against a reported regression), so a reader can check where the
simulated timeline comes from.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROFILE_DIR = Path(__file__).parent / "profiles"
FIELDS = ("matmul_tflops", "vector_tflops", "hbm_gbps", "kernel_launch_us", "pcie_gbps", "copy_latency_us",
          "event_record_us", "stream_wait_us", "cross_stream_source_us", "host_sync_us", "host_step_us", "noise_cv")


class ProfileError(ValueError):
    """A profile that does not exist or does not say everything the simulator needs."""


@dataclass(frozen=True)
class Profile:
    name: str
    vendor: str
    device: str
    matmul_tflops: float
    vector_tflops: float
    hbm_gbps: float
    kernel_launch_us: float
    pcie_gbps: float
    copy_latency_us: float
    event_record_us: float
    stream_wait_us: float
    cross_stream_source_us: float
    host_sync_us: float
    host_step_us: float
    noise_cv: float
    sources: dict[str, str]


def available() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.json"))


def load_profile(name: str) -> Profile:
    path = PROFILE_DIR / f"{name}.json"
    if not path.is_file():
        raise ProfileError(f"no simulator profile {name!r} (known: {', '.join(available())})")
    raw: dict[str, Any] = json.loads(path.read_text())
    numbers = raw.get("numbers", {})
    missing = [f for f in FIELDS if f not in numbers]
    if missing:
        raise ProfileError(f"profile {path.name} lacks {', '.join(missing)}")
    unsourced = [f for f in FIELDS if not str(numbers[f].get("source", "")).strip()]
    if unsourced:
        raise ProfileError(f"profile {path.name}: no source for {', '.join(unsourced)}")
    values = {f: float(numbers[f]["value"]) for f in FIELDS}
    bad = [f for f, v in values.items() if v < 0 or (f.endswith(("tflops", "gbps")) and v <= 0)]
    if bad:
        raise ProfileError(f"profile {path.name}: {', '.join(bad)} must be positive")
    return Profile(name=raw["name"], vendor=raw["vendor"], device=raw["device"], **values,
                   sources={f: numbers[f]["source"] for f in FIELDS})
