"""The dashboard as a maintainer sees it, in a real browser."""
import json

import pytest
from sqlalchemy import select

from app.core.models import Alert, AlertChange, AlertState, Commit, Repository
from tests.support.service_api import claim, document, queue_jobs, register

SHAS = [f"{i:x}" * 40 for i in range(1, 4)]


def measure(client, app, sha, platform, throughput, headers):
    queue_jobs(client, sha, suite="decode-throughput", platform=platform)
    job = claim(client, headers).get_json()["job"]
    doc = document()
    doc["metrics"][0]["samples"] = [throughput * f for f in (0.99, 1.0, 1.01)]
    doc["environment"]["platform"] = platform
    response = client.post(f"/api/v1/jobs/{job['id']}/complete", data=json.dumps(doc), headers=headers)
    assert response.status_code == 201
    return job


@pytest.fixture
def measured(client, app):
    """Three commits on cuda and rocm; rocm drops 18 % at the last one."""
    cuda = register(client, app, "cuda", name="h100")
    rocm = register(client, app, "rocm", name="mi300x")
    for i, sha in enumerate(SHAS):
        measure(client, app, sha, "cuda", 1200.0, cuda)
        measure(client, app, sha, "rocm", 1000.0 * (0.82 if i == 2 else 1.0), rocm)
    return SHAS


def test_overview_shows_the_commit_matrix(page, live_server, measured):
    page.goto(live_server.url + "/")
    matrix = page.locator("table.matrix")
    assert matrix.locator("th", has_text="decode-throughput").count() == 2
    assert matrix.locator("td.cell.succeeded").count() == 6


def test_runners_page_lists_each_runner_with_its_platform(page, live_server, measured):
    page.goto(live_server.url + "/runners")
    row = page.locator("#runners tr[data-runner=mi300x]")
    assert "rocm" in row.inner_text() and "online" in row.inner_text()


def test_commit_page_shows_each_platform_and_the_change(page, live_server, measured):
    page.goto(live_server.url + f"/commits/{SHAS[2]}")
    rocm = page.locator("table.metrics td[data-platform=rocm]").first
    assert "820" in rocm.inner_text() and "-18.0%" in rocm.inner_text()
    assert "worse" in rocm.get_attribute("class")
    cuda = page.locator("table.metrics td[data-platform=cuda]").first
    assert "+0.0%" in cuda.inner_text() and "worse" not in (cuda.get_attribute("class") or "")
    unchanged_latency = page.locator("table.metrics tr", has_text="itl_p50").locator("td[data-platform=rocm]")
    assert "worse" not in (unchanged_latency.get_attribute("class") or "")


def test_commit_links_lead_to_the_job_log(page, live_server, measured, client, app):
    page.goto(live_server.url + f"/commits/{SHAS[0]}")
    page.locator("#jobs a").first.click()
    assert page.locator("#job-state").inner_text() == "succeeded"


def test_series_page_plots_every_platform(page, live_server, measured, tmp_path):
    page.goto(live_server.url + "/series?repository=demo/engine&suite=decode-throughput&metric=output_throughput")
    assert page.locator("figure.chart svg").count() == 1
    assert page.locator("#points tr").count() == 1 + 6
    assert page.locator("figure.chart svg").get_by_text("rocm").count() >= 1  # the legend names the platforms


def test_open_regressions_are_listed_and_marked(page, live_server, measured, db):
    with db.session() as session:
        repo = session.scalar(select(Repository))
        bad = session.scalar(select(Commit).where(Commit.sha == SHAS[2]))
        good = session.scalar(select(Commit).where(Commit.sha == SHAS[1]))
        alert = Alert(repository_id=repo.id, branch="main", good_commit_id=good.id, bad_commit_id=bad.id)
        alert.changes = [AlertChange(suite="decode-throughput", metric="output_throughput", platform="rocm",
                                     context_fingerprint="x", direction="higher_is_better", relative_change=-0.18,
                                     ci_low=-0.2, ci_high=-0.16, p_value=0.001, classification="platform_specific")]
        session.add(alert)
    page.goto(live_server.url + "/")
    assert "platform_specific" in page.locator("#open-alerts").inner_text()
    assert page.locator("table.matrix td.cell.regression").count() == 1
    page.goto(live_server.url + "/alerts")
    assert "-18.0%" in page.locator("#alerts").inner_text()


def test_a_correctness_alert_shows_its_hazard_count_not_a_percentage(page, live_server, measured, db):
    with db.session() as session:
        repo = session.scalar(select(Repository))
        bad = session.scalar(select(Commit).where(Commit.sha == SHAS[2]))
        good = session.scalar(select(Commit).where(Commit.sha == SHAS[1]))
        alert = Alert(repository_id=repo.id, branch="main", kind="correctness", good_commit_id=good.id,
                      bad_commit_id=bad.id)
        alert.changes = [AlertChange(suite="decode-throughput", metric="hazards", platform="cuda-sim",
                                     context_fingerprint="x", direction="lower_is_better", relative_change=17.0,
                                     before_value=0.0, after_value=17.0, classification="platform_specific")]
        session.add(alert)
    page.goto(live_server.url + "/")
    text = page.locator("#open-alerts").inner_text()
    assert "17 hazards (was 0)" in text and "%" not in text
    page.goto(live_server.url + "/alerts")
    assert "17 hazards (was 0)" in page.locator("#alerts").inner_text()


def test_a_withdrawn_alert_shows_why_under_the_invalid_filter(page, live_server, measured, db):
    with db.session() as session:
        repo = session.scalar(select(Repository))
        bad = session.scalar(select(Commit).where(Commit.sha == SHAS[2]))
        alert = Alert(repository_id=repo.id, branch="main", bad_commit_id=bad.id, state=AlertState.invalid,
                      updated_by="detector", note="withdrawn by the detector: back within noise")
        alert.changes = [AlertChange(suite="decode-throughput", metric="output_throughput", platform="rocm",
                                     context_fingerprint="x", direction="higher_is_better", relative_change=-0.05,
                                     p_value=0.001, classification="inconclusive",
                                     details={"withdrawn": {"effect": 0.4, "measured_after": 12}})]
        session.add(alert)
    page.goto(live_server.url + "/alerts")
    assert page.locator("#alerts").inner_text().strip().endswith("No open alerts.")
    page.click("text=invalid")
    row = page.locator("#alerts tr.regression")
    assert "withdrawn by the detector: back within noise (detector)" in row.inner_text()
    assert row.locator(".tag.withdrawn").count() == 1


def test_unknown_commit_is_an_html_404(page, live_server):
    response = page.goto(live_server.url + "/commits/" + "9" * 40)
    assert response.status == 404
    assert "is not known to Parallax" in page.content()


def test_series_without_parameters_says_what_is_missing(page, live_server):
    response = page.goto(live_server.url + "/series")
    assert response.status == 400 and "repository=" in page.content()


def test_empty_service_explains_the_next_step(page, live_server):
    page.goto(live_server.url + "/")
    assert "parallax enqueue demo/engine" in page.content()
    assert "parallax token create" in page.content()
