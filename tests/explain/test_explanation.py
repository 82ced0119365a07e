"""What changed at an alert: the recorded context and environment compared between the last good
and the first bad measurement on every platform, and the culprit's files from the mirror."""
from __future__ import annotations

from pathlib import Path

import pytest

from app.git.mirror import Mirror
from app.git.workdir import git
from tests.detection.builder import Builder
from tests.explain.histories import barrier_on_rocm
from tests.support.service_api import open_alert
from tests.support.settings import make_settings


@pytest.fixture
def settings(database_url: str, data_dir: str):  # type: ignore[no-untyped-def]
    return make_settings(database_url, data_dir=data_dir)


@pytest.fixture
def build(db):  # type: ignore[no-untyped-def]
    return Builder(db)


def test_a_flipped_sync_policy_key_is_named_on_the_regressed_platform_only(client, build, db):
    shas = build.branch(30)
    alert_id = barrier_on_rocm(build, db, shas, 20)
    explanation = client.get(f"/api/v1/alerts/{alert_id}").get_json()["explanation"]
    assert (explanation["good"], explanation["culprit"]) == (shas[19], shas[20])
    rocm, cuda = explanation["platforms"]
    assert rocm["platform"] == "rocm" and rocm["regressed"]
    assert rocm["context"] == [{"key": "sync_policy.war_barrier", "before": False, "after": True}]
    assert cuda["platform"] == "cuda" and not cuda["regressed"] and cuda["context"] == []
    assert explanation["summary"] == "sync_policy.war_barrier false → true on rocm"


def test_an_environment_change_between_good_and_bad_is_named(client, build, db):
    shas = build.branch(30)
    alert_id = barrier_on_rocm(build, db, shas, 20, torch_after="2.14.0")
    rocm = client.get(f"/api/v1/alerts/{alert_id}").get_json()["explanation"]["platforms"][0]
    assert rocm["environment"] == [{"key": "torch", "before": "2.13.0", "after": "2.14.0"}]


def test_bookkeeping_keys_that_change_every_run_are_not_reported(client, build, db):
    shas = build.branch(30)
    alert_id = barrier_on_rocm(build, db, shas, 20)
    keys = {d["key"] for p in client.get(f"/api/v1/alerts/{alert_id}").get_json()["explanation"]["platforms"]
            for d in p["context"]}
    assert not keys & {"commit", "sim_stream_busy.forward"}


def _engine_repository(root: Path, count: int, culprit: int) -> list[str]:
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    for i in range(count):
        (root / "README.md").write_text(f"release {i}\n")
        if i == culprit:
            (root / "sync_policy.py").write_text("WAR_BARRIER = {\n    'rocm': True,\n    'cuda': True,\n}\n")
            (root / "README.md").write_text(f"release {i}\nthe barrier is on everywhere\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", f"commit {i}")
    return git(root, "rev-list", "--reverse", "main").split()


def test_the_culprits_changed_files_are_listed_with_line_counts(client, build, db, settings, tmp_path):
    upstream = tmp_path / "engine"
    shas = _engine_repository(upstream, 30, culprit=20)
    Mirror.for_repository(settings.data_dir, "demo/engine", str(upstream)).fetch()
    build.branch(30, shas=shas)
    alert_id = barrier_on_rocm(build, db, shas, 20)
    explanation = client.get(f"/api/v1/alerts/{alert_id}").get_json()["explanation"]
    assert explanation["files_error"] is None
    assert explanation["files"] == [{"path": "README.md", "added": 2, "deleted": 1},
                                    {"path": "sync_policy.py", "added": 4, "deleted": 0}]


def test_without_a_mirror_the_files_are_missing_with_the_reason(client, build, db):
    shas = build.branch(30)
    alert_id = barrier_on_rocm(build, db, shas, 20)
    explanation = client.get(f"/api/v1/alerts/{alert_id}").get_json()["explanation"]
    assert explanation["files"] == [] and "no git mirror of demo/engine" in explanation["files_error"]


def test_an_unknown_alert_is_404(client):
    assert client.get("/api/v1/alerts/999").status_code == 404


def test_the_alert_page_of_an_alert_without_changes_says_there_is_nothing_to_compare(client, db):
    page = client.get(f"/alerts/{open_alert(db)}")
    assert page.status_code == 200 and "Nothing to compare yet." in page.get_data(as_text=True)


def test_the_alert_page_without_timelines_says_so(client, build, db):
    alert_id = barrier_on_rocm(build, db, build.branch(30), 20)
    page = client.get(f"/alerts/{alert_id}").get_data(as_text=True)
    assert "sync_policy.war_barrier false → true on rocm" in page and "No timeline artifacts" in page
