"""Configuration: environment variables and parallax.toml, with bad values named."""
import pytest

from app.core.config import ConfigError, load_settings, parse_catalogue
from tests.support.settings import REPO_ROOT


def test_defaults_match_the_contract():
    settings = load_settings(env={}, config_path=None)
    assert settings.database_url == "sqlite:///var/parallax.db"
    assert settings.github_api_url == "https://api.github.com"


def test_environment_overrides(tmp_path):
    settings = load_settings(env={"PARALLAX_DATABASE_URL": "sqlite:///x.db", "PARALLAX_ADMIN_TOKEN": "t",
                                  "PARALLAX_GITHUB_API_URL": "http://127.0.0.1:9/"})
    assert (settings.database_url, settings.admin_token, settings.github_api_url) == (
        "sqlite:///x.db", "t", "http://127.0.0.1:9")


def test_the_example_catalogue_parses():
    settings = load_settings(env={"PARALLAX_CONFIG": str(REPO_ROOT / "parallax.example.toml")})
    assert [s.name for s in settings.suites] == ["decode-throughput", "gsm8k"]
    assert settings.suite("gsm8k").platforms == ("cuda", "rocm")


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="not a file"):
        load_settings(env={"PARALLAX_CONFIG": str(tmp_path / "missing.toml")})


def test_invalid_toml_is_named(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("[[suites]\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(env={"PARALLAX_CONFIG": str(path)})


@pytest.mark.parametrize("suite,message", [
    ({"name": "s", "command": "python job.py"}, "command must be list"),
    ({"name": "s", "command": []}, "non-empty list of strings"),
    ({"name": "s", "command": ["x"], "timeout_s": 0}, "timeout_s must be a positive integer"),
    ({"name": "s", "command": ["x"], "commit_policy": "some"}, "commit_policy must be 'every' or 'head'"),
])
def test_bad_suites_are_refused(suite, message):
    with pytest.raises(ConfigError, match=message):
        parse_catalogue({"suites": [suite]})


def test_non_integer_environment_value_is_named():
    with pytest.raises(ConfigError, match="PARALLAX_LEASE_S must be an integer"):
        load_settings(env={"PARALLAX_LEASE_S": "soon"})


def test_size_limits_come_from_the_environment():
    settings = load_settings(env={"PARALLAX_MAX_WEBHOOK_BYTES": "1000", "PARALLAX_MAX_DOCUMENT_BYTES": "2000"})
    assert (settings.max_webhook_bytes, settings.max_document_bytes) == (1000, 2000)
