"""The operator's view of webhook deliveries: a failed delivery is listed with its error by the
command line, the API and the `/deliveries` page (signed-in users, like the API's token); retry
processes it again, skip gives up on it; the home page counts the pending and failed ones."""
from __future__ import annotations

import re

from click.testing import CliRunner
from sqlalchemy import select

from app.auth.tokens import create_user
from app.cli import main
from app.core.models import WebhookDelivery
from app.github.ingest import process_pending
from tests.support.github import post_webhook, push_payload
from tests.support.settings import ADMIN_TOKEN

GHOST = "e" * 40
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def fail_for_good(client, app, db, upstream) -> str:  # type: ignore[no-untyped-def]
    """A push naming a commit git does not have, processed until it gives up."""
    from datetime import datetime, timezone
    base = upstream.commit()
    post_webhook(client, "push", push_payload(base, GHOST, [GHOST]), delivery="ghost-delivery")
    for _ in range(3):
        process_pending(db, app.extensions["parallax.settings"])
        with db.session() as session:
            session.query(WebhookDelivery).update({"claimed_until": datetime(2000, 1, 1, tzinfo=timezone.utc)})
    with db.session() as session:
        assert session.scalar(select(WebhookDelivery.state)) == "error"
    return "ghost-delivery"


def cli(app, *args: str):  # type: ignore[no-untyped-def]
    settings = app.extensions["parallax.settings"]
    env = {"PARALLAX_DATABASE_URL": settings.database_url, "PARALLAX_DATA_DIR": settings.data_dir}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def state_of(db, delivery: str) -> str:  # type: ignore[no-untyped-def]
    with db.session() as session:
        return session.scalar(select(WebhookDelivery.state).where(WebhookDelivery.delivery_id == delivery))


def test_the_command_lists_a_failed_delivery_with_its_error_and_the_counts(client, app, db, tracked, upstream):
    fail_for_good(client, app, db, upstream)
    result = cli(app, "deliveries", "list", "--state", "error")
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "ghost-delivery" in line)
    assert "error" in line and GHOST in line and "after a fresh fetch" in line
    assert "0 pending (0 waiting for a retry), 1 failed" in result.output


def test_retry_processes_a_failed_delivery_again_once_the_commit_exists(client, app, db, tracked, upstream):
    fail_for_good(client, app, db, upstream)
    result = cli(app, "deliveries", "retry", "ghost-delivery")
    assert result.exit_code == 0 and "queued again" in result.output
    assert state_of(db, "ghost-delivery") == "pending"
    with db.session() as session:
        assert session.scalar(select(WebhookDelivery.attempts)) == 0


def test_skip_gives_up_on_a_delivery_and_keeps_its_last_error(client, app, db, tracked, upstream):
    fail_for_good(client, app, db, upstream)
    assert cli(app, "deliveries", "skip", "ghost-delivery").exit_code == 0
    with db.session() as session:
        delivery = session.scalar(select(WebhookDelivery))
        assert delivery.state == "skipped" and "the command line" in delivery.result and GHOST in delivery.result
    again = cli(app, "deliveries", "skip", "ghost-delivery")
    assert again.exit_code == 1 and "is skipped; only pending or failed" in again.output


def test_an_unknown_delivery_is_named(client, app, db, tracked):
    result = cli(app, "deliveries", "retry", "no-such-delivery")
    assert result.exit_code == 1 and "delivery 'no-such-delivery' does not exist" in result.output


def test_the_api_lists_deliveries_to_a_token_holder_only_and_pages_on(client, app, db, tracked, upstream):
    fail_for_good(client, app, db, upstream)
    head = upstream.commit()
    post_webhook(client, "push", push_payload(head, head, [head]), delivery="second")
    assert client.get("/api/v1/deliveries").status_code == 401
    first = client.get("/api/v1/deliveries?limit=1", headers=ADMIN).get_json()
    assert [d["delivery"] for d in first["items"]] == ["second"] and first["next"]
    second = client.get(first["next"], headers=ADMIN).get_json()
    assert [(d["delivery"], d["state"]) for d in second["items"]] == [("ghost-delivery", "error")]
    assert GHOST in second["items"][0]["result"] and second["next"] is None


def test_retry_and_skip_through_the_api(client, app, db, tracked, upstream):
    fail_for_good(client, app, db, upstream)
    assert client.post("/api/v1/deliveries/ghost-delivery/retry", headers=ADMIN).get_json()["state"] == "pending"
    body = client.post("/api/v1/deliveries/ghost-delivery/skip", headers=ADMIN).get_json()
    assert body["state"] == "skipped" and body["result"].startswith("skipped by admin")
    assert client.post("/api/v1/deliveries/ghost-delivery/retry", headers=ADMIN).status_code == 409


def test_the_home_page_counts_failed_deliveries_and_the_list_needs_a_signed_in_user(client, app, db, tracked, upstream):
    fail_for_good(client, app, db, upstream)
    home = client.get("/").get_data(as_text=True)
    assert re.search(r'id="delivery-counts"[^>]*>0 pending, 1 failed<', home)
    response = client.get("/deliveries")
    assert response.status_code == 302 and "/signin?next=/deliveries" in response.headers["Location"]


def test_a_signed_in_user_retries_from_the_page(client, app, db, tracked, upstream):
    fail_for_good(client, app, db, upstream)
    with db.session() as session:
        token = create_user(session, "ada")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/signin").get_data(as_text=True)).group(1)
    client.post("/signin", data={"name": "ada", "token": token, "csrf_token": csrf})
    page = client.get("/deliveries").get_data(as_text=True)
    row = page[page.index('data-delivery="ghost-delivery"'):]
    assert GHOST in row[:row.index("</tr>")] and "after a fresh fetch" in row[:row.index("</tr>")]
    assert "/deliveries/ghost-delivery/retry" in page
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    response = client.post("/deliveries/ghost-delivery/retry", data={"csrf_token": csrf})
    assert response.status_code == 303
    assert state_of(db, "ghost-delivery") == "pending"
