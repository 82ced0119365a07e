"""The pull request page and the home page's list, in a real browser against the service on loopback."""
from __future__ import annotations

from tests.support.github import REPO_NAME
from tests.support.pull_runners import Fleet, NoiseModel


def test_pull_page_shows_the_verdicts_the_ab_samples_and_every_job(service, branch, live_server, page):  # noqa: F811
    base, head = branch()
    with Fleet(service.app, NoiseModel(seed=3, effects={(head, "rocm"): -0.08})):
        service.open_pr("opened", head, base)
        pull = service.settled()
    page.goto(f"{live_server.url}/")
    link = page.locator("#open-pulls a", has_text=f"{REPO_NAME} #2")
    assert "failure: rocm output_throughput −" in page.locator("#open-pulls tr.failure").inner_text()
    link.click()
    page.wait_for_selector("#verdicts")
    assert page.locator("#conclusion").inner_text().startswith("failure: rocm output_throughput −")
    rocm = page.locator("#verdicts tr.worse")
    assert rocm.count() == 1 and "rocm" in rocm.inner_text(), pull["verdicts"]
    assert "platform_specific (rocm)" in page.locator("#scopes").inner_text()
    charts = page.locator("#ab-charts svg.ab-chart")
    assert charts.count() == 5  # decode-throughput on three platforms, gsm8k on two
    medians = page.locator("#ab-charts svg [data-job]")
    assert medians.count() == len(pull["jobs"])
    assert page.locator("#jobs tbody tr").count() == len(pull["jobs"])
    page.locator("#jobs a").first.click()
    page.wait_for_url(f"{live_server.url}/jobs/*")


def test_unknown_pull_request_page_is_404_naming_it(service):
    response = service.client.get(f"/pulls/9?repository={REPO_NAME}")
    assert response.status_code == 404
    assert "#9" in response.get_data(as_text=True)


def test_api_answers_404_for_an_unknown_pull_request_and_for_a_number_beyond_int32(service):
    assert service.client.get(f"/api/v1/pulls/{REPO_NAME}/5").status_code == 404
    assert service.client.get(f"/api/v1/pulls/{REPO_NAME}/{2**40}").status_code == 404
    assert service.client.get("/api/v1/pulls/nobody/nothing/1").get_json()["detail"] == "unknown repository 'nobody/nothing'"
