"""An edit of the parallax.toml a service was started with, not yet applied to the database,
is named in GET /healthz and in a banner on the home page until `parallax catalogue sync`."""
from __future__ import annotations

import tomllib

import pytest
from click.testing import CliRunner

from app.cli import main
from app.core.config import parse_catalogue
from tests.support.settings import CATALOGUE_TOML, make_settings


@pytest.fixture
def started(database_url, tmp_path):  # type: ignore[no-untyped-def]
    """A service started with parallax.toml (CATALOGUE_TOML) at its path."""
    from app.web import create_app
    config = tmp_path / "parallax.toml"
    config.write_text(CATALOGUE_TOML)
    settings = make_settings(database_url, config_path=str(config), **parse_catalogue(tomllib.loads(CATALOGUE_TOML)))
    flask_app = create_app(settings)
    yield flask_app, config
    flask_app.extensions["parallax.db"].engine.dispose()


def test_an_unapplied_edit_is_stale_in_healthz_and_on_the_home_page_until_synced(started, database_url):
    flask_app, config = started
    client = flask_app.test_client()
    assert client.get("/healthz").get_json()["catalogue"] == "current"
    assert 'id="catalogue-stale"' not in client.get("/").get_data(as_text=True)

    config.write_text(CATALOGUE_TOML + "repeats = 7\n")  # the last table is the suite's
    home = client.get("/").get_data(as_text=True)  # the page's own request runs the check (SQLite's lock)
    assert 'id="catalogue-stale"' in home and "suite decode-throughput updated" in home
    flask_app.extensions["parallax.catalogue_check"].recheck_s = 0.0  # look again at every request from here
    assert client.get("/healthz").get_json()["catalogue"] == "stale: run parallax catalogue sync"

    result = CliRunner().invoke(main, ["catalogue", "sync"], catch_exceptions=False,
                                env={"PARALLAX_DATABASE_URL": database_url, "PARALLAX_CONFIG": str(config)})
    assert result.exit_code == 0, result.output
    assert client.get("/healthz").get_json()["catalogue"] == "current"
    assert 'id="catalogue-stale"' not in client.get("/").get_data(as_text=True)


def test_a_broken_edit_says_the_file_cannot_be_applied(started):
    flask_app, config = started
    config.write_text(CATALOGUE_TOML.replace('platforms = ["cuda", "rocm", "cpu"]', 'platforms = "cpu"'))
    status = flask_app.test_client().get("/healthz").get_json()["catalogue"]
    assert status.startswith("stale: ") and "cannot be applied" in status
