"""What a new operator meets first on the command line: a quick `--help` that lists every
command, `--version`, list commands, `parallax catalogue sync`, and one clear line for the
natural mistakes (an unreachable database, `platforms = "cpu"`, a server URL without a scheme)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import COMMANDS, SUMMARIES, main
from tests.support.settings import CATALOGUE_TOML

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("flask", "sqlalchemy", "gevent", "gunicorn", "numpy", "scipy", "requests", "alembic", "psycopg")


@pytest.fixture
def env(tmp_path):
    config = tmp_path / "parallax.toml"
    config.write_text(CATALOGUE_TOML)
    return {"PARALLAX_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}", "PARALLAX_CONFIG": str(config)}


def invoke(env, *args):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_top_level_help_imports_no_command_dependencies():
    script = ("import sys\nfrom app.cli import main\n"
              "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
              f"print('LOADED', sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "LOADED []"
    for name in COMMANDS:
        assert f"  {name} " in result.stdout, f"{name} is missing from parallax --help"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_summary_is_the_commands_own_first_line(name):
    command = main.get_command(None, name)  # type: ignore[arg-type]
    first = (command.help or "").strip().splitlines()[0]
    assert SUMMARIES[name][:20] == first[:20]


def test_version_names_the_program_and_its_version():
    from importlib.metadata import version
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"parallax, version {version('parallax-ci')}"


def test_runner_help_names_the_operator_subcommands():
    result = CliRunner().invoke(main, ["runner", "--help"])
    assert result.exit_code == 0 and "parallax runner disable ID" in result.output and "parallax runner list" in result.output


def test_list_commands_show_what_was_added(env):
    from app.core.db import Database
    from app.core.models import Runner
    invoke(env, "db", "upgrade")
    invoke(env, "user", "add", "ada")
    invoke(env, "token", "create", "--note", "first box")
    db = Database(env["PARALLAX_DATABASE_URL"])
    with db.session() as session:
        session.add(Runner(name="box-1", platform="cpu", labels={"platform": "cpu"}, token_hash="1" * 64))
    db.engine.dispose()
    assert invoke(env, "repo", "list").output.startswith("demo/engine\thttps://github.com/demo/engine.git\tmain\t")
    assert invoke(env, "user", "list").output.startswith("ada\tmaintainer\tactive\t")
    assert invoke(env, "token", "list").output.startswith("1\tactive\tnever expires\tfirst box")
    assert invoke(env, "runner", "list").output.startswith("1\tbox-1\tcpu\tenabled\tnever seen\tplatform=cpu")
    assert invoke(env, "jobs", "list").exit_code == 0


def test_catalogue_sync_names_each_change_and_then_nothing(env, tmp_path):
    invoke(env, "db", "upgrade")
    assert "the database already matches" in invoke(env, "catalogue", "sync").output
    config = Path(env["PARALLAX_CONFIG"])
    config.write_text(CATALOGUE_TOML.replace('platforms = ["cuda", "rocm", "cpu"]', 'platforms = ["cpu"]'))
    result = invoke(env, "catalogue", "sync")
    assert "parallax.toml applied: suite decode-throughput updated" in result.stderr
    assert "1 change(s) applied" in result.stdout
    assert "the database already matches" in invoke(env, "catalogue", "sync").output


def test_a_bare_string_for_platforms_is_named_with_the_fix(env):
    config = Path(env["PARALLAX_CONFIG"])
    config.write_text(CATALOGUE_TOML.replace('platforms = ["cuda", "rocm", "cpu"]', 'platforms = "cpu"'))
    result = invoke(env, "db", "upgrade")
    assert result.exit_code == 1
    assert 'suites[0].platforms must be a list of strings: write ["cpu"], not "cpu"' in result.output


@pytest.mark.parametrize("args", [["db", "upgrade"], ["token", "create"]])
def test_an_unreachable_database_is_one_line_with_the_fix(env, args):
    url = "postgresql+psycopg://parallax:s3cret@127.0.0.1:1/parallax"
    result = CliRunner().invoke(main, args, env=dict(env, PARALLAX_DATABASE_URL=url))
    assert result.exit_code == 1 and "Traceback" not in result.output and "s3cret" not in result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("Error: cannot use the database at postgresql+psycopg://parallax:***@127.0.0.1:1/parallax")
    assert "PARALLAX_DATABASE_URL" in line and "parallax db upgrade" in line


def test_serve_on_a_missing_database_is_one_line(env):
    url = "postgresql+psycopg://postgres@127.0.0.1:5432/parallax_no_such_database_32"
    result = subprocess.run([str(ROOT / ".venv/bin/parallax"), "serve", "--port", "0"],
                            env={**env, "PARALLAX_DATABASE_URL": url, "PATH": "/usr/bin"},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert 'database "parallax_no_such_database_32" does not exist' in result.stderr


def test_a_runner_server_without_a_scheme_is_refused_at_once(tmp_path):
    result = CliRunner().invoke(main, ["runner", "--server", "127.0.0.1:8765", "--registration-token", "x",
                                       "--work-dir", str(tmp_path)])
    assert result.exit_code == 2 and "write http://127.0.0.1:8765" in result.output


def test_text_logs_carry_the_structured_fields():
    import logging

    from app.core.logs import TextFormatter
    record = logging.LogRecord("app.github.ingest", logging.WARNING, __file__, 1, "webhook processing failed", None, None)
    record.px_delivery, record.px_error = "abc-123", "CommitMissing: commit e is not in /srv/x"
    line = TextFormatter().format(record)
    assert line.endswith('webhook processing failed delivery=abc-123 error="CommitMissing: commit e is not in /srv/x"')
    assert json.loads(line.split("error=")[1]) == record.px_error


@pytest.mark.parametrize("argv, patched", [
    (["parallax", "serve"], True), (["parallax", "serve", "--worker-class", "gevent"], True),
    (["parallax", "serve", "--worker-class=gthread"], False), (["parallax", "serve", "--dev"], False),
    (["parallax", "serve", "--help"], False), (["parallax", "db", "upgrade"], False), (["pytest"], False)])
def test_only_a_gevent_serve_patches_the_standard_library_first(argv, patched):
    from app.cli.serve import _gevent_serve
    assert _gevent_serve(argv) is patched


def test_serve_workers_print_no_monkey_patch_warning_and_leave_no_socket_in_home(tmp_path):
    import os
    import signal
    import time

    import requests

    from app.core.migrate import upgrade
    from tests.support.runner_harness import free_port
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    upgrade(url)
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env.update(PARALLAX_DATABASE_URL=url, HOME=str(home))
    with open(tmp_path / "serve.log", "wb") as log:
        proc = subprocess.Popen([str(ROOT / ".venv/bin/parallax"), "serve", "--port", str(port), "--workers", "2"],
                                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            time.sleep(0.5)
        else:
            raise AssertionError("the service did not answer /healthz: " + (tmp_path / "serve.log").read_text())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    output = (tmp_path / "serve.log").read_text()
    assert "Booting worker" in output and "MonkeyPatchWarning" not in output
    assert list(home.iterdir()) == []
