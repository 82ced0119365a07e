"""Users: personal API tokens for alert triage (maintainers) and operator calls (admins)."""
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from app.auth.tokens import create_user, hash_token
from app.core.models import User
from tests.support.service_api import SHA_A, open_alert


def token_for(db, name, role="maintainer"):
    with db.session() as session:
        return create_user(session, name, role)


@pytest.fixture
def alert_id(db):
    return open_alert(db)


def test_token_is_stored_only_as_a_hash(db):
    token = token_for(db, "ada")
    with db.session() as session:
        user = session.scalar(select(User).where(User.name == "ada"))
        assert user.role == "maintainer" and token not in user.token_hash


def test_a_maintainer_triages_an_alert_and_is_recorded(client, db, alert_id):
    token = token_for(db, "ada")
    response = client.patch(f"/api/v1/alerts/{alert_id}", json={"state": "acknowledged", "note": "looking"},
                            headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    assert response.get_json()["updated_by"] == "ada"


def test_an_unknown_user_token_is_401(client, alert_id):
    response = client.patch(f"/api/v1/alerts/{alert_id}", json={"state": "acknowledged"},
                            headers={"Authorization": "Bearer pxu_nobody"})
    assert response.status_code == 401


def test_a_maintainer_cannot_queue_jobs(client, db):
    token = token_for(db, "ada")
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": SHA_A},
                           headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 403 and "needs an admin" in response.get_json()["detail"]


def test_an_admin_user_can_queue_jobs(client, db):
    token = token_for(db, "grace", "admin")
    response = client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": SHA_A},
                           headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 201


def test_duplicate_names_are_refused(db):
    token_for(db, "ada")
    with pytest.raises(ValueError, match="already exists"):
        token_for(db, "ada")


def test_unknown_role_is_refused(db):
    with pytest.raises(ValueError, match="role must be one of"):
        token_for(db, "ada", "owner")


def test_user_add_command_prints_the_token_last(tmp_path):
    from app.cli import main
    env = {"PARALLAX_DATABASE_URL": f"sqlite:///{tmp_path / 'u.db'}", "PARALLAX_CONFIG": ""}
    runner = CliRunner()
    runner.invoke(main, ["db", "upgrade"], env=env, catch_exceptions=False)
    result = runner.invoke(main, ["user", "add", "ada", "--role", "admin"], env=env, catch_exceptions=False)
    assert result.exit_code == 0 and result.stdout.strip().splitlines()[-1].startswith("pxu_")
    again = runner.invoke(main, ["user", "add", "ada"], env=env, catch_exceptions=False)
    assert again.exit_code == 1 and "already exists" in again.output


def test_a_wrong_token_is_401_whichever_side_of_a_users_hash_it_falls(client, db, alert_id):
    real = token_for(db, "ada")
    below = next(f"pxu_wrong{i}" for i in range(1000) if hash_token(f"pxu_wrong{i}") < hash_token(real))
    above = next(f"pxu_wrong{i}" for i in range(1000) if hash_token(f"pxu_wrong{i}") > hash_token(real))
    for wrong in (below, above):
        response = client.patch(f"/api/v1/alerts/{alert_id}", json={"state": "acknowledged"},
                                headers={"Authorization": f"Bearer {wrong}"})
        assert response.status_code == 401, wrong


def test_a_name_that_sorts_before_an_existing_one_is_a_new_user(db):
    token_for(db, "carol")
    token_for(db, "bob")
    with db.session() as session:
        assert sorted(session.scalars(select(User.name))) == ["bob", "carol"]
