"""A maintainer's morning in a real browser, on 48 commits x 3 platforms where ROCm alone
regressed at commit 30 and every platform at commit 40 (detected by the real detector)."""
import re
from urllib.parse import urlsplit

from playwright.sync_api import expect
from sqlalchemy import select

from app.core.models import Alert, AlertChange, AlertState, Bisect, BisectState, Commit
from tests.dashboard.conftest import COMMON_AT, ROCM_ONLY_AT, screenshot, sign_in

SERIES = "/series?repository=demo/engine&suite=decode-throughput&metric=output_throughput"


def rocm_only_alert(db) -> int:
    with db.session() as session:
        return session.scalar(select(AlertChange.alert_id).where(AlertChange.classification == "platform_specific",
                                                                 AlertChange.metric == "output_throughput"))


def test_home_shows_the_rocm_only_regression_first_and_marks_its_cell(page, live_server, history):
    page.goto(live_server.url + "/")
    first = page.locator("#open-alerts tbody tr").first
    assert "platform_specific" in first.inner_text() and "rocm" in first.inner_text()
    assert "cuda" not in first.inner_text()
    row = page.locator("table.matrix tr", has=page.locator(f"a:text('{history.shas[ROCM_ONLY_AT][:10]}')"))
    assert "regression" in row.locator("td[data-platform=rocm]").get_attribute("class")
    shown = float(re.search(r"([-+][0-9.]+)%", row.locator("td[data-platform=rocm]").inner_text()).group(1))
    assert -20 < shown < -10                                   # 15 % seeded, 1 % noise per sample
    assert "regression" not in row.locator("td[data-platform=cuda]").get_attribute("class")
    screenshot(page, "home")


def test_chart_draws_one_point_per_measured_commit_on_each_platform(page, live_server, history):
    page.goto(live_server.url + SERIES)
    for platform in ("cuda", "rocm", "cpu"):
        assert page.locator(f"svg .point[data-platform={platform}]").count() == 48
    assert page.locator("svg .change-point[data-platform=rocm]").count() == 2
    screenshot(page, "series")


def test_hovering_a_point_shows_its_commit(page, live_server, history):
    page.goto(live_server.url + SERIES)
    page.locator(f"svg .point[data-platform=rocm][data-position='{ROCM_ONLY_AT}']").hover()
    tooltip = page.locator("#tooltip")
    assert tooltip.is_visible()
    assert history.shas[ROCM_ONLY_AT][:10] in tooltip.inner_text()
    assert f"change {ROCM_ONLY_AT} of the scheduler" in tooltip.inner_text()


def test_a_point_opens_its_commit_from_the_keyboard(page, live_server, history):
    page.goto(live_server.url + SERIES)
    page.locator(f"svg .point[data-platform=cuda][data-position='{COMMON_AT}']").focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/commits/{history.shas[COMMON_AT]}")


def test_switching_metric_and_platforms_swaps_the_chart_without_a_reload(page, live_server, history):
    page.goto(live_server.url + SERIES)
    page.evaluate("window.stillHere = true")
    page.select_option("#metric", "itl_p50")
    page.wait_for_selector(".chart-fragment[data-metric=itl_p50]")
    page.uncheck("input[name=platform][value=cpu]")
    expect(page.locator("svg .point[data-platform=cpu]")).to_have_count(0)
    assert page.evaluate("window.stillHere") is True
    assert page.locator("svg .point[data-platform=rocm]").count() == 48
    assert "metric=itl_p50" in page.url and "platform=cpu" not in page.url


def test_zooming_in_shows_a_narrower_window(page, live_server, history):
    page.goto(live_server.url + SERIES)
    page.click("#zoom-in")
    # Positions 0..47 around the middle, half as wide: 12..35.
    expect(page.locator(".chart-fragment[data-from='12'][data-to='35']")).to_have_count(1)
    assert page.locator("svg .point[data-platform=rocm]").count() == 24
    page.click("#reset")
    expect(page.locator("svg .point[data-platform=rocm]")).to_have_count(48)


def test_triaging_an_alert_in_the_page_records_it_in_the_database(page, live_server, history, user_token, db):
    alert_id = rocm_only_alert(db)
    sign_in(page, live_server.url, user_token)
    page.goto(live_server.url + "/alerts")
    row = page.locator(f"#alert-{alert_id}")
    row.locator("input[name=note]").fill("looking at the ROCm barrier")
    row.locator("input[name=issue_url]").fill("https://github.com/demo/engine/issues/7")
    row.locator("button[value=acknowledged]").click()
    page.wait_for_selector(f"#alert-{alert_id}[data-state=acknowledged]")
    screenshot(page, "alerts-signed-in")
    with db.session() as session:
        alert = session.get(Alert, alert_id)
        assert alert.state == AlertState.acknowledged
        assert alert.updated_by == "ada" and alert.note == "looking at the ROCm barrier"
        assert alert.issue_url == "https://github.com/demo/engine/issues/7"


def test_a_form_posted_without_the_csrf_token_is_refused(page, live_server, history, user_token, db):
    alert_id = rocm_only_alert(db)
    sign_in(page, live_server.url, user_token)
    response = page.request.post(live_server.url + f"/alerts/{alert_id}/triage", form={"state": "fixed"},
                                 max_redirects=0)
    assert response.status == 400 and "CSRF" in response.text()
    with db.session() as session:
        assert session.get(Alert, alert_id).state == AlertState.new


def test_signed_out_pages_have_no_write_controls(page, live_server, history):
    for path in ("/", "/alerts", "/alerts?state=all", SERIES, f"/commits/{history.shas[ROCM_ONLY_AT]}", "/runners"):
        page.goto(live_server.url + path)
        assert page.locator("form[method=post]").count() == 0, path
        assert page.locator("#sign-in").count() == 1


def test_every_page_renders_offline_without_console_errors(page, live_server, history, user_token, db):
    host = urlsplit(live_server.url).netloc
    blocked: list[str] = []
    errors: list[str] = []

    def only_this_host(route):
        if urlsplit(route.request.url).netloc == host:
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", only_this_host)
    current = {"name": ""}
    page.on("console", lambda message: errors.append(f"{current['name']}: {message.text}")
            if message.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"{current['name']}: {exc}"))
    with db.session() as session:
        alert_id = rocm_only_alert(db)
        commits = {c.sha: c.id for c in session.scalars(select(Commit))}
        bisect = Bisect(repository_id=1, suite="decode-throughput", metric="output_throughput", platform="rocm",
                        good_commit_id=commits[history.shas[ROCM_ONLY_AT - 4]], alert_id=alert_id,
                        bad_commit_id=commits[history.shas[ROCM_ONLY_AT]], state=BisectState.done,
                        culprit_commit_id=commits[history.shas[ROCM_ONLY_AT]],
                        steps=[{"round": 1, "stage": 0, "commits": [history.shas[ROCM_ONLY_AT - 2]], "jobs": [],
                                "queued_at": "2026-12-03T09:00:00+00:00"}],
                        stages=[{"kind": "search", "commits": history.shas[ROCM_ONLY_AT - 4:ROCM_ONLY_AT + 1],
                                 "decision": {"outcome": "culprit", "pairs": [], "changes": []}}])
        session.add(bisect)
        session.flush()
        bisect_id = bisect.id
    pages = {
        "home": "/", "series": SERIES, "series-normalised": SERIES + f"&mode=normalised&baseline={history.shas[0]}",
        "commit": f"/commits/{history.shas[ROCM_ONLY_AT]}",
        "compare": f"/compare?repository=demo/engine&a={history.shas[ROCM_ONLY_AT - 1]}&b={history.shas[COMMON_AT]}",
        "alerts": "/alerts", "runners": "/runners", "bisects": "/bisects", "bisect": f"/bisects/{bisect_id}",
        "job": "/jobs/1", "signin": "/signin",
        "not-found": "/commits/" + "0" * 40,
    }
    for name, path in pages.items():
        current["name"] = name
        response = page.goto(live_server.url + path)
        assert response.status == (404 if name == "not-found" else 200), name
        assert response.headers["content-security-policy"].startswith("default-src 'self'")
        page.wait_for_load_state("networkidle")
        screenshot(page, name)
    current["name"] = "signed-in"
    sign_in(page, live_server.url, user_token)
    page.goto(live_server.url + f"/alerts#alert-{alert_id}")
    screenshot(page, "alerts-triage")
    # Chromium reports the 404 status of the not-found page itself; nothing else may complain.
    assert errors == ["not-found: Failed to load resource: the server responded with a status of 404 (NOT FOUND)"]
    assert blocked == []
