"""Seeded noise models of a commit range for bisect tests: a level per commit (steps at the
culprits), normal noise relative to the level, optional commits that cannot be built."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class NoisyHistory:
    size: int                                  # commits after good: indices 0 (good) .. size (bad)
    steps: dict[int, float]                    # culprit index -> relative change from there on
    noise: float = 0.03
    samples: int = 5
    seed: int = 0
    broken: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.calls: dict[int, int] = {}

    def level(self, index: int) -> float:
        value = 100.0
        for culprit, change in sorted(self.steps.items()):
            if index >= culprit:
                value *= 1.0 + change
        return value

    def measure(self, index: int) -> list[float] | None:
        if index in self.broken:
            return None
        # One stream per (seed, commit, repeat): the same samples whatever order runners ask in.
        repeat = self.calls[index] = self.calls.get(index, -1) + 1
        rng = np.random.default_rng([self.seed, index, repeat])
        level = self.level(index)
        return [float(x) for x in rng.normal(level, self.noise * level, self.samples)]
