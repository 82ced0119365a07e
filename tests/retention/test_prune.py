"""Retention: `[[retention]]` rules in parallax.toml, `parallax prune [--dry-run]` and the prune
duty drop the raw samples of old runs of the listed kinds, keep each run's summary, and leave
pages and the detector working. Runs on SQLite and PostgreSQL (the `db` fixture)."""
from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from app.cli import main
from app.core.clock import utcnow
from app.core.config import ConfigError, RetentionRule, parse_catalogue
from app.core.duties import run_due
from app.core.models import Job, JobReason, Measurement, PullRequest, Run
from app.detection.series import SeriesKey, load_series
from app.detection.service import scan_dirty
from app.retention import prune as retention
from app.wiring import duties
from tests.detection.builder import METRIC, SUITE, Builder, sha, step

RULES = (RetentionRule("superseded-pr-head", 30), RetentionRule("bisect-probe", 7), RetentionRule("other-branch", 60))
OLD = 100  # days


class History:
    """A default branch with a rocm regression, and every other kind of run, all 100 days old
    unless said otherwise."""

    def __init__(self, db: Any) -> None:
        self.db, self.build = db, Builder(db)
        self.main = self.build.branch(30)
        self.build.history(self.main, "rocm", step(30, 20, 1000.0, -0.15), seed=1)
        self.feature = self.build.branch(3, name="feature")
        self.runs: dict[str, list[int]] = {"other-branch": [self.build.result(s, "rocm", [990.0, 1000.0, 1010.0])
                                                            for s in self.feature]}
        self.recent = self.build.result(sha(9, "recent"), "rocm", [1.0, 2.0, 3.0])
        self.runs["superseded-pr-head"] = [self._run(sha(1, "pr"), JobReason.pull_request)]
        self.open_head = self._run(sha(2, "pr"), JobReason.pull_request)
        self.runs["bisect-probe"] = [self._run(sha(1, "probe"), JobReason.bisect)]
        with db.session() as session:
            session.add(PullRequest(repository_id=self.build.repository_id, number=7, base_branch="main",
                                    head_commit_id=session.get(Run, self.open_head).commit_id, state="open"))
            session.execute(update(Run).where(Run.id != self.recent).values(created_at=utcnow() - timedelta(days=OLD)))

    def _run(self, commit: str, reason: JobReason) -> int:
        run_id = self.build.result(commit, "rocm", [10.0, 30.0, 20.0, 40.0])
        with self.db.session() as session:
            session.execute(update(Job).where(Job.id == session.get(Run, run_id).job_id).values(reason=reason))
        return run_id

    def measurements(self) -> dict[int, Measurement]:
        with self.db.session() as session:
            return {m.run_id: m for m in session.scalars(select(Measurement))}


@pytest.fixture
def history(db: Any) -> History:
    return History(db)


def with_rules(settings: Any, *rules: RetentionRule) -> Any:
    return replace(settings, retention=rules)


def test_the_dry_run_counts_each_kind_and_changes_nothing(history: History, settings: Any) -> None:
    before = history.measurements()
    found = retention.plan(history.db, with_rules(settings, *RULES))
    assert {(k.kind, k.runs, k.measurements, k.samples) for k in found.kinds} == {
        ("superseded-pr-head", 1, 1, 4), ("bisect-probe", 1, 1, 4), ("other-branch", 3, 3, 9)}
    after = history.measurements()
    assert {i: m.samples for i, m in after.items()} == {i: m.samples for i, m in before.items()}
    assert all(m.samples_pruned_at is None for m in after.values())


def test_prune_keeps_the_summary_of_exactly_the_runs_the_rules_name(history: History, settings: Any) -> None:
    report = retention.prune(history.db, with_rules(settings, *RULES))
    assert report.by_kind == {"superseded-pr-head": 1, "bisect-probe": 1, "other-branch": 3}
    pruned = {i: m for i, m in history.measurements().items() if m.samples_pruned_at is not None}
    assert set(pruned) == {i for runs in history.runs.values() for i in runs}
    probe = pruned[history.runs["bisect-probe"][0]]
    assert (probe.samples, probe.sample_count, probe.sample_median, probe.sample_min, probe.sample_max) == (
        [25.0], 4, 25.0, 10.0, 40.0)
    kept = history.measurements()
    assert kept[history.open_head].samples == [10.0, 30.0, 20.0, 40.0], "an open pull request's head stays"
    assert kept[history.recent].samples == [1.0, 2.0, 3.0], "a run younger than the rule stays"
    assert report.samples_dropped == 3 + 3 + 3 * 2


def test_default_branch_samples_stay_unless_the_operator_says_otherwise(history: History, settings: Any) -> None:
    retention.prune(history.db, with_rules(settings, *RULES))
    with history.db.session() as session:
        main_runs = set(session.scalars(select(Run.id).join(Job, Job.id == Run.job_id).where(Run.platform == "rocm")))
    main_runs -= {i for runs in history.runs.values() for i in runs} | {history.open_head, history.recent}
    measurements = history.measurements()
    assert len(main_runs) == 30 and all(len(measurements[i].samples) == 3 for i in main_runs)


def test_pages_and_the_detector_work_on_summaries_of_a_pruned_default_branch(history: History, settings: Any,
                                                                             client: Any) -> None:
    key = SeriesKey(history.build.repository_id, "main", SUITE, METRIC, "rocm", "fp-rocm")
    query = f"/api/v1/series?repository=demo/engine&suite={SUITE}&metric={METRIC}&platform=rocm&branch=main"
    before = client.get(query).get_json()
    report = retention.prune(history.db, with_rules(settings, RetentionRule("default-branch", 30), *RULES))
    assert report.by_kind["default-branch"] == 30
    after = client.get(query).get_json()
    levels = [p["summary"]["median"] for s in before["series"] for p in s["points"]]
    assert levels and levels == [p["summary"]["median"] for s in after["series"] for p in s["points"]]
    assert [c["bad"] for s in after["series"] for c in s["change_points"]] == [history.main[20]]
    scan_dirty(history.db)
    with history.db.session() as session:
        assert len(load_series(session, key).points) == 30
    alerts = client.get("/api/v1/alerts").get_json()["alerts"]
    assert [a["bad"] for a in alerts] == [history.main[20]]
    for path in ("/", f"/commits/{history.main[25]}", f"/commits/{history.feature[0]}"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)


def test_prune_works_in_batches_and_a_second_run_finds_nothing(history: History, settings: Any) -> None:
    rules = with_rules(settings, *RULES)
    seen: list[int] = []
    report = retention.prune(history.db, rules, batch_size=2, progress=lambda r: seen.append(r.measurements))
    assert report.measurements == 5 and report.batches == 4 and seen == [1, 2, 4, 5]
    assert retention.prune(history.db, rules).measurements == 0
    assert retention.plan(history.db, rules).measurements == 0


def test_the_prune_duty_runs_with_the_other_duties(history: History, settings: Any) -> None:
    from app.core.config import use_settings
    assert any(d.name == "prune" for d in duties())
    with use_settings(with_rules(settings, *RULES)):
        results = run_due(history.db, retention.DUTIES)
    assert results["prune"]["measurements"] == 5


def test_the_command_dry_run_then_prune(history: History, database_url: str, tmp_path: Path) -> None:
    config = tmp_path / "parallax.toml"
    config.write_text(f'[[repositories]]\nname = "demo/engine"\nurl = "https://github.com/demo/engine.git"\n\n'
                      f'[[suites]]\nname = "{SUITE}"\ncommand = ["true"]\nplatforms = ["cuda", "rocm", "cpu"]\n\n'
                      '[[retention]]\nkind = "bisect-probe"\nafter_days = 7\n\n'
                      '[[retention]]\nkind = "other-branch"\nafter_days = 60\n')
    env = {"PARALLAX_DATABASE_URL": database_url, "PARALLAX_CONFIG": str(config)}
    dry = CliRunner().invoke(main, ["prune", "--dry-run"], env=env, catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    assert "bisect-probe" in dry.output and "dry run: 4 measurements would keep only their summary" in dry.output
    assert all(m.samples_pruned_at is None for m in history.measurements().values())
    done = CliRunner().invoke(main, ["prune", "--batch-size", "3"], env=env, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "pruned 4 measurements (bisect-probe 1, other-branch 3) in 2 batches; 9 raw samples dropped" in done.output


@pytest.mark.parametrize("rule, words", [
    ({"kind": "everything", "after_days": 3}, "retention[0].kind must be one of"),
    ({"kind": "bisect-probe", "after_days": -1}, "retention[0].after_days must be a number of days >= 0, got -1"),
    ({"kind": "bisect-probe"}, "retention[0].after_days must be a number"),
    ({"kind": "bisect-probe", "after_days": "7"}, "retention[0].after_days must be a number"),
    ({"kind": "bisect-probe", "after_days": 7, "keep": True}, "retention[0].keep: unknown key"),
])
def test_a_bad_rule_is_refused_at_load_naming_the_key(rule: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_catalogue({"retention": [rule]})


def test_two_rules_for_one_kind_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"retention\[1\].kind: 'other-branch' has a rule already"):
        parse_catalogue({"retention": [{"kind": "other-branch", "after_days": 1}, {"kind": "other-branch", "after_days": 2}]})


def test_the_commit_api_says_which_samples_were_pruned(history: History, settings: Any, client: Any) -> None:
    retention.prune(history.db, with_rules(settings, *RULES))
    body = client.get(f"/api/v1/commits/{sha(1, 'probe')}").get_json()
    (metric,) = [m for run in body["runs"] for m in run["metrics"]]
    assert metric["pruned"] is True and metric["samples"] == [25.0]
    assert metric["summary"] == {"count": 4, "median": 25.0, "min": 10.0, "max": 40.0}


def test_the_series_api_reads_only_the_newest_commits_asked_for(history: History, client: Any) -> None:
    query = f"/api/v1/series?repository=demo/engine&suite={SUITE}&metric={METRIC}&platform=rocm&branch=main"
    points = client.get(query + "&last=5").get_json()["series"][0]["points"]
    assert [p["commit"] for p in points] == history.main[-5:]
    refused = client.get(query + "&last=nope")
    assert refused.status_code == 422 and refused.get_json()["field"] == "last"
