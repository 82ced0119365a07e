"""Seeded multi-platform histories with a known truth, for classification tests."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.detection.detector import PlatformSeries

SCENARIOS = ("one", "all", "none", "missing")
EXPECTED = {"one": "platform_specific", "all": "common", "none": None, "missing": "inconclusive"}


@dataclass
class History:
    scenario: str
    change_at: int
    series: dict[str, PlatformSeries]   # the first platform is the one that changes


def make_history(rng: np.random.Generator, scenario: str, platforms: int, length: int = 60,
                 samples: int = 3) -> History:
    names = ["rocm", "cuda", "cpu"][:platforms]
    change_at = int(rng.integers(30, 46))
    magnitude = float(rng.uniform(0.08, 0.20) * rng.choice([-1, 1]))
    series: dict[str, PlatformSeries] = {}
    for i, name in enumerate(names):
        cv = float(rng.uniform(0.005, 0.02))
        level = np.full(length, float(rng.uniform(200, 2000)))
        shifted = (scenario in ("one", "missing") and i == 0) or scenario == "all"
        if shifted:
            level[change_at:] *= 1 + magnitude * (float(rng.uniform(0.8, 1.2)) if i else 1.0)
        run = level * (1 + cv * rng.standard_normal(length))
        points = run[:, None] * (1 + cv / 3 * rng.standard_normal((length, samples)))
        positions = list(range(length))
        if scenario == "missing" and i == platforms - 1:
            keep = change_at - 5          # this platform's runners are behind: nothing after
            points, positions = points[:keep], positions[:keep]
        series[name] = PlatformSeries(points=points.tolist(), positions=positions)
    return History(scenario, change_at, series)
