"""The series API's cache (app/web/series_cache.py): a repeated request is answered from memory
with the very bytes the database answer had, and every write that changes a series - a new run
(even one committed after a newer one), a force push, a retention prune - makes the next
request read the database again. Runs on SQLite and PostgreSQL (the `db` fixture)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.config import RetentionRule
from app.core.models import Branch, Commit, Job, JobState, Measurement, Repository, Run, Suite
from app.git import commit_graph
from app.retention import prune as retention
from app.web.series_cache import ENTRY_OVERHEAD_BYTES, SeriesCache, SeriesRequest, Stamp
from tests.detection.builder import METRIC, SUITE, Builder, sha, step

QUERY = f"/api/v1/series?repository=demo/engine&suite={SUITE}&metric={METRIC}&platform=rocm"


@pytest.fixture
def build(db: Any) -> Builder:
    return Builder(db)


@pytest.fixture
def main_history(build: Builder) -> list[str]:
    shas = build.branch(12)
    build.history(shas, "rocm", step(12, 8, 1000.0, -0.15), seed=3)
    return shas


def cache_of(app: Any) -> SeriesCache:
    return app.extensions["parallax.series_cache"]


def points(body: dict[str, Any]) -> list[tuple[str, list[float]]]:
    return [(p["commit"], p["samples"]) for s in body["series"] for p in s["points"]]


def test_a_repeated_request_is_a_hit_with_the_same_bytes(app: Any, client: Any, main_history: list[str]) -> None:
    cache = cache_of(app)
    first = client.get(QUERY + "&last=10")
    second = client.get(QUERY + "&last=10")
    assert first.status_code == second.status_code == 200
    assert (cache.stats.misses, cache.stats.hits) == (1, 1)
    assert second.data == first.data and second.headers["Content-Type"] == first.headers["Content-Type"]
    assert [c for c, _ in points(second.get_json())] == main_history[2:]
    # Another window, branch spelling or fingerprint is another request: a miss of its own.
    client.get(QUERY)
    client.get(QUERY + "&branch=main")
    assert (cache.stats.misses, cache.stats.hits) == (2, 2)


def test_a_new_run_is_a_miss_that_answers_the_new_point(app: Any, client: Any, build: Builder,
                                                         main_history: list[str]) -> None:
    before = client.get(QUERY).get_json()
    build.result(main_history[-1], "rocm", [1.0, 2.0, 3.0])       # a second run at the newest commit
    after = client.get(QUERY).get_json()
    assert cache_of(app).stats.hits == 0
    assert points(after)[-1][1] == points(before)[-1][1] + [1.0, 2.0, 3.0]
    assert client.get(QUERY).get_json() == after and cache_of(app).stats.hits == 1


def test_a_run_committed_after_a_newer_one_is_not_hidden(app: Any, client: Any, build: Builder,
                                                          main_history: list[str], database_url: str) -> None:
    """Run ids are taken at insert, not at commit: a run holding a lower id that commits late must
    still change the stamp (the run count does; the newest id alone would not)."""
    if not database_url.startswith("postgresql"):
        pytest.skip("needs two writers at once (SQLite serialises them)")
    extra = build.branch(2, start=12)
    engine = sa.create_engine(database_url)
    with Session(engine) as slow:
        # The slow writer takes its run id first (a run with its measurement, as store_run writes).
        commit = slow.scalar(select(Commit).where(Commit.sha == extra[0]))
        suite = slow.scalar(select(Suite).where(Suite.name == SUITE))
        job = Job(repository_id=commit.repository_id, commit_id=commit.id, suite_id=suite.id, platform="rocm",
                  state=JobState.succeeded)
        slow.add(job)
        slow.flush()
        run = Run(job_id=job.id, attempt=1, commit_id=commit.id, suite_id=suite.id, platform="rocm",
                  document_sha256="0" * 64, context={"model": "m"}, environment={"platform": "rocm"},
                  context_fingerprint="fp-rocm")
        run.measurements = [Measurement(metric=METRIC, unit="tok/s", direction="higher_is_better", samples=[7.0])]
        slow.add(run)
        slow.flush()
        fast_run = build.result(extra[1], "rocm", [8.0])          # a higher id, committed first
        assert fast_run > run.id
        cached = client.get(QUERY).get_json()
        assert [c for c, _ in points(cached)][-1:] == [extra[1]]
        slow.commit()
    engine.dispose()
    fresh = client.get(QUERY).get_json()
    assert [c for c, _ in points(fresh)][-2:] == extra and points(fresh)[-2][1] == [7.0]


def test_a_force_push_invalidates_without_a_new_run(app: Any, client: Any, build: Builder, db: Any,
                                                     main_history: list[str]) -> None:
    """The replaced head and its replacement are both measured already: only the branch history
    changes, and with it the repository's series epoch."""
    replacement = sha(1, "rewritten")
    build.result(replacement, "rocm", [555.0, 556.0, 557.0])
    assert [c for c, _ in points(client.get(QUERY).get_json())] == main_history
    with db.session() as session:
        repository = session.scalar(select(Repository).where(Repository.name == "demo/engine"))
        branch = session.scalar(select(Branch).where(Branch.repository_id == repository.id, Branch.name == "main"))
        repository_id, epoch = repository.id, repository.series_epoch
        update = commit_graph.set_history(session, repository, branch, [replacement], head_depth=11)
        assert [c.sha for c in update.dropped] == [main_history[-1]]
    with db.session() as session:
        assert session.get(Repository, repository_id).series_epoch == epoch + 1
    after = points(client.get(QUERY).get_json())
    assert [c for c, _ in after] == main_history[:-1] + [replacement] and after[-1][1] == [555.0, 556.0, 557.0]
    assert cache_of(app).stats.hits == 0


def test_a_prune_batch_invalidates(app: Any, client: Any, db: Any, settings: Any, main_history: list[str]) -> None:
    before = points(client.get(QUERY).get_json())
    assert all(len(samples) == 3 for _, samples in before)
    report = retention.prune(db, replace(settings, retention=(RetentionRule("default-branch", 0.0),)), batch_size=5)
    assert report.measurements == 12 and report.batches == 3
    after = points(client.get(QUERY).get_json())
    assert [c for c, _ in after] == main_history and all(len(samples) == 1 for _, samples in after)
    assert cache_of(app).stats.hits == 0


def test_an_unchanged_history_keeps_its_entry_across_writes_elsewhere(app: Any, client: Any, build: Builder, db: Any,
                                                                       main_history: list[str]) -> None:
    """A run of another platform, or a push that changes nothing, leaves the answer cached."""
    first = client.get(QUERY)
    build.result(main_history[-1], "cuda", [1.0])
    with db.session() as session:
        repository = session.scalar(select(Repository).where(Repository.name == "demo/engine"))
        branch = session.scalar(select(Branch).where(Branch.repository_id == repository.id, Branch.name == "main"))
        update = commit_graph.set_history(session, repository, branch, main_history[:-3:-1], head_depth=11)  # newest first
        assert update.added == [] and update.dropped == []
    assert client.get(QUERY).data == first.data
    assert (cache_of(app).stats.misses, cache_of(app).stats.hits) == (1, 1)


def key(n: int) -> SeriesRequest:
    return SeriesRequest(1, "demo/engine", "main", SUITE, f"metric-{n}", "rocm", None, None)


STAMP = Stamp(epoch=0, runs=1, newest_run=1)


def test_the_cache_holds_at_most_its_bound_dropping_the_least_recently_used() -> None:
    entry = 1000 + ENTRY_OVERHEAD_BYTES
    cache = SeriesCache(max_bytes=3 * entry)
    for n in range(3):
        cache.put(key(n), STAMP, b"x" * 1000)
    assert len(cache) == 3 and cache.size_bytes == 3 * entry
    assert cache.get(key(0), STAMP) is not None          # 0 is now the most recently used
    cache.put(key(3), STAMP, b"y" * 1000)
    assert key(1) not in cache and all(key(n) in cache for n in (0, 2, 3))
    assert cache.size_bytes == 3 * entry and cache.stats.evictions == 1
    for n in range(4, 40):
        cache.put(key(n), STAMP, b"z" * (n * 37 % 900))
        assert cache.size_bytes <= cache.max_bytes
    cache.put(key(99), STAMP, b"w" * (4 * entry))        # larger than the whole cache: not kept
    assert key(99) not in cache and cache.size_bytes <= cache.max_bytes


def test_a_stale_stamp_is_a_miss_and_a_new_answer_replaces_the_entry() -> None:
    cache = SeriesCache(max_bytes=10_000)
    cache.put(key(0), STAMP, b"old")
    newer = replace(STAMP, runs=2)
    assert cache.get(key(0), newer) is None and cache.get(key(0), replace(STAMP, epoch=1)) is None
    cache.put(key(0), newer, b"new answer")
    assert cache.get(key(0), newer) == b"new answer" and cache.get(key(0), STAMP) is None
    assert len(cache) == 1 and cache.size_bytes == len(b"new answer") + ENTRY_OVERHEAD_BYTES
    with pytest.raises(ValueError, match="max_bytes"):
        SeriesCache(max_bytes=-1)
