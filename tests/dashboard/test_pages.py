"""Dashboard pages over HTTP without a browser: bad input, sign-in, privacy, CSRF, compare."""
import html
import re

import pytest
from sqlalchemy import select

from app.core.config import ConfigError, load_settings
from app.core.models import Alert, AlertChange, AlertState
from app.web import create_app
from tests.dashboard.conftest import ROCM_ONLY_AT
from tests.support.settings import make_settings

SERIES = "/series?repository=demo/engine&suite=decode-throughput&metric=output_throughput"


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def sign_in(client, token: str, name: str = "ada"):
    token_field = csrf_of(client.get("/signin").get_data(as_text=True))
    return client.post("/signin", data={"name": name, "token": token, "csrf_token": token_field})


def alert_id_of(db, classification: str) -> int:
    with db.session() as session:
        return session.scalar(select(AlertChange.alert_id).where(AlertChange.classification == classification))


@pytest.mark.parametrize("path, reason", [
    ("/commits/" + "9" * 40, "is not known to Parallax"),
    ("/series?repository=nobody/nothing&suite=s&metric=m", "repository 'nobody/nothing' is not tracked"),
    ("/compare?repository=demo/engine&a=" + "1" * 40 + "&b=" + "2" * 40, "is not known to Parallax in demo/engine"),
    ("/bisects/999", "bisect 999 does not exist"),
    ("/jobs/99999", "job 99999 does not exist"),
    (SERIES + "&branch=nope", "branch 'nope' has no history"),
])
def test_unknown_things_are_a_404_page_naming_them(client, history, path, reason):
    response = client.get(path)
    assert response.status_code == 404
    assert response.mimetype == "text/html" and reason in html.unescape(response.get_data(as_text=True))


@pytest.mark.parametrize("path, reason", [
    ("/alerts?state=bogus", "state: must be one of open, all"),
    ("/alerts?kind=speed", "kind: must be one of performance"),
    ("/alerts?classification=odd", "classification: must be one of"),
    (SERIES + "&from=x", "from: must be an integer"),
    (SERIES + "&from=30&to=10", "from: must not be after to"),
    (SERIES + "&mode=log", "mode: must be one of absolute, normalised"),
    (SERIES + "&platform=tpu", "platform: 'tpu' has no decode-throughput measurements"),
    (SERIES + "&baseline=HEAD", "baseline: not a commit SHA"),
    ("/compare?repository=demo/engine&a=zz&b=" + "1" * 40, "a: not a commit SHA"),
    ("/compare?repository=demo/engine&a=" + "1" * 40, "b: required query parameter"),
    ("/series?suite=decode-throughput", "repository: required query parameter"),
])
def test_malformed_parameters_are_a_400_with_the_reason(client, history, path, reason):
    response = client.get(path)
    assert response.status_code == 400
    assert reason in html.unescape(response.get_data(as_text=True))


def test_every_page_carries_the_content_security_policy(client, history):
    for path in ("/", SERIES, "/alerts", "/runners", "/signin", "/commits/" + "9" * 40):
        assert client.get(path).headers["Content-Security-Policy"].startswith("default-src 'self'"), path


def test_the_chart_fragment_has_no_inline_script_or_style(client, history):
    body = client.get(SERIES.replace("/series", "/series/chart")).get_data(as_text=True)
    assert "<script" not in body and "style=" not in body
    assert body.count('class="point"') == 3 * 48


def test_a_wrong_token_does_not_sign_in(client, history, user_token):
    response = sign_in(client, user_token + "x")
    assert response.status_code == 401 and "wrong token" in response.get_data(as_text=True)
    assert 'id="signed-in-as"' not in client.get("/").get_data(as_text=True)


def test_the_session_cookie_is_http_only_and_same_site(client, history, user_token):
    cookie = sign_in(client, user_token).headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie


def test_a_private_dashboard_asks_for_sign_in_before_any_page(sqlite_url, history, user_token):
    private = create_app(make_settings(sqlite_url, dashboard_public=False))
    client = private.test_client()
    response = client.get("/alerts?state=all")
    assert response.status_code == 302 and "/signin?next=/alerts" in response.headers["Location"]
    assert client.get("/api/v1/alerts").status_code == 200   # the API keeps its own rules
    assert sign_in(client, user_token).status_code == 302
    assert client.get("/alerts?state=all").status_code == 200
    private.extensions["parallax.db"].engine.dispose()


def test_the_privacy_setting_comes_from_the_environment():
    assert load_settings({"PARALLAX_DASHBOARD_PUBLIC": "false"}).dashboard_public is False
    assert load_settings({}).dashboard_public is True
    with pytest.raises(ConfigError, match="PARALLAX_DASHBOARD_PUBLIC must be true or false"):
        load_settings({"PARALLAX_DASHBOARD_PUBLIC": "maybe"})


def test_triage_needs_a_signed_in_user(client, history, db):
    alert_id = alert_id_of(db, "platform_specific")
    token = csrf_of(client.get("/signin").get_data(as_text=True))
    response = client.post(f"/alerts/{alert_id}/triage", data={"state": "fixed", "csrf_token": token})
    assert response.status_code == 403
    with db.session() as session:
        assert session.get(Alert, alert_id).state == AlertState.new


def test_triage_without_the_csrf_token_changes_nothing(client, history, user_token, db):
    alert_id = alert_id_of(db, "platform_specific")
    sign_in(client, user_token)
    response = client.post(f"/alerts/{alert_id}/triage", data={"state": "fixed"})
    assert response.status_code == 400 and "CSRF token missing" in response.get_data(as_text=True)
    with db.session() as session:
        assert session.get(Alert, alert_id).state == AlertState.new


def test_triage_refuses_a_link_that_is_not_a_web_address(client, history, user_token, db):
    alert_id = alert_id_of(db, "platform_specific")
    sign_in(client, user_token)
    token = csrf_of(client.get("/alerts").get_data(as_text=True))
    response = client.post(f"/alerts/{alert_id}/triage",
                           data={"state": "fixed", "issue_url": "javascript:alert(1)", "csrf_token": token})
    assert response.status_code == 400 and "issue_url: must be an http(s) URL" in response.get_data(as_text=True)
    with db.session() as session:
        alert = session.get(Alert, alert_id)
        assert alert.state == AlertState.new and alert.issue_url is None


def test_triage_of_an_unknown_alert_is_a_404(client, history, user_token):
    sign_in(client, user_token)
    token = csrf_of(client.get("/alerts").get_data(as_text=True))
    assert client.post("/alerts/4242/triage", data={"state": "fixed", "csrf_token": token}).status_code == 404


def test_alert_filters_narrow_the_list(client, history, db):
    specific = client.get("/alerts?classification=platform_specific").get_data(as_text=True)
    common = client.get("/alerts?classification=common&platform=cuda").get_data(as_text=True)
    assert f'id="alert-{alert_id_of(db, "platform_specific")}"' in specific
    assert f'id="alert-{alert_id_of(db, "platform_specific")}"' not in common
    assert f'id="alert-{alert_id_of(db, "common")}"' in common


def test_compare_gives_each_platform_its_change_and_verdict(client, history):
    a, b = history.shas[ROCM_ONLY_AT - 1], history.shas[ROCM_ONLY_AT]
    body = client.get(f"/compare?repository=demo/engine&a={a}&b={b}").get_data(as_text=True)
    rows = dict(re.findall(r'<tr class="([a-z-]+)" data-platform="(\w+)" data-metric="output_throughput"', body)[i][::-1]
                for i in range(3))
    assert rows == {"rocm": "worse", "cuda": "no-change", "cpu": "no-change"}


def test_the_commit_page_shows_the_change_from_the_previous_measured_commit(client, history):
    body = client.get(f"/commits/{history.shas[ROCM_ONLY_AT]}").get_data(as_text=True)
    cell = re.search(r'data-platform="rocm" data-verdict="(\w+)">\s*<strong>[^<]+</strong>.*?'
                     r'<span class="change">([-+][0-9.]+)% vs <a class="sha" href="/commits/(\w+)"', body, re.S)
    assert cell.group(1) == "regression"
    assert -20 < float(cell.group(2)) < -10
    assert cell.group(3) == history.shas[ROCM_ONLY_AT - 1]
