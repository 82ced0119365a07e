"""The series and alerts HTTP API, and `parallax detect`."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from app.detection.service import scan_dirty
from tests.detection.builder import METRIC, SUITE, Builder, excursion_levels, step
from tests.support.service_api import admin_headers


@pytest.fixture
def build(db):  # type: ignore[no-untyped-def]
    return Builder(db)


@pytest.fixture
def regression(build, db):  # type: ignore[no-untyped-def]
    shas = build.branch(40)
    build.history(shas, "rocm", step(40, 30, 1000.0, -0.18), seed=1)
    build.history(shas, "cuda", step(40, 30, 3000.0, 0.0), seed=2)
    scan_dirty(db)
    return shas


def series_url(**params: str) -> str:
    query = {"repository": "demo/engine", "suite": SUITE, "metric": METRIC, "platform": "rocm", **params}
    return "/api/v1/series?" + "&".join(f"{k}={v}" for k, v in query.items())


def test_series_returns_every_sample_in_branch_order_with_change_points(client, regression):
    body = client.get(series_url()).get_json()
    assert body["branch"] == "main"
    (series,) = body["series"]
    assert series["ordered_by"] == "branch" and series["direction"] == "higher_is_better"
    assert [p["commit"] for p in series["points"]] == regression
    first = series["points"][0]
    assert len(first["samples"]) == 3 and first["summary"]["n"] == 3
    assert first["summary"]["min"] <= first["summary"]["median"] <= first["summary"]["max"]
    (change,) = series["change_points"]
    assert (change["good"], change["bad"]) == (regression[29], regression[30])
    assert change["relative_change"] == pytest.approx(-0.18, abs=0.02)


@pytest.mark.parametrize("missing", ["repository", "suite", "metric", "platform"])
def test_series_names_a_missing_parameter(client, missing):
    params = {"repository": "demo/engine", "suite": SUITE, "metric": METRIC, "platform": "rocm"}
    del params[missing]
    response = client.get("/api/v1/series?" + "&".join(f"{k}={v}" for k, v in params.items()))
    assert response.status_code == 422 and response.get_json()["field"] == missing


def test_series_of_an_unknown_repository_is_404(client):
    assert client.get(series_url(repository="nobody/nothing")).status_code == 404


def test_alerts_list_with_state_and_platform_filters(client, regression):
    (alert,) = client.get("/api/v1/alerts").get_json()["alerts"]
    assert alert["state"] == "new" and alert["is_regression"] and alert["kind"] == "performance"
    assert (alert["good"], alert["bad"]) == (regression[29], regression[30])
    (change,) = alert["changes"]
    assert change["platform"] == "rocm" and change["classification"] == "platform_specific"
    assert change["platforms"] == ["rocm"] and change["suspected_commits"] == [regression[30]]
    assert client.get("/api/v1/alerts?platform=rocm").get_json()["alerts"] != []
    assert client.get("/api/v1/alerts?platform=cuda").get_json()["alerts"] == []
    assert client.get("/api/v1/alerts?state=fixed").get_json()["alerts"] == []
    response = client.get("/api/v1/alerts?state=closed")
    assert response.status_code == 422 and response.get_json()["field"] == "state"


def test_an_admin_acknowledges_an_alert_with_a_note(client, regression):
    (alert,) = client.get("/api/v1/alerts").get_json()["alerts"]
    response = client.patch(f"/api/v1/alerts/{alert['id']}", json={"state": "acknowledged", "note": "barrier"},
                            headers=admin_headers())
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["state"] == "acknowledged" and response.get_json()["note"] == "barrier"
    assert client.get("/api/v1/alerts?state=acknowledged").get_json()["alerts"][0]["id"] == alert["id"]


def test_an_invalid_state_is_422_naming_the_field_and_changes_nothing(client, regression):
    (alert,) = client.get("/api/v1/alerts").get_json()["alerts"]
    response = client.patch(f"/api/v1/alerts/{alert['id']}", json={"state": "closed"}, headers=admin_headers())
    assert response.status_code == 422 and response.get_json()["field"] == "state"
    assert "acknowledged" in response.get_json()["detail"]
    assert client.get("/api/v1/alerts").get_json()["alerts"][0]["state"] == "new"


def test_patching_an_alert_needs_the_admin_token(client, regression):
    (alert,) = client.get("/api/v1/alerts").get_json()["alerts"]
    assert client.patch(f"/api/v1/alerts/{alert['id']}", json={"state": "invalid"}).status_code == 401
    assert client.patch(f"/api/v1/alerts/{alert['id']}", json={"state": "invalid"},
                        headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_patching_an_unknown_alert_is_404(client):
    assert client.patch("/api/v1/alerts/999", json={"state": "invalid"}, headers=admin_headers()).status_code == 404


def test_parallax_detect_rescan_prints_progress_and_a_summary(build, db, database_url, tmp_path):
    from app.cli import main
    shas = build.branch(40)
    build.history(shas, "rocm", step(40, 30, 1000.0, -0.18), seed=1)
    config = tmp_path / "parallax.toml"
    config.write_text('[[repositories]]\nname = "demo/engine"\nurl = "https://github.com/demo/engine.git"\n')
    env = {"PARALLAX_DATABASE_URL": database_url, "PARALLAX_CONFIG": str(config)}
    result = CliRunner().invoke(main, ["detect", "--rescan", "--repository", "demo/engine"], env=env,
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "[1/1] decode-throughput output_throughput on rocm (main): 1 new" in result.output
    assert "alerts: 1 new performance regressions" in result.output
    assert f"on rocm (inconclusive) at {shas[30][:12]}" in result.output
    again = CliRunner().invoke(main, ["detect"], env=env, catch_exceptions=False)
    assert "0 changes recorded" in again.output


def test_parallax_detect_names_the_changes_it_withdraws(build, db, database_url, tmp_path):
    from app.cli import main
    levels = excursion_levels(40, [963.0, 964.0, 965.0], 20, seed=21)
    shas = build.branch(len(levels))
    config = tmp_path / "parallax.toml"
    config.write_text("")
    env = {"PARALLAX_DATABASE_URL": database_url, "PARALLAX_CONFIG": str(config)}
    for value, level in zip(shas[:43], levels[:43]):
        build.result(value, "rocm", [level])
    first = CliRunner().invoke(main, ["detect"], env=env, catch_exceptions=False)
    assert f"regression: {METRIC} -3." in first.output and "0 changes withdrawn" in first.output
    for value, level in zip(shas[43:], levels[43:]):
        build.result(value, "rocm", [level])
    later = CliRunner().invoke(main, ["detect"], env=env, catch_exceptions=False)
    assert "1 changes withdrawn" in later.output and "alerts: 1 invalid performance regressions" in later.output
    assert f"withdrawn: {METRIC} -3." in later.output and "with 23 commits measured from it on" in later.output


def test_parallax_detect_refuses_an_unknown_repository(database_url, tmp_path):
    from app.cli import main
    config = tmp_path / "parallax.toml"
    config.write_text("")
    env = {"PARALLAX_DATABASE_URL": database_url, "PARALLAX_CONFIG": str(config)}
    result = CliRunner().invoke(main, ["detect", "--rescan", "--repository", "nobody/nothing"], env=env)
    assert result.exit_code != 0 and "unknown repository 'nobody/nothing'" in result.output


def test_series_json_stays_strict_json_when_a_level_starts_at_zero(client, build):
    import json
    shas = build.branch(30)
    for i, value in enumerate(shas):
        build.result(value, "rocm", [0.0] if i < 20 else [5.0], metric="retractions", direction="lower_is_better")
    response = client.get(series_url(metric="retractions"))
    text = response.get_data(as_text=True)
    assert "Infinity" not in text and "NaN" not in text
    (change,) = json.loads(text)["series"][0]["change_points"]
    assert change["bad"] == shas[20] and change["ci"] == [None, None]


def test_end_to_end_runner_results_to_an_alert_through_the_background_duty(client, app, db):
    """Results uploaded over the runner protocol, the `detection` duty run by the background
    loop's `run_due`, the alert read back over HTTP (no branch history: queue order)."""
    import json

    import numpy as np

    from app.core.duties import run_due
    from app.detection.service import DUTIES
    from tests.support.service_api import claim, document, queue_jobs, raw, register
    headers = register(client, app, "rocm")
    rng = np.random.default_rng(3)
    shas = [f"{i:040x}" for i in range(1, 36)]
    for i, sha in enumerate(shas):
        queue_jobs(client, sha, suite="decode-throughput", platform="rocm")
        job = claim(client, headers).get_json()["job"]
        level = (1000.0 if i < 25 else 820.0) * (1 + 0.005 * rng.standard_normal())
        doc = document(metrics=[{"name": "output_throughput", "unit": "tok/s", "direction": "higher_is_better",
                                 "samples": [round(level * (1 + 0.001 * e), 3) for e in rng.standard_normal(3)]}],
                       environment={"platform": "rocm", "device": "MI300X", "simulated": False})
        doc.pop("items")
        response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=raw(doc), headers=headers)
        assert response.status_code == 201, response.get_json()
    done = run_due(db, DUTIES)
    assert len(done["detection"].created) == 1
    (alert,) = client.get("/api/v1/alerts?state=new&platform=rocm").get_json()["alerts"]
    assert (alert["good"], alert["bad"]) == (shas[24], shas[25])
    assert alert["changes"][0]["relative_change"] == pytest.approx(-0.18, abs=0.02)
    body = json.loads(client.get(series_url()).get_data(as_text=True))
    assert body["series"][0]["ordered_by"] == "queue" and len(body["series"][0]["points"]) == 35
