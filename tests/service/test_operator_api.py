"""The operator's API: paginated lists of runners, jobs, repositories and bisects, cancel for a
job, the OpenAPI document where people look for it (with a summary for every operation), and
a /metrics content type that names its charset once."""
from __future__ import annotations

import pytest

from tests.support.service_api import admin_headers, claim, queue_jobs, register


def test_jobs_are_listed_newest_first_and_page_on_with_the_next_link(client):
    ids = [j["id"] for j in queue_jobs(client)]  # decode-throughput x 3 platforms + gsm8k x 2
    first = client.get("/api/v1/jobs?limit=2").get_json()
    assert [j["id"] for j in first["items"]] == sorted(ids, reverse=True)[:2]
    seen = [j["id"] for j in first["items"]]
    page = first
    while page["next"]:
        page = client.get(page["next"]).get_json()
        seen += [j["id"] for j in page["items"]]
    assert seen == sorted(ids, reverse=True)


def test_jobs_filter_by_state_and_platform(client, app):
    queue_jobs(client)
    headers = register(client, app, "cuda", name="h100")
    held = claim(client, headers).get_json()["job"]
    running = client.get("/api/v1/jobs?state=running").get_json()["items"]
    assert [j["id"] for j in running] == [held["id"]]
    assert {j["platform"] for j in client.get("/api/v1/jobs?platform=rocm").get_json()["items"]} == {"rocm"}


@pytest.mark.parametrize("query, field", [("limit=0", "limit"), ("limit=abc", "limit"), ("limit=201", "limit"),
                                          ("before=-1", "before"), ("state=sleeping", "state")])
def test_a_bad_list_parameter_is_a_422_naming_it(client, query, field):
    response = client.get(f"/api/v1/jobs?{query}")
    assert response.status_code == 422 and response.get_json()["field"] == field


def test_runners_and_repositories_are_listed(client, app):
    register(client, app, "rocm", name="mi300x")
    runners = client.get("/api/v1/runners").get_json()["items"]
    assert [(r["name"], r["platform"], r["disabled"]) for r in runners] == [("mi300x", "rocm", False)]
    repositories = client.get("/api/v1/repositories").get_json()["items"]
    assert [(r["name"], r["webhook_secret"]) for r in repositories] == [("demo/engine", False)]
    assert client.get("/api/v1/bisects").get_json() == {"items": [], "next": None}


def test_a_queued_job_is_cancelled_at_once_and_a_finished_one_is_left_alone(client):
    job = queue_jobs(client, platform="cpu", suite="decode-throughput")[0]
    assert client.post(f"/api/v1/jobs/{job['id']}/cancel").status_code == 401
    body = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=admin_headers()).get_json()
    assert body["state"] == "cancelled" and body["cancel_requested"] is False
    assert client.post("/api/v1/jobs/999999/cancel", headers=admin_headers()).status_code == 404


def test_a_running_job_learns_of_its_cancel_at_its_next_heartbeat(client, app):
    queue_jobs(client, platform="cpu", suite="decode-throughput")
    headers = register(client, app, "cpu")
    job = claim(client, headers).get_json()["job"]
    body = client.post(f"/api/v1/jobs/{job['id']}/cancel", headers=admin_headers()).get_json()
    assert body["state"] == "running" and body["cancel_requested"] is True
    beat = client.post(f"/api/v1/jobs/{job['id']}/heartbeat", headers=headers).get_json()
    assert beat["cancel"] is True
    failed = client.post(f"/api/v1/jobs/{job['id']}/fail", headers=headers,
                         json={"reason": "cancelled by the service", "retryable": False})
    assert failed.status_code == 200
    assert client.get(f"/api/v1/jobs/{job['id']}").get_json()["state"] == "cancelled"


def test_openapi_json_at_the_root_leads_to_the_document(client):
    response = client.get("/openapi.json")
    assert response.status_code == 308 and response.headers["Location"].endswith("/api/v1/openapi.json")


def test_every_operation_has_a_summary_of_its_own(client):
    paths = client.get("/api/v1/openapi.json").get_json()["paths"]
    missing = [f"{method.upper()} {path}" for path, operations in paths.items() for method, op in operations.items()
               if op["summary"] == op["operationId"].rsplit("_", 1)[0] or " " not in op["summary"]]
    assert missing == []
    assert paths["/api/v1/jobs"]["get"]["summary"] != paths["/api/v1/jobs"]["post"]["summary"]


def test_metrics_names_its_charset_once(client):
    content_type = client.get("/metrics").headers["Content-Type"]
    assert content_type.count("charset") == 1 and content_type.startswith("text/plain")


def test_a_signed_in_user_cancels_a_job_from_its_page_and_a_signed_out_one_sees_no_button(client, db):
    import re

    from app.auth.tokens import create_user
    job = queue_jobs(client, platform="cpu", suite="decode-throughput")[0]
    assert 'id="cancel-job"' not in client.get(f"/jobs/{job['id']}").get_data(as_text=True)
    with db.session() as session:
        token = create_user(session, "ada")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/signin").get_data(as_text=True)).group(1)
    client.post("/signin", data={"name": "ada", "token": token, "csrf_token": csrf})
    page = client.get(f"/jobs/{job['id']}").get_data(as_text=True)
    assert 'id="cancel-job"' in page
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert client.post(f"/jobs/{job['id']}/cancel", data={}).status_code == 400   # no CSRF token: refused
    assert client.post(f"/jobs/{job['id']}/cancel", data={"csrf_token": csrf}).status_code == 303
    assert client.get(f"/api/v1/jobs/{job['id']}").get_json()["state"] == "cancelled"


def _all_pages(client, url: str, headers: dict[str, str]) -> list[dict]:  # type: ignore[no-untyped-def]
    page = client.get(url, headers=headers).get_json()
    items = page["items"]
    while page["next"]:
        page = client.get(page["next"], headers=headers).get_json()
        items += page["items"]
    return items


def test_users_are_listed_newest_first_for_the_admin_without_their_tokens(client, db):
    from app.auth.tokens import create_user
    with db.session() as session:
        tokens = [create_user(session, name, role) for name, role in [("ada", "admin"), ("bob", "maintainer"),
                                                                        ("cy", "maintainer")]]
        session.commit()
    assert client.get("/api/v1/users").status_code == 401
    response = client.get("/api/v1/users?limit=2", headers=admin_headers())
    assert len(response.get_json()["items"]) == 2 and response.get_json()["next"]
    users = _all_pages(client, "/api/v1/users?limit=2", admin_headers())
    assert [(u["name"], u["role"], u["disabled"]) for u in users] == [
        ("cy", "maintainer", False), ("bob", "maintainer", False), ("ada", "admin", False)]
    text = client.get("/api/v1/users", headers=admin_headers()).get_data(as_text=True)
    assert not any(token in text for token in tokens) and "token_hash" not in text and "hash" not in text


def test_a_maintainer_may_not_list_users(client, db):
    from app.auth.tokens import create_user
    with db.session() as session:
        token = create_user(session, "bob")
        session.commit()
    assert client.get("/api/v1/users", headers={"Authorization": f"Bearer {token}"}).status_code == 403


def test_registration_tokens_are_listed_with_their_state_and_never_their_value(client, app):
    from app.auth.tokens import hash_token
    made = [client.post("/api/v1/registration-tokens", json={"note": f"rack {n}"}, headers=admin_headers()).get_json()
            for n in range(3)]
    client.post(f"/api/v1/registration-tokens/{made[0]['id']}/revoke", headers=admin_headers())
    assert client.get("/api/v1/registration-tokens").status_code == 401
    tokens = _all_pages(client, "/api/v1/registration-tokens?limit=1", admin_headers())
    assert [(t["note"], t["revoked"]) for t in tokens] == [("rack 2", False), ("rack 1", False), ("rack 0", True)]
    text = client.get("/api/v1/registration-tokens", headers=admin_headers()).get_data(as_text=True)
    assert not any(m["token"] in text or hash_token(m["token"]) in text for m in made)


def test_a_bad_page_of_users_is_a_422_naming_the_parameter(client):
    response = client.get("/api/v1/users?limit=0", headers=admin_headers())
    assert response.status_code == 422 and response.get_json()["field"] == "limit"
