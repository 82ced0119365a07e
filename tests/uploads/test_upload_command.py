"""`parallax upload` and `parallax token create --ci`, as CI would run them: the command in
process against the real service over loopback, and (slow) as a subprocess from a fresh virtual
environment holding only the runner extra, against `parallax serve`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from app.cli import main
from app.core.models import CiUpload, Run
from runners.upload import ci_run
from tests.support.service_api import document
from tests.uploads.conftest import REPOSITORY, ci_token

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def upload(server, token: str, *args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, ["upload", "--server", server.url, "--token", token, *args], env=env or {},
                              catch_exceptions=False)


def test_github_actions_names_the_run_and_its_attempt():
    env = {"GITHUB_ACTIONS": "true", "GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "sgl-project/sglang",
           "GITHUB_RUN_ID": "123", "GITHUB_RUN_ATTEMPT": "2"}
    found = ci_run(env)
    assert found is not None and found.provider == "github-actions"
    assert found.run_url == "https://github.com/sgl-project/sglang/actions/runs/123/attempts/2"


def test_buildkite_names_the_build_and_its_job():
    found = ci_run({"BUILDKITE": "true", "BUILDKITE_BUILD_URL": "https://buildkite.com/vllm/ci/builds/9",
                    "BUILDKITE_JOB_ID": "01j"})
    assert found is not None and (found.provider, found.run_url) == ("buildkite", "https://buildkite.com/vllm/ci/builds/9#01j")


def test_outside_ci_there_is_no_run():
    assert ci_run({"PATH": "/usr/bin"}) is None


def test_upload_reads_repository_sha_and_run_from_the_github_environment(live_server, db, token, upstream, tmp_path):
    env = {"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": REPOSITORY, "GITHUB_SHA": upstream.head(),
           "GITHUB_RUN_ID": "77", "GITHUB_RUN_ATTEMPT": "1"}
    result = upload(live_server, token, "--platform", "cpu", "--suite", "decode-throughput",
                    str(write(tmp_path / "results.json", document())), env=env)
    assert result.exit_code == 0, result.output
    # An unseen commit: the service answered 202 and the command waited for the uploads duty.
    assert "queued: upload 1 waits for the service to read" in result.stderr and "stored: run" in result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["created"] is True
    again = upload(live_server, token, "--platform", "cpu", "--suite", "decode-throughput",
                   str(write(tmp_path / "results.json", document())), env=env)
    assert again.exit_code == 0 and "already stored (nothing new)" in again.stderr
    with db.session() as session:
        (row,) = session.scalars(select(CiUpload)).all()
        assert row.run_url == f"https://github.com/{REPOSITORY}/actions/runs/77/attempts/1"
        assert session.get(Run, row.run_id).platform == "cpu"


def test_upload_converts_a_tools_output_with_an_adapter(live_server, db, token, upstream, tmp_path):
    from tests.adapters import tool_output
    tool_output.vllm_throughput(tmp_path / "throughput.json", tokens_per_second=9000.0)
    result = upload(live_server, token, "--repository", REPOSITORY, "--sha", upstream.head(), "--platform", "cuda",
                    "--suite", "decode-throughput", "--adapter", "vllm-bench-throughput", "--no-facts",
                    "--env", "device=NVIDIA H100 80GB HBM3", str(tmp_path / "throughput.json"))
    assert result.exit_code == 0, result.output
    with db.session() as session:
        run = session.scalar(select(Run))
        assert run.environment == {"platform": "cuda", "device": "NVIDIA H100 80GB HBM3"}
        assert {m.metric for m in run.measurements} == {"request_throughput", "total_token_throughput", "elapsed_time"}


def test_upload_exits_non_zero_with_the_services_reason(live_server, app, upstream, tmp_path):
    token = ci_token(app, platform="rocm")
    result = upload(live_server, token, "--repository", REPOSITORY, "--sha", upstream.head(), "--platform", "cpu",
                    "--suite", "decode-throughput", str(write(tmp_path / "results.json", document())))
    assert result.exit_code == 1
    assert "HTTP 403" in result.stderr and "may upload only for platform 'rocm'" in result.stderr


def test_upload_of_a_sha_the_repository_lacks_waits_for_the_refusal_and_exits_non_zero(live_server, db, token,
                                                                                       upstream, tmp_path):
    result = upload(live_server, token, "--repository", REPOSITORY, "--sha", "e" * 40, "--platform", "cpu",
                    "--suite", "decode-throughput", str(write(tmp_path / "results.json", document())))
    assert result.exit_code == 1 and "queued: upload" in result.stderr
    assert "HTTP 422" in result.stderr and "is not in repository 'demo/engine'" in result.stderr
    with db.session() as session:
        assert session.scalar(select(Run)) is None


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """A migrated SQLite database and a parallax.toml tracking the repository, for the CLI."""
    config = tmp_path / "parallax.toml"
    config.write_text(f'[[repositories]]\nname = "{REPOSITORY}"\nurl = "{tmp_path}/upstream"\n\n'
                      '[[suites]]\nname = "decode-throughput"\ncommand = ["true"]\nplatforms = ["cuda", "rocm"]\n')
    env = {"PARALLAX_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}", "PARALLAX_CONFIG": str(config)}
    assert invoke(env, "db", "upgrade").exit_code == 0
    return env


def invoke(env: dict[str, str], *args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_token_create_ci_prints_a_scoped_token_last(cli_env):
    from app.auth.ci_tokens import ci_scope_for
    from app.core.db import Database
    created = invoke(cli_env, "token", "create", "--ci", "--repository", REPOSITORY, "--platform", "rocm",
                     "--expires-in-days", "30")
    assert created.exit_code == 0, created.output
    value = created.stdout.strip().splitlines()[-1]
    assert value.startswith("pxc_") and f"{REPOSITORY} on platform rocm" in created.stderr
    db = Database(cli_env["PARALLAX_DATABASE_URL"])
    with db.session() as session:
        scope = ci_scope_for(session, value)
        assert (scope.repository, scope.platform) == (REPOSITORY, "rocm")
    db.engine.dispose()


def test_token_revoke_ci_refuses_the_token_afterwards(cli_env):
    from app.auth.ci_tokens import ci_scope_for
    from app.core.db import Database
    from app.core.errors import Unauthorized
    value = invoke(cli_env, "token", "create", "--ci", "--repository", REPOSITORY).stdout.strip().splitlines()[-1]
    revoked = invoke(cli_env, "token", "revoke", "--ci", "1")
    assert revoked.exit_code == 0 and "CI token 1 revoked" in revoked.output
    db = Database(cli_env["PARALLAX_DATABASE_URL"])
    with db.session() as session, pytest.raises(Unauthorized, match="revoked"):
        ci_scope_for(session, value)
    db.engine.dispose()


def test_token_create_ci_refuses_an_unknown_repository(cli_env):
    result = invoke(cli_env, "token", "create", "--ci", "--repository", "nobody/nothing")
    assert result.exit_code == 1 and "unknown repository 'nobody/nothing'; known: demo/engine" in result.output


def test_token_create_ci_needs_a_repository(cli_env):
    result = invoke(cli_env, "token", "create", "--ci")
    assert result.exit_code == 2 and "--ci needs --repository" in result.output


def test_an_admin_creates_and_revokes_ci_tokens_over_the_api(live_server, upstream, tmp_path):
    import requests

    from tests.support.service_api import admin_headers
    created = requests.post(f"{live_server.url}/api/v1/ci-tokens", headers=admin_headers(), timeout=60,
                            json={"repository": REPOSITORY, "platform": "cpu", "expires_in_days": 7})
    assert created.status_code == 201, created.text
    token = created.json()["token"]
    assert created.json()["platform"] == "cpu" and created.json()["expires_at"]
    results = str(write(tmp_path / "results.json", document()))
    args = ("--repository", REPOSITORY, "--sha", upstream.head(), "--platform", "cpu", "--suite", "decode-throughput")
    assert upload(live_server, token, *args, results).exit_code == 0
    revoked = requests.post(f"{live_server.url}/api/v1/ci-tokens/{created.json()['id']}/revoke",
                            headers=admin_headers(), timeout=60)
    assert revoked.status_code == 200 and revoked.json() == {"id": created.json()["id"], "revoked": True}
    refused = upload(live_server, token, *args, results)
    assert refused.exit_code == 1 and "HTTP 401" in refused.stderr and "revoked" in refused.stderr


def test_only_an_admin_creates_ci_tokens(live_server, token):
    import requests
    reply = requests.post(f"{live_server.url}/api/v1/ci-tokens", json={"repository": REPOSITORY},
                          headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert reply.status_code == 401
