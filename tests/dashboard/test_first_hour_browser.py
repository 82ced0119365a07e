"""What a new operator sees in a real browser: colour follows the detector's verdict (a change it
has not confirmed is not painted as one), a throughput axis stays at or above zero, a short
series says how many points detection needs, and the API reference renders offline."""
from __future__ import annotations

import re
from urllib.parse import urlsplit

from sqlalchemy import select

from app.core.models import Commit, Measurement, Run
from tests.dashboard.test_dashboard import SHAS, measure
from tests.support.service_api import register

SERIES = "/series?repository=demo/engine&suite=decode-throughput&metric=output_throughput"


def background(page, selector: str) -> str:
    return page.eval_on_selector(selector, "el => getComputedStyle(el).backgroundColor")


def test_a_change_without_an_alert_is_not_coloured_as_a_change(page, live_server, client, app):
    cuda = register(client, app, "cuda", name="h100")
    for i, sha in enumerate(SHAS):  # +12 % at the newest commit: three points, far too few for an alert
        measure(client, app, sha, "cuda", 1200.0 * (1.12 if i == 2 else 1.0), cuda)
    page.goto(live_server.url + "/")
    newest = f'table.matrix tr:has(a[href="/commits/{SHAS[2]}"]) td.cell[data-platform="cuda"]'
    steady = f'table.matrix tr:has(a[href="/commits/{SHAS[1]}"]) td.cell[data-platform="cuda"]'
    assert page.inner_text(newest).strip().startswith("+12.")
    assert page.get_attribute(newest, "data-verdict") == "better-unconfirmed"
    assert background(page, newest) == background(page, steady) == "rgb(255, 255, 255)"
    assert page.locator(".legend", has_text="better, no alert").count() == 1
    assert page.locator("table.matrix th", has_text="output_throughput (tok/s)").count() == 1


def test_the_first_measured_cell_shows_its_value_with_the_unit(page, live_server, client, app):
    cuda = register(client, app, "cuda", name="h100")
    measure(client, app, SHAS[0], "cuda", 1200.0, cuda)
    page.goto(live_server.url + "/")
    assert re.fullmatch(r"[\d,.]+ tok/s", page.inner_text('table.matrix td.cell[data-platform="cuda"]').strip())


def test_a_throughput_axis_starts_at_or_above_zero(page, live_server, client, app, db):
    cuda = register(client, app, "cuda", name="h100")
    for sha in SHAS:
        measure(client, app, sha, "cuda", 60.0, cuda)
    with db.session() as session:  # one commit measured far lower: padding would take the axis below zero
        run_id = session.scalar(select(Run.id).join(Commit, Commit.id == Run.commit_id).where(Commit.sha == SHAS[1]))
        session.scalar(select(Measurement).where(Measurement.run_id == run_id,
                                                 Measurement.metric == "output_throughput")).samples = [1.0, 1.1, 0.9]
        session.commit()
    page.goto(live_server.url + SERIES)
    y_ticks = page.eval_on_selector_all('svg text.tick[text-anchor="end"]', "els => els.map(e => e.textContent)")
    assert len(y_ticks) >= 2 and min(float(t.replace(",", "")) for t in y_ticks) >= 0, y_ticks
    assert "Detection needs 10 measured commits per platform" in page.inner_text("#too-short")


def test_the_api_reference_renders_offline_under_the_content_security_policy(page, live_server):
    outside: list[str] = []
    refused: list[str] = []
    host = urlsplit(live_server.url).netloc

    def only_loopback(route) -> None:  # type: ignore[no-untyped-def]
        if urlsplit(route.request.url).netloc != host and not route.request.url.startswith("data:"):
            outside.append(route.request.url)
            route.abort()
        else:
            route.continue_()
    page.route("**/*", only_loopback)
    page.on("console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text else None)
    page.goto(live_server.url + "/")
    page.click("header nav a:text('API')")
    page.wait_for_selector(".opblock-summary-path", timeout=60_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any("/api/v1/bisects" in p for p in paths) and any("/api/v1/deliveries" in p for p in paths)
    assert outside == [] and refused == []
    csp = page.evaluate("() => fetch(location.href).then(r => r.headers.get('content-security-policy'))")
    assert "default-src 'self'" in csp and "unsafe-inline" not in csp
