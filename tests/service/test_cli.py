"""The `parallax` operator commands, run as a user would (click's runner, real database)."""
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from tests.support.settings import CATALOGUE_TOML

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path):
    config = tmp_path / "parallax.toml"
    config.write_text(CATALOGUE_TOML)
    return {"PARALLAX_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}", "PARALLAX_CONFIG": str(config)}


def invoke(env, *args):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


@pytest.mark.parametrize("command", [[], ["db", "upgrade"], ["serve"], ["token", "create"], ["repo", "add"], ["user", "add"],
                                     ["enqueue"], ["demo"]])
def test_every_command_has_help(command):
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output


def test_db_upgrade_reports_the_revision(env):
    from app.core.migrate import head_revision
    result = invoke(env, "db", "upgrade")
    assert result.exit_code == 0 and f"database at revision {head_revision()}" in result.output


def test_commands_refuse_a_database_that_is_behind(env):
    result = invoke(env, "token", "create")
    assert result.exit_code == 1 and "Run `parallax db upgrade` first" in result.output


def test_token_create_prints_the_token_last(env):
    invoke(env, "db", "upgrade")
    result = invoke(env, "token", "create")
    assert result.exit_code == 0 and result.stdout.strip().splitlines()[-1].startswith("pxr_")


def test_enqueue_queues_the_matrix(env):
    invoke(env, "db", "upgrade")
    invoke(env, "repo", "add", "https://github.com/demo/engine.git")
    result = invoke(env, "enqueue", "demo/engine", "c" * 40)
    assert result.exit_code == 0, result.output
    assert sorted(line.split(" on ")[1].split(":")[0] for line in result.output.splitlines()) == ["cpu", "cuda", "rocm"]


def test_enqueue_refuses_a_short_sha(env):
    invoke(env, "db", "upgrade")
    result = invoke(env, "enqueue", "demo/engine", "abc; rm -rf /")
    assert result.exit_code == 2 and "40-character" in result.output


def test_enqueue_refuses_an_unknown_repository(env):
    invoke(env, "db", "upgrade")
    result = invoke(env, "enqueue", "nobody/nothing", "c" * 40)
    assert result.exit_code == 1 and "unknown repository 'nobody/nothing'" in result.output


def test_enqueue_refuses_an_unknown_suite(env):
    invoke(env, "db", "upgrade")
    result = invoke(env, "enqueue", "demo/engine", "c" * 40, "--suite", "nope")
    assert result.exit_code == 1 and "unknown suite 'nope'" in result.output


def test_repo_add_derives_owner_and_name(env):
    invoke(env, "db", "upgrade")
    result = invoke(env, "repo", "add", "https://github.com/sgl-project/sglang.git", "--default-branch", "main")
    assert "added repository sgl-project/sglang" in result.output


def test_a_broken_config_file_is_named(env, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[[suites]]\nname = 'x'\n")
    result = invoke(dict(env, PARALLAX_CONFIG=str(bad)), "db", "upgrade")
    assert result.exit_code == 1 and "suites[0]: missing required key 'command'" in result.output


def test_serve_refuses_an_unmigrated_database(env):
    result = subprocess.run([str(ROOT / ".venv/bin/parallax"), "serve", "--port", "0"], env={**env, "PATH": "/usr/bin"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "Run `parallax db upgrade` first" in result.stderr


def test_token_revoke_refuses_the_token_afterwards(env):
    from app.auth.tokens import registration_token_for
    from app.core.db import Database
    from app.core.errors import Unauthorized
    invoke(env, "db", "upgrade")
    token = invoke(env, "token", "create").output.strip().splitlines()[-1]
    result = invoke(env, "token", "revoke", "1")
    assert result.exit_code == 0 and "revoked" in result.output
    db = Database(env["PARALLAX_DATABASE_URL"])
    with db.session() as session, pytest.raises(Unauthorized):
        registration_token_for(session, token)
    db.engine.dispose()


def test_user_disable_and_runner_disable_name_what_they_did(env):
    from app.core.db import Database
    from app.core.models import Runner, User
    invoke(env, "db", "upgrade")
    invoke(env, "user", "add", "ada")
    db = Database(env["PARALLAX_DATABASE_URL"])
    with db.session() as session:
        session.add(Runner(name="mi300x", platform="rocm", labels={}, token_hash="0" * 64))
    assert "user ada disabled" in invoke(env, "user", "disable", "ada").output
    assert "runner 1 (mi300x) disabled" in invoke(env, "runner", "disable", "1").output
    with db.session() as session:
        assert session.get(User, 1).disabled and session.get(Runner, 1).disabled
    db.engine.dispose()
    assert CliRunner().invoke(main, ["runner", "disable", "7"], env=env).exit_code == 1


@pytest.mark.parametrize("command", [["runner", "disable", "99"], ["user", "disable", "nobody"], ["token", "revoke", "99"]])
def test_taking_back_something_unknown_names_it_and_exits_1(env, command):
    invoke(env, "db", "upgrade")
    result = invoke(env, *command)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert command[-1] in result.output.splitlines()[-1]
