"""Runners as threads for pull-request tests: each registers over the real runner protocol,
claims jobs of its platform, and completes them with samples drawn from a seeded noise model
per commit and platform (or fails them as a build failure)."""
from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from tests.support.service_api import claim, register

BASE_LEVEL = {"cuda": 1200.0, "rocm": 950.0, "cpu": 80.0, "cuda-sim": 500.0, "rocm-sim": 400.0}
QUESTIONS = 40


@dataclass
class NoiseModel:
    """Throughput per platform, changed by `effects[(sha, platform)]` (relative); each job draws
    a run level with `noise` relative run-to-run spread, and samples around it."""

    seed: int = 1
    noise: float = 0.01
    effects: dict[tuple[str, str], float] = field(default_factory=dict)
    broken: set[str] = field(default_factory=set)  # SHAs whose setup (build) fails
    drawn: int = 0

    def document(self, job: dict[str, Any], platform: str) -> dict[str, Any] | None:
        sha, suite = job["commit"], job["suite"]
        if sha in self.broken:
            return None
        rng = random.Random(f"{self.seed}/{sha}/{platform}/{job['id']}")
        self.drawn += 1
        environment = {"platform": platform, "device": f"sim {platform}", "simulated": False}
        if suite == "gsm8k":
            # Greedy decoding: the same answers for the same code, so only a code change moves them.
            answers = random.Random(f"{self.seed}/answers").choices([0, 1], k=QUESTIONS)
            return {"schema": "parallax.results/1", "suite": suite,
                    "metrics": [{"name": "accuracy", "unit": "", "direction": "higher_is_better",
                                 "samples": [sum(answers) / QUESTIONS]}],
                    "items": {"name": "gsm8k", "correct": answers}, "context": {}, "environment": environment}
        level = BASE_LEVEL[platform] * (1.0 + self.effects.get((sha, platform), 0.0))
        run_level = level * (1.0 + rng.gauss(0.0, self.noise))
        samples = [run_level * (1.0 + rng.gauss(0.0, self.noise / 4)) for _ in range(3)]
        return {"schema": "parallax.results/1", "suite": suite,
                "metrics": [{"name": "output_throughput", "unit": "tok/s", "direction": "higher_is_better",
                             "samples": samples}],
                "context": {"batch_size": 32}, "environment": environment}


class SimRunner(threading.Thread):
    """One runner machine of `platform`, in a thread, talking HTTP through the app's test client."""

    def __init__(self, app: Any, platform: str, name: str, model: NoiseModel) -> None:
        super().__init__(daemon=True, name=f"sim-runner-{name}")
        self.app, self.platform, self.runner_name, self.model = app, platform, name, model
        self.stop = threading.Event()
        self.done: list[int] = []
        self.errors: list[str] = []
        self.headers: dict[str, str] = {}

    def run(self) -> None:
        client = self.app.test_client()
        self.headers = register(client, self.app, self.platform, name=self.runner_name)
        while not self.stop.is_set():
            try:
                response = claim(client, self.headers, wait_s=0.5)
                if response.status_code == 204:
                    continue
                job = response.get_json()["job"]
                document = self.model.document(job, self.platform)
                if document is None:
                    answer = client.post(f"/api/v1/jobs/{job['id']}/fail", headers=self.headers,
                                         json={"reason": "setup failed: compile error", "retryable": False,
                                               "kind": "build"})
                else:
                    answer = client.post(f"/api/v1/jobs/{job['id']}/complete", headers=self.headers, json=document)
                if answer.status_code >= 400:
                    self.errors.append(f"job {job['id']}: {answer.status_code} {answer.get_data(as_text=True)[:300]}")
                self.done.append(job["id"])
            except Exception as exc:  # reported by the test, which fails on any
                self.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.2)


class Fleet:
    """One runner per platform (or several), started and stopped together."""

    def __init__(self, app: Any, model: NoiseModel, platforms: tuple[str, ...] = ("cuda", "rocm", "cpu")) -> None:
        self.runners = [SimRunner(app, p, f"{p}-{i}", model) for i, p in enumerate(platforms)]

    def __enter__(self) -> "Fleet":
        for runner in self.runners:
            runner.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for runner in self.runners:
            runner.stop.set()
        for runner in self.runners:
            runner.join(30)
        errors = [e for r in self.runners for e in r.errors]
        assert not errors, errors
