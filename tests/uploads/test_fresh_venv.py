"""`parallax upload` from a fresh virtual environment with only the runner extra installed (no
Flask, no database driver), as a CI machine would have it, against `parallax serve`: it
retries until the service answers, stores once, and exits non-zero with the service's reason."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from app.demo.service_process import ServiceProcess
from bench.ports import reserve_port
from tests.support.github import Upstream
from tests.support.service_api import document

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runner_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with `pip install <this checkout>[runner]` and nothing else (not even
    pip: this environment's pip installs into it, which saves the 3 CPU-s of `ensurepip`)."""
    venv = tmp_path_factory.mktemp("runner-venv") / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "install", "--quiet",
                    "--disable-pip-version-check", f"{ROOT}[runner]"], check=True, timeout=600, capture_output=True)
    return venv


@pytest.fixture
def service(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A migrated SQLite database, the repository (a real git repository) and a CI token for
    ROCm; `parallax serve` is started by the test, on a port chosen here."""
    upstream = Upstream(tmp_path / "upstream", branch="main")
    upstream.commits(3)
    config = tmp_path / "parallax.toml"
    config.write_text(f'[[repositories]]\nname = "demo/engine"\nurl = "{upstream.path}"\n\n'
                      '[[suites]]\nname = "decode-throughput"\ncommand = ["true"]\nplatforms = ["cuda", "rocm"]\n')
    env = {"PARALLAX_DATABASE_URL": f"sqlite:///{tmp_path / 'service.db'}", "PARALLAX_CONFIG": str(config),
           "PARALLAX_DATA_DIR": str(tmp_path / "data")}
    parallax = str(ROOT / ".venv/bin/parallax")
    subprocess.run([parallax, "db", "upgrade"], env={**os.environ, **env}, check=True, capture_output=True, timeout=120)
    created = subprocess.run([parallax, "token", "create", "--ci", "--repository", "demo/engine", "--platform", "rocm"],
                             env={**os.environ, **env}, check=True, capture_output=True, text=True, timeout=120)
    return env, created.stdout.strip().splitlines()[-1], upstream


def stored_runs(url: str) -> int:
    from app.core.db import Database
    from app.core.models import Run
    db = Database(url)
    try:
        with db.session() as session:
            return len(session.scalars(select(Run)).all())
    finally:
        db.engine.dispose()


def test_the_runner_extra_alone_has_no_flask(runner_venv):
    found = subprocess.run([str(runner_venv / "bin/python"), "-c", "import flask"], capture_output=True, timeout=60)
    assert found.returncode != 0


def test_upload_from_a_runner_only_venv_retries_until_the_service_answers(runner_venv, service, tmp_path):
    env, token, upstream = service
    results = tmp_path / "results.json"
    results.write_text(json.dumps(document(environment={"platform": "rocm", "device": "AMD Instinct MI300X"})))
    # Reserved, not merely free now: the service binds it only after its start-up, seconds after
    # the early upload below tried it, and a port from bind(0) could go to another test's server
    # meanwhile (a CI run's early upload reached one and was told "HTTP 401: unknown CI token").
    port, reservation = reserve_port()
    ci = {"PATH": "/usr/bin:/bin", "GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "demo/engine",
          "GITHUB_SHA": upstream.head(), "GITHUB_RUN_ID": "4242", "GITHUB_RUN_ATTEMPT": "1"}

    def command(platform: str) -> list[str]:
        return [str(runner_venv / "bin/parallax"), "upload", "--server", f"http://127.0.0.1:{port}", "--token", token,
                "--platform", platform, "--suite", "decode-throughput", "--retry-for", "240", str(results)]

    # Started before the service: its connection is refused until the service is up, and retried.
    early = subprocess.Popen(command("rocm"), env=ci, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with ServiceProcess(env, workers=1, port=port, start_timeout_s=120):
            out, err = early.communicate(timeout=300)
            assert early.returncode == 0, err
            assert "ConnectionError" in err and "retry 1 in" in err
            # Usually created; under load the first try can outlive the client's read timeout and
            # its retry then finds what the first try stored: either way one run.
            first = json.loads(out.strip().splitlines()[-1])
            again = subprocess.run(command("rocm"), env=ci, capture_output=True, text=True, timeout=300)
            assert again.returncode == 0 and "already stored (nothing new)" in again.stderr, again.stderr
            assert json.loads(again.stdout.strip().splitlines()[-1])["run_id"] == first["run_id"]
            refused = subprocess.run(command("cuda"), env=ci, capture_output=True, text=True, timeout=300)
            assert refused.returncode == 1
            assert "HTTP 403" in refused.stderr and "may upload only for platform 'rocm'" in refused.stderr
        assert stored_runs(env["PARALLAX_DATABASE_URL"]) == 1
    finally:
        os.close(reservation)
        if early.poll() is None:
            early.kill()
            early.wait()
