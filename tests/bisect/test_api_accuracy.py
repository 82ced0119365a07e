"""The bisect accuracy check through the real API: the first 25 of test_search.py's 100 seeded
trials (32 commits, culprit 1 + (seed * 37) % 32, 3 % noise, an 8 % effect, 3 runners) started
with `POST /api/v1/bisects`, measured by runner threads speaking the runner protocol
(`runners.client.Client`) with samples from the seeded noise model, driven by the `bisect` duty
and read back with `GET /api/v1/bisects/<id>`.

The noise model draws one seeded stream per (seed, commit, repeat), so a trial through the API
sees exactly the samples `search.run` sees for the same seed: each trial must end as the pure
search does, with the same culprit, the same commits measured the same number of times and the
same rounds (plus the ends' round, which `search.run` takes as given). The pure search's accuracy
over all 100 seeds is test_search.py's; this test checks that the service reproduces it trial by
trial. The 25 seeds put the culprit at 25 of the 32 positions, both ends included.

The trials share one generated repository and all run at once, each with its own platform
(`p00`..`p24`), its own suite on that platform only (so no confirmation stage on other platforms,
as in the pure search) and its own three runners. Each platform also gets routine jobs of a
`background` suite queued before its bisect: bisect jobs must still be claimed first.
"""
from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from sqlalchemy import select

from app.bisect import service
from app.bisect.search import Trace
from app.bisect.search import run as search
from app.core.config import Settings, parse_catalogue
from app.core.duties import Duty
from app.core.duties import start as start_duties
from app.core.models import Commit, Job, JobReason, Repository, Runner
from runners.client import Client, ServiceError
from tests.bisect.noise import NoisyHistory
from tests.bisect.upstream import Upstream
from tests.support.live_server import LiveServer
from tests.support.service_api import registration_token
from tests.support.settings import ADMIN_TOKEN

TRIALS, SIZE, RUNNERS = 25, 32, 3
NOISE, EFFECT = 0.03, 0.08
CONCURRENT = 25            # trials at once (75 runner threads)
ROUTINE = 3                # background routine jobs per platform, queued before the bisect
CLAIM_WAIT_S = 5.0         # long-poll: a queued job wakes its platform's waiters at once
POLL_S = 2.0               # GET /api/v1/bisects/<id> until the bisect is over (each read costs the service)
DUTY = Duty("bisect", service.run_duty, interval_s=0.25, lease_s=120.0)  # a round is queued soon after the last lands
METRIC, REPOSITORY, BACKGROUND = "output_throughput", "demo/engine", "background"
PLATFORMS = [f"p{seed:02d}" for seed in range(TRIALS)]
HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def culprit_of(seed: int) -> int:
    return 1 + (seed * 37) % SIZE


def history_of(seed: int) -> NoisyHistory:
    """The trial's seeded noise model: the runner threads and the pure search draw from it alike."""
    return NoisyHistory(SIZE, steps={culprit_of(seed): -EFFECT}, noise=NOISE, seed=seed)


def suite_of(platform: str) -> str:
    return f"trial-{platform}"


@pytest.fixture
def settings(postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    # PostgreSQL: claims, uploads and reads of 60 runners and 20 pollers at once would take
    # turns on SQLite's single write lock. The request gates bound the connections each class
    # can hold: small ones keep this test's pool small (the server's connections are shared).
    for name, limit in (("RUNNER", 4), ("DASHBOARD", 3), ("WEBHOOK", 1), ("CLAIM", 2)):
        monkeypatch.setenv(f"PARALLAX_{name}_CONCURRENCY", str(limit))
    catalogue = parse_catalogue({
        "repositories": [{"name": REPOSITORY, "url": "https://github.com/demo/engine.git"}],
        "platforms": PLATFORMS,
        "suites": [*({"name": suite_of(p), "command": ["true"], "platforms": [p], "repeats": 5} for p in PLATFORMS),
                   {"name": BACKGROUND, "command": ["true"], "platforms": PLATFORMS, "repeats": 1}],
    })
    return Settings(database_url=postgres_url, admin_token=ADMIN_TOKEN, testing=True,
                    data_dir=str(tmp_path / "data"), **catalogue)


def results(suite: str, platform: str, samples: list[float]) -> bytes:
    return json.dumps({
        "schema": "parallax.results/1", "suite": suite,
        "metrics": [{"name": METRIC, "unit": "tok/s", "direction": "higher_is_better", "samples": samples}],
        "context": {"model": "test"},
        "environment": {"platform": platform, "device": f"test {platform}", "simulated": False},
    }).encode()


def claim(client: Client) -> dict[str, Any] | None:
    """A long-poll for the runner's next job, or None when none came. A claim whose retries ran out
    on a busy service (503: its claim gate queued beyond its wait, all of the 60 s budget; seen on a
    loaded 2-core machine) is None too: the runner agent claims again after such an outage
    (runners/agent.py), so a runner thread does as well. An answer (4xx) is still raised."""
    try:
        return client.claim(wait_s=CLAIM_WAIT_S, budget_s=60)
    except ServiceError as exc:
        if exc.status is not None:
            raise
        return None


@dataclass
class Trial:
    """One seeded bisect: its platform's three runner threads and what the API said at the end."""

    seed: int
    url: str
    registration: str
    shas: list[str]
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def platform(self) -> str:
        return PLATFORMS[self.seed]

    def run(self, timeout_s: float = 240) -> "Trial":
        history = history_of(self.seed)
        clients = []
        for n in range(RUNNERS):
            _, token = Client(self.url).register(self.registration, f"{self.platform}-{n}",
                                                 {"platform": self.platform}, {})
            client = Client(self.url, token)
            # A first call makes the runner "seen", so the search counts it among the platform's R.
            assert client.claim(wait_s=0, budget_s=30) is None
            clients.append(client)
        for sha in self.shas[1:1 + ROUTINE]:
            self.post("/api/v1/jobs", {"repository": REPOSITORY, "commit": sha, "suite": BACKGROUND,
                                       "platform": self.platform})
        bisect_id = self.post("/api/v1/bisects", {
            "repository": REPOSITORY, "suite": suite_of(self.platform), "metric": METRIC,
            "platform": self.platform, "good": self.shas[0], "bad": self.shas[-1], "effect": EFFECT})["id"]
        # The first round (good and bad) is queued after the routine jobs, and claimed before them.
        self.wait(lambda: self.get(bisect_id).get("rounds"), timeout_s)
        for client in clients[:2]:
            job = self.claim_first(client, timeout_s)
            assert job["suite"] == suite_of(self.platform), (self.platform, job)
            self.complete(client, job, history)
        for client in clients:
            thread = threading.Thread(target=self.work, args=(client, history), daemon=True)
            thread.start()
            self.threads.append(thread)
        self.result = self.wait(lambda: (body := self.get(bisect_id)).get("state", "running")
                                not in ("pending", "running") and body, timeout_s)
        self.stop.set()
        return self

    def claim_first(self, client: Client, timeout_s: float) -> dict[str, Any]:
        """The runner's next job, claimed as the agent does: a long-poll that comes back empty
        (204) is asked again. On a loaded machine a 5 s long-poll can end while it still waits for
        its turn through the process's claim gate, with the job queued; that is not a fault."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            job = claim(client)
            if job is not None:
                return job
        raise AssertionError(f"{self.platform}: no job claimed in {timeout_s:g} s")

    def work(self, client: Client, history: NoisyHistory) -> None:
        try:
            while not self.stop.is_set():
                job = claim(client)
                if job is None:
                    continue
                self.complete(client, job, history)
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.errors.append(exc)

    def complete(self, client: Client, job: dict[str, Any], history: NoisyHistory) -> None:
        # Routine jobs must not draw from the model: the bisect sees the pure search's samples.
        samples = [1.0] if job["suite"] == BACKGROUND else history.measure(self.shas.index(job["commit"]))
        assert samples is not None
        client.complete(job["id"], job["attempt"], results(job["suite"], self.platform, samples), budget_s=60)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = requests.post(f"{self.url}{path}", json=body, headers=HEADERS, timeout=60)
        assert response.status_code in (201, 202), response.text  # a bisect is 202: queued, checked by the duty
        return dict(response.json())

    def get(self, bisect_id: int) -> dict[str, Any]:
        """The bisect, or {} when the service answers busy (503: retry later, as a client would)."""
        response = requests.get(f"{self.url}/api/v1/bisects/{bisect_id}", timeout=60)
        if response.status_code == 503:
            return {}
        assert response.status_code == 200, response.text
        return dict(response.json())

    def wait(self, predicate: Any, timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.errors:
                raise AssertionError(f"{self.platform}: a runner thread failed: {self.errors[0]!r}")
            value = predicate()
            if value:
                return value
            time.sleep(POLL_S)
        raise AssertionError(f"{self.platform}: timed out")

    @property
    def right(self) -> bool:
        culprit = self.result.get("culprit") or {}
        return (self.result.get("state") == "done" and self.result.get("monotonic") is True
                and culprit.get("sha") == self.shas[culprit_of(self.seed)])


def run_trials(app: Flask, shas: list[str]) -> list[Trial]:
    db = app.extensions["parallax.db"]
    stop = threading.Event()
    with LiveServer(app) as server:
        duty = start_duties(db, [DUTY], app.extensions["parallax.settings"], stop, tick_s=0.1)
        registration = registration_token(app)
        trials = [Trial(seed, server.url, registration, shas) for seed in range(TRIALS)]
        try:
            with ThreadPoolExecutor(CONCURRENT) as pool:
                finished = list(pool.map(Trial.run, trials))
        finally:
            stop.set()
            for trial in trials:
                trial.stop.set()
            for trial in trials:
                for thread in trial.threads:
                    thread.join(10)
            duty.join(30)
    return finished


def pure_search(seed: int) -> tuple[Trace, dict[int, int]]:
    """`search.run` on the trial's seed: its trace and how many jobs it measured at each commit."""
    history = history_of(seed)
    trace = search(SIZE, history.measure, relative_effect=EFFECT, slots=RUNNERS)
    return trace, {index: calls + 1 for index, calls in history.calls.items()}


@pytest.mark.slow
def test_25_bisects_at_once_through_the_api_end_exactly_as_the_pure_search_with_3_percent_noise(
        app: Flask, tmp_path: Path) -> None:
    upstream = Upstream(tmp_path / "upstream")
    shas = upstream.linear(SIZE + 1)
    db = app.extensions["parallax.db"]
    with db.session() as session:
        session.scalar(select(Repository).where(Repository.name == REPOSITORY)).url = str(upstream.path)
    started = time.monotonic()
    trials = run_trials(app, shas)
    wall = time.monotonic() - started
    with db.session() as session:
        runner_platform = dict(session.execute(select(Runner.id, Runner.platform)).all())
        jobs = list(session.scalars(select(Job)))
        sha_of = dict(session.execute(select(Commit.id, Commit.sha)).all())
    db.engine.dispose()  # the server's connections are shared: give them back now
    assert not [e for t in trials for e in t.errors]

    right = [t for t in trials if t.right]
    rounds = sum(len(t.result["rounds"]) for t in trials) / len(trials)
    spent = sum(t.result["runner_jobs"] for t in trials) / len(trials)
    print(f"\nthrough the API: {len(right)}/{TRIALS} right, {rounds:.2f} rounds and {spent:.2f} runner jobs "
          f"per bisect (good and bad included), {wall:.0f} s")
    index = {sha: i for i, sha in enumerate(shas)}
    routine = [j for j in jobs if j.bisect_id is None]
    assert len(routine) == TRIALS * ROUTINE and all(j.reason != JobReason.bisect for j in routine)
    assert max(j.priority for j in routine) < service.BISECT_PRIORITY
    for trial in trials:
        ours = [j for j in jobs if j.bisect_id == trial.result["id"]]
        sizes = [len(r["commits"]) for r in trial.result["rounds"]]
        # Exactly the pure search on the trial's seed: its culprit, its jobs per commit, its rounds.
        trace, measured = pure_search(trial.seed)
        expected = trace.decision.changes[0].culprit if trace.decision.outcome == "culprit" else None
        culprit = (trial.result.get("culprit") or {}).get("sha")
        assert culprit == (shas[expected] if expected is not None else None), (trial.platform, trial.result["reason"])
        assert Counter(index[sha_of[job.commit_id]] for job in ours) == measured, trial.platform
        assert sizes == [2, *trace.round_sizes], (trial.platform, sizes, trace.round_sizes)
        # With 25 bisects at once: every job ran at bisect priority on its own platform's runners.
        assert len(ours) == trial.result["runner_jobs"]
        assert all(j.priority == service.BISECT_PRIORITY and j.reason == JobReason.bisect for j in ours)
        # Every round ran on the trial's own runners and used all three when it had a range to split.
        assert {runner_platform[j.runner_id] for j in ours} == {trial.platform}
        assert max(sizes) == RUNNERS and all(size <= RUNNERS for size in sizes), (trial.platform, sizes)
    assert len(right) >= 0.95 * TRIALS
