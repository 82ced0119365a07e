"""Detection quality: this detector next to ruptures PELT, ruptures BinSeg and Apache Otava.

    .venv/bin/python bench/detection_quality.py [--quick] [--no-otava] [--sweep]

Labelled data: 42 real histories of public projects annotated by one documented rule
(bench/data/real/, scored separately on its tuning part and its held-back third), the
`otava-test-data` generators (run in the peer venv) and this file's seeded
generator of performance histories (steps, regression then fix, single outliers, banding,
noise from 0.5 % to 5 % CV, five raw samples per commit). A predicted change point counts when
it lies within 5 points of a true one, each true point matched at most once; the covering
metric is van den Burg & Williams' segmentation covering. Also measured: the delay before a 5 %
shift at 2 % CV is found, false alerts per 1,000 commits when the service re-scans after every
result, young series (whether a 10-50 % step in a 14-commit series is reported where it landed,
and false alerts on 20-commit null series), and the latency of incremental detection after one
new result on a 2,000-point series.

Apache Otava pins numpy 2.2 and pulls heavy clients, so it never enters the project: it is
installed into var/bench-peers/otava (git-ignored) and driven over JSON by bench/otava_peer.py.
Results: a table on stdout and JSON in bench/results/detection_quality.json.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import ruptures as rpt
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.detection.detector import (  # noqa: E402
    DEFAULT_CONFIG,
    DetectorConfig,
    _CumsumL2,
    analyse_recent,
    detect,
    detect_recent,
    find_change_points,
)

PEER_VENV = ROOT / "var" / "bench-peers" / "otava"
MARGIN = 5
CVS = [0.005, 0.01, 0.02, 0.03, 0.05]


# ---------------------------------------------------------------- data

def perf_history(rng: np.random.Generator, pattern: str, cv: float, length: int, samples: int = 5) -> dict:
    """One labelled history: per-commit levels, run-to-run noise `cv`, and `samples` raw
    repetitions per commit with a third of that spread inside one run."""
    level = np.full(length, 1000.0)
    truth: list[int] = []

    def magnitude() -> float:
        return float(rng.uniform(max(0.03, 2.5 * cv), 0.20) * rng.choice([-1, 1]))

    if pattern == "steps":
        count = int(rng.integers(1, 4))
        while len(truth) < count:
            k = int(rng.integers(15, length - 15))
            if all(abs(k - t) >= 15 for t in truth):
                truth.append(k)
        truth.sort()
        for k in truth:
            level[k:] *= 1 + magnitude()
    elif pattern == "regression_fix":
        start = int(rng.integers(20, length - 60))
        duration = int(rng.integers(5, 40))
        level[start:start + duration] *= 1 - abs(magnitude())
        truth = [start, start + duration]
    elif pattern == "outliers":
        for k in rng.choice(np.arange(5, length - 5), size=int(rng.integers(1, 5)), replace=False):
            level[int(k)] *= 1 + float(rng.uniform(0.2, 0.5)) * float(rng.choice([-1, 1]))
    elif pattern == "banding":
        gap = float(rng.uniform(0.01, 0.03))
        level *= np.where(rng.random(length) < 0.5, 1.0, 1.0 + gap)
    elif pattern != "noise":
        raise ValueError(pattern)
    run_level = level * (1 + cv * rng.standard_normal(length))
    raw = run_level[:, None] * (1 + (cv / 3) * rng.standard_normal((length, samples)))
    return {"source": "parallax-generator", "pattern": pattern, "cv": cv, "truth": truth,
            "samples": raw.tolist(), "values": np.median(raw, axis=1).tolist(),
            "name": f"{pattern}-cv{cv}"}


def own_dataset(seed: int, reps: int, length: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [perf_history(rng, pattern, cv, length)
            for cv in CVS for pattern in ("steps", "regression_fix", "outliers", "banding", "noise")
            for _ in range(reps)]


REAL_DIR = ROOT / "bench" / "data" / "real"
REAL_PARTS = ("tuning", "held_back")


def real_corpus(part: str) -> list[dict]:
    """The annotated real histories of one part of bench/data/real/split.json ("tuning" or
    "held_back"); see bench/data/real/README.md for the sources and the annotation rule."""
    if part not in REAL_PARTS:
        raise ValueError(f"real corpus part must be one of {REAL_PARTS}, not {part!r}")
    split = json.loads((REAL_DIR / "split.json").read_text())
    out = []
    for name in split[part]:
        series = json.loads((REAL_DIR / f"{name}.json").read_text())
        if not series.get("annotated"):
            raise ValueError(f"{name}: not annotated")
        out.append({"source": series["source"]["repository"], "name": name, "pattern": "real",
                    "values": series["values"], "truth": sorted(c["index"] for c in series["change_points"])})
    return out


def no_change(values: Sequence[float]) -> list[int]:
    """The trivial answer a detector has to beat: nothing ever changed."""
    return []


def peer_python() -> tuple[Path | None, str]:
    """The peer venv's interpreter, installing it on first use; (None, reason) when impossible."""
    python = PEER_VENV / "bin" / "python"
    check = [str(python), "-c", "import otava.analysis, otava_test_data"]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python, "ready"
    try:
        PEER_VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["python3", "-m", "venv", str(PEER_VENV)], check=True, capture_output=True, timeout=300)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "apache-otava==0.8.0", "otava-test-data"],
                       check=True, capture_output=True, timeout=1200)
        subprocess.run(check, check=True, capture_output=True)
    except (subprocess.SubprocessError, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        return None, f"could not install apache-otava into {PEER_VENV}: {exc} {detail.decode()[-300:]}"
    return python, "installed"


def call_peer(python: Path, request: dict, timeout: float = 1800) -> dict:
    done = subprocess.run([str(python), str(ROOT / "bench" / "otava_peer.py")], input=json.dumps(request),
                          capture_output=True, text=True, timeout=timeout, check=True)
    return json.loads(done.stdout)


# ---------------------------------------------------------------- methods

def _mad_sigma(values: np.ndarray) -> float:
    """The textbook robust noise scale for change-point penalties: MAD(diff(x)) / sqrt(2)."""
    diffs = np.diff(values)
    return 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2.0)


def _bic_penalty(values: np.ndarray) -> float:
    # BIC for Gaussian mean shifts with a known variance: each change adds a mean and a
    # location, so 2 log n in units of sigma^2. Sigma is the MAD of differences: a plain
    # standard deviation would include the steps themselves.
    sigma = max(_mad_sigma(values), 1e-9 * max(1.0, float(np.abs(values).mean())))
    return 2.0 * sigma * sigma * math.log(len(values))


def pelt(values: Sequence[float]) -> list[int]:
    x = np.asarray(values, dtype=float)
    if len(x) < 4:
        return []
    return rpt.Pelt(custom_cost=_CumsumL2(), min_size=2, jump=1).fit(x).predict(pen=_bic_penalty(x))[:-1]


def binseg(values: Sequence[float]) -> list[int]:
    x = np.asarray(values, dtype=float)
    if len(x) < 4:
        return []
    return rpt.Binseg(custom_cost=_CumsumL2(), min_size=2, jump=1).fit(x).predict(pen=_bic_penalty(x))[:-1]


# ---------------------------------------------------------------- scoring

def match(predicted: Sequence[int], truth: Sequence[int], margin: int = MARGIN) -> int:
    """True positives: closest pairs first, each true and each predicted point used once."""
    pairs = sorted((abs(p - t), i, j) for i, p in enumerate(predicted) for j, t in enumerate(truth)
                   if abs(p - t) <= margin)
    used_p: set[int] = set()
    used_t: set[int] = set()
    for _, i, j in pairs:
        if i not in used_p and j not in used_t:
            used_p.add(i)
            used_t.add(j)
    return len(used_t)


def covering(predicted: Sequence[int], truth: Sequence[int], n: int) -> float:
    def segments(cps: Sequence[int]) -> list[tuple[int, int]]:
        bounds = [0, *sorted(c for c in cps if 0 < c < n), n]
        return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]

    def jaccard(a: tuple[int, int], b: tuple[int, int]) -> float:
        inter = max(0, min(a[1], b[1]) - max(a[0], b[0]))
        return inter / (max(a[1], b[1]) - min(a[0], b[0]))

    pred = segments(predicted)
    return sum((b - a) * max(jaccard((a, b), p) for p in pred) for a, b in segments(truth)) / n


def score(results: list[tuple[list[int], list[int], int]]) -> dict:
    tp = fp = fn = 0
    covers = []
    for predicted, truth, n in results:
        hits = match(predicted, truth)
        tp += hits
        fp += len(predicted) - hits
        fn += len(truth) - hits
        covers.append(covering(predicted, truth, n))
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "covering": float(np.mean(covers)),
            "tp": tp, "fp": fp, "fn": fn, "series": len(results)}


def run_method(method: Callable[[Sequence[float]], list[int]], dataset: list[dict],
               key: str = "values") -> tuple[list[list[int]], float]:
    start = time.perf_counter()
    predictions = [sorted(int(c) for c in method(series[key])) for series in dataset]
    return predictions, time.perf_counter() - start


# ---------------------------------------------------------------- targets

DELAY_VARIANTS = (("one value per commit, 2 % CV", 1, 0.02, 0.0),
                  ("5 samples/commit, 2 % CV run-to-run + 0.7 % within a run", 5, 0.02, 0.02 / 3),
                  ("5 iid samples/commit, 2 % CV per sample", 5, 0.0, 0.02))
SHIFT = 0.05
LANDING = 250     # the shift lands after a history longer than the incremental window


def shifted_history(rng: np.random.Generator, per_commit: int, run_cv: float, sample_cv: float, n: int,
                    shift: float) -> list[list[float]]:
    level = np.full(n, 1000.0)
    level[LANDING:] *= 1 + shift
    run = level * (1 + run_cv * rng.standard_normal(n))
    return (run[:, None] * (1 + sample_cv * rng.standard_normal((n, per_commit)))).tolist()


def detection_delay(seed: int, trials: int, config: DetectorConfig = DEFAULT_CONFIG,
                    variants: Sequence[tuple] = DELAY_VARIANTS, oracle: bool = True) -> dict:
    """A 5 % shift (either sign) lands at commit 250; after every new commit the service's
    incremental detection re-examines its recent window. Delay = commits measured at the new
    level (the landing commit counts as 1) when a change within 3 points of the true one is
    first reported; "within 3 commits of landing" is read both ways: delay <= 3 (landing and the
    next two) and delay <= 4 (landing and the next three)."""
    out = {}
    for label, per_commit, run_cv, sample_cv in variants:
        rng = np.random.default_rng(seed)
        delays = []
        for _ in range(trials):
            points = shifted_history(rng, per_commit, run_cv, sample_cv, LANDING + 20,
                                     SHIFT * float(rng.choice([-1, 1])))
            found = math.inf
            for end in range(LANDING + 1, LANDING + 21):
                if any(abs(c.index - LANDING) <= 3 for c in detect_recent(points[:end], None, config)):
                    found = end - LANDING
                    break
            delays.append(found)
        out[label] = {"trials": trials, **delay_summary(delays)}
        if oracle:
            out[label]["oracle_cusum"] = oracle_cusum(np.random.default_rng(seed + 1), per_commit, run_cv,
                                                      sample_cv, trials=max(trials, 2000))
    return out


YOUNG_LENGTH, YOUNG_LANDING = 14, 7
YOUNG_SHIFTS = (-0.5, -0.2, -0.1, 0.1, 0.2)


def young_steps(seed: int, trials: int, config: DetectorConfig = DEFAULT_CONFIG) -> dict:
    """A young series (14 commits, the shape of the end-to-end adapter test): a step of 10 % to
    50 % lands at commit 7, 3 samples per commit with 1 % uniform jitter each. The whole series
    is scanned once; a trial counts when exactly the landing commit is reported. These steps
    are 20 to 100 noise sigmas: every miss is the detector's fault, not the data's."""
    rng = np.random.default_rng(seed)
    out = {}
    for shift in YOUNG_SHIFTS:
        level = np.full(YOUNG_LENGTH, 75.0)
        level[YOUNG_LANDING:] *= 1 + shift
        misses = 0
        for _ in range(trials):
            points = (level[:, None] * rng.uniform(0.99, 1.01, (YOUNG_LENGTH, 3))).tolist()
            misses += [c.index for c in detect(points, None, config)] != [YOUNG_LANDING]
        out[f"{shift:+.0%}"] = {"trials": trials, "misses": misses}
    return out


YOUNG_NULL_LENGTH = 20


def young_false_alerts(seed: int, series: int, config: DetectorConfig = DEFAULT_CONFIG) -> dict:
    """Null series of 20 commits (3 % run-to-run noise, 3 samples a commit with 1 % more), grown
    one commit at a time and counted by `alerts_while_growing`. Noise estimated from a dozen
    differences is itself noisy; this is where that shows."""
    rng = np.random.default_rng(seed)
    alerts = 0
    for _ in range(series):
        level = 1000.0 * (1 + 0.03 * rng.standard_normal(YOUNG_NULL_LENGTH))
        points = (level[:, None] * (1 + 0.01 * rng.standard_normal((YOUNG_NULL_LENGTH, 3)))).tolist()
        alerts += alerts_while_growing(points, config)[0]
    commits = series * YOUNG_NULL_LENGTH
    return {"series": series, "commits": commits, "alerts": alerts, "per_1000": 1000.0 * alerts / commits,
            "ci95_per_1000": [1000.0 * x / commits for x in poisson_interval(alerts)]}


def print_young(young: dict) -> None:
    print(f"a step landing at commit {YOUNG_LANDING} of a {YOUNG_LENGTH}-commit series, 3 samples of 1 % jitter "
          "(reported exactly there / trials):")
    print("  " + "   ".join(f"{shift}: {row['trials'] - row['misses']}/{row['trials']}"
                            for shift, row in young["steps"].items()))
    null = young["false_alerts"]
    print(f"false alerts on {null['series']} null series of {YOUNG_NULL_LENGTH} commits, scanned after each: "
          f"{null['per_1000']:.2f} per 1,000 commits ({null['alerts']} over {null['commits']}; 95 % interval "
          f"{null['ci95_per_1000'][0]:.2f}-{null['ci95_per_1000'][1]:.2f})")


def young_series(seed: int, quick: bool) -> dict:
    return {"steps": young_steps(seed, 400 if quick else 4000),
            "false_alerts": young_false_alerts(seed, 200 if quick else 2000)}


def delay_summary(delays: Sequence[float]) -> dict:
    finite = [d for d in delays if math.isfinite(d)]
    return {"found_within_3": sum(d <= 3 for d in delays) / len(delays),
            "found_within_4": sum(d <= 4 for d in delays) / len(delays),
            "found_within_5": sum(d <= 5 for d in delays) / len(delays),
            "found_by_20": len(finite) / len(delays),
            "median_delay": float(np.median(finite)) if finite else None}


def oracle_cusum(rng: np.random.Generator, per_commit: int, run_cv: float, sample_cv: float, trials: int,
                 null_commits: int = 200_000) -> dict:
    """The reference no detector can beat by much: a two-sided CUSUM that is *told* the old
    level, the noise of a commit's median and the size of the shift (Lorden-optimal for exactly
    that shift), with its threshold set to the smallest one giving at most 1 false alert per
    1,000 commits on null data. It alarms from the first commit on, without a minimum segment.
    Written out here because it is a yardstick, not a detector the service could use."""
    null = shifted_history(rng, per_commit, run_cv, sample_cv, null_commits, 0.0)
    medians = np.median(np.asarray(null), axis=1)
    sigma = float(np.std(medians))
    z_null = (medians - 1000.0) / sigma
    k = 0.5 * SHIFT * 1000.0 / sigma

    def alarms(z: np.ndarray, h: float) -> list[int]:
        up = down = 0.0
        hits = []
        for t, value in enumerate(z):
            up, down = max(0.0, up + value - k), max(0.0, down - value - k)
            if up > h or down > h:
                hits.append(t)
                up = down = 0.0
        return hits

    h = next(h for h in np.arange(0.5, 8.0, 0.1) if len(alarms(z_null, float(h))) <= null_commits / 1000)
    delays = []
    for _ in range(trials):
        sign = float(rng.choice([-1, 1]))
        points = shifted_history(rng, per_commit, run_cv, sample_cv, LANDING + 20, SHIFT * sign)
        z = (np.median(np.asarray(points), axis=1) - 1000.0) / sigma
        up = down = 0.0
        found = math.inf
        for t, value in enumerate(z):
            up, down = max(0.0, up + value - k), max(0.0, down - value - k)
            if t >= LANDING and (up if sign > 0 else down) > h:
                found = t - LANDING + 1
                break
            if up > h or down > h:
                up = down = 0.0
        delays.append(found)
    return {"threshold_h": round(float(h), 2), "k": k, "commit_sigma_relative": sigma / 1000.0,
            "false_alerts_per_1000": 1000 * len(alarms(z_null, float(h))) / null_commits, **delay_summary(delays)}


def alerts_while_growing(points: Sequence[Sequence[float]], config: DetectorConfig = DEFAULT_CONFIG) -> tuple[int, int]:
    """A history grown one commit at a time, scanned by incremental detection after each: the
    alerts it would raise (changes within the minimum segment of one already reported count once,
    as the service merges them; drifts whose spans overlap count once, as the service widens that
    alert) and, apart, the noise-changed alerts (never regressions)."""
    reported: list[int] = []
    drifts: list[tuple[int, int]] = []
    noises: list[int] = []
    for end in range(config.min_points, len(points) + 1):
        found = analyse_recent(points[:end], None, config)
        for change in found.changes:
            if all(abs(change.index - r) > config.min_segment for r in reported):
                reported.append(change.index)
        for drift in found.drifts:
            if all(drift.start > e or drift.end < s for s, e in drifts):
                drifts.append((drift.start, drift.end))
        if found.noise is not None and all(abs(found.noise.index - k) > 20 for k in noises):
            noises.append(found.noise.index)
    return len(reported) + len(drifts), len(noises)


def false_alerts(seed: int, length: int, per_pattern: int, config: DetectorConfig = DEFAULT_CONFIG,
                 cvs: Sequence[float] = CVS) -> dict:
    """Null histories (noise, outliers, banding) grown one commit at a time, counted by
    `alerts_while_growing`."""
    rng = np.random.default_rng(seed)
    alerts = commits = noise_alerts = 0
    by_cv: dict[str, float] = {}
    for cv in cvs:
        cv_alerts = cv_commits = 0
        started = time.perf_counter()
        for pattern in ("noise", "outliers", "banding"):
            for _ in range(per_pattern):
                history = perf_history(rng, pattern, cv, length)
                found, noises = alerts_while_growing(history["samples"], config)
                cv_alerts += found
                noise_alerts += noises
                cv_commits += length
        low, high = poisson_interval(cv_alerts)
        by_cv[str(cv)] = {"per_1000": 1000 * cv_alerts / cv_commits, "alerts": cv_alerts, "commits": cv_commits,
                          "ci95_per_1000": [1000 * low / cv_commits, 1000 * high / cv_commits]}
        alerts += cv_alerts
        commits += cv_commits
        print(f"  false alerts at CV {cv:.1%}: {cv_alerts} over {cv_commits} commits "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
    low, high = poisson_interval(alerts)
    return {"alerts": alerts, "commits": commits, "noise_changed_alerts": noise_alerts,
            "per_1000_commits": 1000 * alerts / commits,
            "ci95_per_1000": [1000 * low / commits, 1000 * high / commits],
            "by_cv": by_cv, "series_length": length}


def poisson_interval(count: int) -> tuple[float, float]:
    """Exact (Garwood) 95 % interval of a Poisson count."""
    low = 0.0 if count == 0 else float(stats.chi2.ppf(0.025, 2 * count) / 2)
    return low, float(stats.chi2.ppf(0.975, 2 * count + 2) / 2)


def incremental_latency(seed: int, repeats: int) -> dict:
    """Time of `detect_recent` after one new result on a 2,000-point series (5 samples/commit)."""
    rng = np.random.default_rng(seed)
    history = perf_history(rng, "steps", 0.02, 2001)
    points = history["samples"]
    timings = []
    for r in range(repeats):
        series = points[:2000 + (r % 2)]
        start = time.perf_counter()
        detect_recent(series)
        timings.append(1000 * (time.perf_counter() - start))
    start = time.perf_counter()
    detect(points[:2000])
    full_ms = 1000 * (time.perf_counter() - start)
    return {"points": 2000, "window": DEFAULT_CONFIG.window, "repeats": repeats,
            "median_ms": float(np.median(timings)), "p95_ms": float(np.percentile(timings, 95)),
            "full_rescan_ms": full_ms}


def service_latency(seed: int, repeats: int, workdir: Path) -> dict:
    """The service path on a SQLite file: one new run stored at the head of a 2,000-commit
    branch history, then `scan_series` (load the series, re-examine the recent window, update
    alerts and detection_state), timed from the stored run to the committed scan."""
    import shutil

    from sqlalchemy import insert

    from app.core.db import Database
    from app.core.migrate import upgrade
    from app.core.models import Branch, BranchCommit, Commit, Job, JobState, Measurement, Repository, Run, Suite
    from app.detection.series import SeriesKey
    from app.detection.service import on_run_stored, scan_series

    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    url = f"sqlite:///{workdir / 'latency.db'}"
    upgrade(url)
    db = Database(url)
    rng = np.random.default_rng(seed)
    history = perf_history(rng, "steps", 0.02, 2000 + repeats)
    with db.session() as session:
        repo = Repository(name="bench/engine", url="file:///dev/null")
        suite = Suite(name="decode-throughput", command=["true"], platforms=["rocm"])
        session.add_all([repo, suite])
        session.flush()
        branch = Branch(repository_id=repo.id, name="main")
        session.add(branch)
        session.flush()
        n = 2000 + repeats
        session.execute(insert(Commit), [{"id": i + 1, "repository_id": repo.id, "sha": f"{i:040x}"} for i in range(n)])
        session.execute(insert(BranchCommit), [{"branch_id": branch.id, "commit_id": i + 1, "position": i,
                                                "active": True} for i in range(n)])
        session.execute(insert(Job), [{"id": i + 1, "repository_id": repo.id, "commit_id": i + 1,
                                       "suite_id": suite.id, "platform": "rocm", "state": JobState.succeeded,
                                       "max_attempts": 3} for i in range(n)])
        session.execute(insert(Run), [{"id": i + 1, "job_id": i + 1, "attempt": 1, "commit_id": i + 1,
                                       "suite_id": suite.id, "platform": "rocm", "document_sha256": "0" * 64,
                                       "environment": {}, "context": {}, "context_fingerprint": "fp"}
                                      for i in range(2000)])
        session.execute(insert(Measurement), [{"run_id": i + 1, "metric": "output_throughput", "unit": "tok/s",
                                               "direction": "higher_is_better", "samples": history["samples"][i]}
                                              for i in range(2000)])
        key = SeriesKey(repo.id, "main", "decode-throughput", "output_throughput", "rocm", "fp")
        scan_series(session, key, full=True)
        suite_id = suite.id
    timings = []
    for r in range(repeats):
        i = 2000 + r
        with db.session() as session:
            run = Run(id=i + 1, job_id=i + 1, attempt=1, commit_id=i + 1, suite_id=suite_id, platform="rocm",
                      document_sha256="0" * 64, environment={}, context={}, context_fingerprint="fp")
            run.measurements = [Measurement(metric="output_throughput", unit="tok/s", direction="higher_is_better",
                                            samples=history["samples"][i])]
            session.add(run)
            session.flush()
            on_run_stored(session, run)
        start = time.perf_counter()
        with db.session() as session:
            scan_series(session, key, full=False)
        timings.append(1000 * (time.perf_counter() - start))
    db.engine.dispose()
    return {"points": 2000, "repeats": repeats, "database": "sqlite file",
            "median_ms": float(np.median(timings)), "p95_ms": float(np.percentile(timings, 95))}


SWEEP = (("default", {}),
         ("before the sweep: pen 3, U 0.002, 3.5, raw", {"penalty": 3.0, "alpha": 2e-3, "min_effect": 3.5,
                                                          "winsor": 0.0}),
         ("no winsorizing", {"winsor": 0.0}),
         ("U test p < 0.002", {"alpha": 2e-3}),
         ("penalty 2 log n", {"penalty": 2.0}),
         ("effect >= 3.5", {"min_effect": 3.5}),
         ("effect >= 4", {"min_effect": 4.0}))


def sweep(seed: int, quick: bool) -> int:
    """`--sweep`: the trade-off behind the defaults. Each configuration is scored on the delay
    of a 5 % shift at 2 % run-to-run CV (5 samples per commit) and on false alerts at 2 % and
    5 % CV, on the same seeded data."""
    trials, per_pattern = (40, 1) if quick else (300, 4)
    rows = []
    print(f"{'configuration':44} {'<= +2':>6} {'<= +3':>6} {'<= +4':>6} {'false/1,000 (95 % interval)':>30}")
    for name, overrides in SWEEP:
        config = replace(DEFAULT_CONFIG, **overrides)
        delay = detection_delay(seed, trials, config, DELAY_VARIANTS[1:2], oracle=False)
        row = next(iter(delay.values()))
        false = false_alerts(seed, 1000, per_pattern, config, cvs=(0.02, 0.05))
        rows.append({"name": name, "overrides": overrides, "delay": row, "false_alerts": false})
        low, high = false["ci95_per_1000"]
        print(f"{name:44} {row['found_within_3']:6.1%} {row['found_within_4']:6.1%} {row['found_within_5']:6.1%} "
              f"{false['per_1000_commits']:11.2f} ({low:.2f}-{high:.2f})", flush=True)
    out = ROOT / "bench" / "results" / "detection_sweep.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"command": " ".join([Path(sys.executable).name, *sys.argv]), "seed": seed,
                               "trials": trials, "rows": rows}, indent=2))
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


# ---------------------------------------------------------------- main

def print_table(table: dict[str, dict[str, dict]]) -> None:
    for data_name, rows in table.items():
        count = next(iter(rows.values()))["series"]
        print(f"\n{data_name} ({count} series, match within {MARGIN} points)")
        print(f"{'method':34} {'precision':>9} {'recall':>7} {'F1':>6} {'covering':>9} {'TP':>5} {'FP':>5} "
              f"{'FN':>5} {'seconds':>8}")
        for name, row in sorted(rows.items(), key=lambda item: -item[1]["f1"]):
            print(f"{name:34} {row['precision']:9.3f} {row['recall']:7.3f} {row['f1']:6.3f} {row['covering']:9.3f} "
                  f"{row['tp']:5d} {row['fp']:5d} {row['fn']:5d} {row['seconds']:8.2f}")


def write_result(args: argparse.Namespace, body: dict, name: str) -> None:
    result = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "seed": args.seed,
              "quick": args.quick, "machine": platform.platform(), "python": platform.python_version(), **body}
    out = ROOT / "bench" / "results" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")


def only(args: argparse.Namespace) -> int:
    """`--only generator|false-alerts|latency`: one measurement of the full bench, same data."""
    if args.only == "generator":
        reps, length = (2, 200) if args.quick else (8, 400)
        dataset = own_dataset(args.seed, reps, length)
        rows = {}
        for name, method in (("parallax (find_change_points)", find_change_points), ("ruptures PELT l2 + BIC", pelt),
                             ("ruptures BinSeg l2 + BIC", binseg), ("no change (trivial)", no_change)):
            predictions, seconds = run_method(method, dataset)
            rows[name] = {**score([(p, s["truth"], len(s["values"])) for p, s in zip(predictions, dataset)]),
                          "seconds": seconds}
        print_table({"parallax-generator": rows})
        write_result(args, {"table": {"parallax-generator": rows}}, "detection_generator.json")
        return 0
    if args.only == "false-alerts":
        false = false_alerts(args.seed, 300 if args.quick else 1000, 1 if args.quick else 8)
        print(f"false alerts: {false['per_1000_commits']:.2f} per 1,000 commits (95 % interval "
              f"{false['ci95_per_1000'][0]:.2f}-{false['ci95_per_1000'][1]:.2f}; {false['alerts']} over "
              f"{false['commits']} commits of null histories; noise-changed notes: {false['noise_changed_alerts']})")
        for cv, row in false["by_cv"].items():
            print(f"  CV {float(cv):.1%}: {row['per_1000']:.2f} per 1,000 ({row['alerts']} over {row['commits']} "
                  f"commits)")
        write_result(args, {"false_alerts": false}, "detection_false_alerts.json")
        return 0
    if args.only == "young":
        young = young_series(args.seed, args.quick)
        print_young(young)
        write_result(args, {"young_series": young}, "detection_young.json")
        return 0
    latency = incremental_latency(args.seed, 20 if args.quick else 100)
    latency["service"] = service_latency(args.seed, 10 if args.quick else 30, ROOT / "var" / "bench-detection")
    print(f"incremental detection after one new result, 2,000 points: median {latency['median_ms']:.1f} ms, "
          f"p95 {latency['p95_ms']:.1f} ms (full re-scan {latency['full_rescan_ms']:.1f} ms)")
    service = latency["service"]
    print(f"  service path (store run, load series from SQLite, scan, commit): median {service['median_ms']:.1f} ms, "
          f"p95 {service['p95_ms']:.1f} ms")
    write_result(args, {"incremental_latency": latency}, "detection_latency.json")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer series (a smoke run)")
    parser.add_argument("--no-otava", action="store_true", help="skip Apache Otava and otava-test-data")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--real-part", choices=[*REAL_PARTS, "both"], default="both",
                        help="which part of the real corpus to score (tune with 'tuning' only)")
    parser.add_argument("--real-only", action="store_true",
                        help="only the real corpus table (no generators, delay, false alerts or latency)")
    parser.add_argument("--only", choices=["generator", "false-alerts", "latency", "young"],
                        help="only one measurement on this file's generator: the F1 table (no Otava), false "
                             "alerts per 1,000 commits, the incremental detection latency (detector and "
                             "service path), or young series (large steps found, false alerts)")
    parser.add_argument("--sweep", action="store_true",
                        help="only the delay / false-alert trade-off of a few detector configurations")
    args = parser.parse_args()
    if args.sweep:
        return sweep(args.seed, args.quick)
    if args.only:
        return only(args)
    reps, length = (2, 200) if args.quick else (8, 400)

    notes: list[str] = ["real-*: 42 annotated histories from public projects' github-action-benchmark pages "
                        "(bench/data/real/README.md); TCPD and Apache Otava's test-suite histories are kept out "
                        "on purpose (the project is measured on them independently)."]
    datasets: dict[str, list[dict]] = {}
    for part in (REAL_PARTS if args.real_part == "both" else (args.real_part,)):
        datasets[f"real-{part}"] = real_corpus(part)
    if not args.real_only:
        datasets["parallax-generator"] = own_dataset(args.seed, reps, length)
    python: Path | None = None
    if args.no_otava:
        notes.append("Apache Otava skipped (--no-otava).")
    else:
        python, status = peer_python()
        if python is None:
            notes.append(f"Apache Otava not run: {status}")
        else:
            if not args.real_only:
                datasets["otava-test-data"] = call_peer(python, {"mode": "generate", "seed": args.seed,
                                                                 "cvs": CVS})["series"]

    methods: dict[str, Callable[[Sequence[float]], list[int]]] = {
        "parallax (find_change_points)": find_change_points,
        "ruptures PELT l2 + BIC": pelt,
        "ruptures BinSeg l2 + BIC": binseg,
        "no change (trivial)": no_change,
    }
    table: dict[str, dict[str, dict]] = {}
    for data_name, dataset in datasets.items():
        rows: dict[str, dict] = {}
        for method_name, method in methods.items():
            predictions, seconds = run_method(method, dataset)
            rows[method_name] = {**score([(p, s["truth"], len(s["values"])) for p, s in zip(predictions, dataset)]),
                                 "seconds": seconds}
        if "samples" in dataset[0]:
            predictions, seconds = run_method(lambda pts: [c.index for c in detect(pts)], dataset, "samples")
            rows["parallax (detect, raw samples)"] = {
                **score([(p, s["truth"], len(s["values"])) for p, s in zip(predictions, dataset)]),
                "seconds": seconds}
        if python is not None:
            answer = call_peer(python, {"mode": "detect", "series": [s["values"] for s in dataset]})
            rows["Apache Otava 0.8.0"] = {
                **score([(p, s["truth"], len(s["values"])) for p, s in zip(answer["change_points"], dataset)]),
                "seconds": answer["seconds"]}
        table[data_name] = rows

    if args.real_only:
        print_table(table)
        write_result(args, {"table": table, "notes": notes}, "detection_quality_real.json")
        return 0
    delay = detection_delay(args.seed, 40 if args.quick else 200)
    false = false_alerts(args.seed, 300 if args.quick else 1000, 1 if args.quick else 8)
    young = young_series(args.seed, args.quick)
    latency = incremental_latency(args.seed, 20 if args.quick else 100)
    latency["service"] = service_latency(args.seed, 10 if args.quick else 30, ROOT / "var" / "bench-detection")

    print_table(table)
    print(f"\n5 % shift at 2 % CV landing at commit {LANDING}, incremental re-scan after every commit "
          "(share found with the landing commit + 2 / + 3 / + 4 measured; median delay):")
    for label, row in delay.items():
        oracle = row["oracle_cusum"]
        print(f"  {label}:\n    parallax      {row['found_within_3']:6.1%} {row['found_within_4']:6.1%} "
              f"{row['found_within_5']:6.1%}  median {row['median_delay']}  (found by 20: {row['found_by_20']:.1%}, "
              f"{row['trials']} trials)\n    oracle CUSUM  {oracle['found_within_3']:6.1%} {oracle['found_within_4']:6.1%} "
              f"{oracle['found_within_5']:6.1%}  median {oracle['median_delay']}  (told level, noise and shift; "
              f"{oracle['false_alerts_per_1000']:.2f} false alerts/1,000)")
    print(f"false alerts: {false['per_1000_commits']:.2f} per 1,000 commits (95 % interval "
          f"{false['ci95_per_1000'][0]:.2f}-{false['ci95_per_1000'][1]:.2f}; {false['alerts']} over "
          f"{false['commits']} commits of null histories)")
    for cv, row in false["by_cv"].items():
        print(f"  CV {float(cv):.1%}: {row['per_1000']:.2f} per 1,000 ({row['alerts']} over {row['commits']} commits; "
              f"95 % interval {row['ci95_per_1000'][0]:.2f}-{row['ci95_per_1000'][1]:.2f})")
    print_young(young)
    print(f"incremental detection after one new result, 2,000 points: median {latency['median_ms']:.1f} ms, "
          f"p95 {latency['p95_ms']:.1f} ms (full re-scan {latency['full_rescan_ms']:.1f} ms)")
    service = latency["service"]
    print(f"  service path (store run, load series from SQLite, scan, commit): median {service['median_ms']:.1f} ms, "
          f"p95 {service['p95_ms']:.1f} ms")
    for note in notes:
        print(f"note: {note}")

    result = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "seed": args.seed,
              "quick": args.quick, "machine": platform.platform(), "python": platform.python_version(),
              "table": table, "delay_5pct_at_2pct_cv": delay, "false_alerts": false, "young_series": young,
              "incremental_latency": latency, "notes": notes}
    out = ROOT / "bench" / "results" / "detection_quality.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
