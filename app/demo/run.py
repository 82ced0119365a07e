"""`parallax demo`: the main job end to end on the embedded database.

It migrates the SQLite database under var/, makes a local git repository holding the engine
(`scheduler_core/`), starts the real service (`parallax serve`) on loopback, queues the
decode-throughput suite for the repository's head commit, runs a real runner process
(`parallax runner --once`) that checks the commit out and measures it, and prints what was
stored, with the URL to look at it.
"""
from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import click
import requests

from app.auth.tokens import create_registration_token
from app.core.db import Database
from app.core.migrate import upgrade
from app.demo.service_process import ServiceProcess
from app.git.workdir import git

ROOT = Path(__file__).resolve().parents[2]
def suite_command(model: str) -> list[str]:
    return [sys.executable, "-m", "scheduler_core.jobs.decode_throughput", "--model", model,
            "--mode", "one-batch", "--batch-size", "8", "--input-len", "64", "--output-len", "32"]




def make_engine_repository(path: Path) -> str:
    """A git repository whose head commit holds this checkout's scheduler_core/; returns the SHA."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    shutil.copytree(ROOT / "scheduler_core", path / "scheduler_core",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (path / "README.md").write_text("The engine under test, copied by `parallax demo`.\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "engine under test")
    return git(path, "rev-parse", "HEAD")


def _step(text: str) -> None:
    click.secho(f"==> {text}", fg="cyan", err=True)


def run_demo(workdir: str = "var/demo", port: int = 0, model: str = "smollm2-135m") -> int:
    work = Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    database_url = os.environ.get("PARALLAX_DATABASE_URL") or f"sqlite:///{(ROOT / 'var/parallax.db')}"
    _step(f"migrating {database_url}")
    upgrade(database_url)

    _step("making a local git repository holding the engine under test")
    repo_path = work / "engine-repo"
    sha = make_engine_repository(repo_path)
    config = work / "parallax.toml"
    command = ", ".join(f'"{part}"' for part in suite_command(model))
    config.write_text(
        f'[[repositories]]\nname = "demo/engine"\nurl = "{repo_path}"\ndefault_branch = "main"\n\n'
        f'[[suites]]\nname = "decode-throughput"\ncommand = [{command}]\nplatforms = ["cpu"]\n'
        f'timeout_s = 900\nrepeats = 3\n')

    admin_token = os.urandom(16).hex()
    env = {"PARALLAX_DATABASE_URL": database_url, "PARALLAX_CONFIG": str(config), "PARALLAX_ADMIN_TOKEN": admin_token,
           "PARALLAX_LOG_LEVEL": "WARNING"}
    parallax = str(Path(sys.executable).with_name("parallax"))
    _step("starting the service: parallax serve")
    with open(work / "serve.log", "w") as log, ServiceProcess(env, workers=2, port=port, log=log) as service:
        base = service.base
        _step(f"queueing decode-throughput on cpu for demo/engine@{sha[:12]}")
        response = requests.post(f"{base}/api/v1/jobs", json={"repository": "demo/engine", "commit": sha},
                                 headers={"Authorization": f"Bearer {admin_token}"}, timeout=30)
        response.raise_for_status()
        database = Database(database_url)
        with database.session() as session:
            registration = create_registration_token(session, "parallax demo")
        database.engine.dispose()

        _step("running a runner for one job (checkout, run the suite, upload the results)")
        runner = subprocess.run([parallax, "runner", "--server", base, "--registration-token", registration,
                                 "--name", "demo-cpu", "--label", "platform=cpu", "--work-dir",
                                 str(work / "runner"), "--once"], env=dict(os.environ, **env))
        if runner.returncode != 0:
            click.secho(f"the runner exited with {runner.returncode}", fg="red", err=True)
            return 1
        commit = requests.get(f"{base}/api/v1/commits/{sha}", timeout=30).json()
    return _summarise(commit, sha, database_url)


def _summarise(commit: dict, sha: str, database_url: str) -> int:
    jobs = commit.get("jobs", [])
    runs = commit.get("runs", [])
    click.echo("")
    click.secho(f"Parallax demo — demo/engine@{sha[:12]}", bold=True)
    for job in jobs:
        click.echo(f"  job {job['id']}: {job['suite']} on {job['platform']}: {job['state']}"
                   + (f" ({job['failure_reason']})" if job.get("failure_reason") else ""))
    for run in runs:
        env = run["environment"]
        click.echo(f"  run {run['id']} on {env.get('device')} (torch {env.get('torch')}), "
                   f"model {run['context'].get('model')}:")
        for metric in run["metrics"]:
            samples = metric["samples"]
            click.echo(f"    {metric['name']:<24} median {statistics.median(samples):>10.2f} {metric['unit']:<6} "
                       f"({len(samples)} samples, {metric['direction'].replace('_', ' ')})")
    click.echo(f"\nStored in {database_url}.")
    click.echo("Browse it: `make serve` (or `parallax serve`), then open "
               f"http://127.0.0.1:8000/commits/{sha} (JSON: /api/v1/commits/{sha})")
    return 0 if runs and all(j["state"] == "succeeded" for j in jobs) else 1
