"""`parallax upload`: send results a CI job already measured to `POST /api/v1/runs` — a
Parallax results document, or a tool's raw output for one of the runner's adapters (the
service converts it with the same code). Runner side only: click and requests, no Flask or
database. Repository, commit and the CI run's URL come from GitHub Actions' or Buildkite's
environment when not given; connection errors and 5xx are retried with backoff (the runner's
`Client`), and a refusal ends the command non-zero with the service's reason."""
from __future__ import annotations

import json
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import click

from runners.client import Client, RetryPolicy, ServiceError


@dataclass(frozen=True)
class CiRun:
    provider: str
    run_url: str


def ci_run(env: Mapping[str, str]) -> CiRun | None:
    """The CI run this command runs in, from its provider's variables (None outside CI). A
    re-run is another run: GitHub's URL names the attempt, Buildkite's the job."""
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_RUN_ID") and env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
        url = f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}"
        if env.get("GITHUB_RUN_ATTEMPT"):
            url += f"/attempts/{env['GITHUB_RUN_ATTEMPT']}"
        return CiRun("github-actions", url)
    if env.get("BUILDKITE") == "true" and env.get("BUILDKITE_BUILD_URL"):
        job = env.get("BUILDKITE_JOB_ID")
        return CiRun("buildkite", env["BUILDKITE_BUILD_URL"] + (f"#{job}" if job else ""))
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise click.ClickException(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot be read: {exc.strerror}") from None


def document_field(files: tuple[Path, ...], adapter: str | None) -> dict[str, Any]:
    """The request's `document`: the results document itself, or {adapter, output} with the
    tool's files by name (several files for tools that write more than one, e.g. lm-eval)."""
    if adapter is None:
        if len(files) != 1:
            raise click.UsageError("give one results document FILE, or --adapter NAME with the tool's output files")
        try:
            document = json.loads(_read(files[0]))
        except ValueError as exc:
            raise click.ClickException(f"{files[0]}: not a JSON results document: {exc}") from None
        if not isinstance(document, dict):
            raise click.ClickException(f"{files[0]}: a results document is a JSON object")
        return document
    names = [f.name for f in files]
    if len(set(names)) != len(names):
        raise click.UsageError(f"output files must have different names, got {', '.join(names)}")
    return {"adapter": adapter, "output": {f.name: _read(f) for f in files}}


def _facts(platform: str) -> dict[str, Any]:
    """This machine's GPU, driver, torch and engine version, as the runner reports them
    (values it could not find are left out, so they never overwrite the document's)."""
    from runners.facts import detect, engine_version, environment_facts
    found = environment_facts(detect(), platform, engine_version(Path.cwd()))
    return {k: v for k, v in found.items() if v not in (None, [], "")}


def _pairs(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {value!r}", param_hint="--env")
        out[key.strip()] = val
    return out


@click.command("upload")
@click.option("--server", required=True, envvar="PARALLAX_SERVER", help="service URL (env PARALLAX_SERVER)")
@click.option("--token", required=True, envvar="PARALLAX_CI_TOKEN",
              help="CI token from `parallax token create --ci` (env PARALLAX_CI_TOKEN)")
@click.option("--repository", envvar="GITHUB_REPOSITORY", required=True,
              help="owner/name (default: $GITHUB_REPOSITORY)")
@click.option("--sha", envvar=["GITHUB_SHA", "BUILDKITE_COMMIT"], required=True,
              help="the measured commit, 40 hex digits (default: $GITHUB_SHA or $BUILDKITE_COMMIT)")
@click.option("--platform", required=True, help="cuda, rocm, cpu, ... (as the service's suites name them)")
@click.option("--suite", required=True, help="the suite the results belong to")
@click.option("--adapter", default=None, help="the files are this tool's raw output (e.g. sglang-bench-one-batch)")
@click.option("--env", "env_facts", multiple=True, metavar="KEY=VALUE", help="an environment fact to add (repeatable)")
@click.option("--facts/--no-facts", "detect_facts", default=None,
              help="detect GPU, driver and torch here and send them (default: with --adapter only)")
@click.option("--idempotency-key", default=None,
              help="same key, same result stored once (default: the CI run's URL + suite + platform, else a random key)")
@click.option("--retry-for", "budget_s", default=300.0, show_default=True, type=float,
              help="seconds to keep retrying through connection errors and 5xx")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def upload(server: str, token: str, repository: str, sha: str, platform: str, suite: str, adapter: str | None,
           env_facts: tuple[str, ...], detect_facts: bool | None, idempotency_key: str | None, budget_s: float,
           files: tuple[Path, ...]) -> None:
    """Upload results measured by this CI job: FILE (a results document) or --adapter NAME FILE..."""
    body: dict[str, Any] = {"repository": repository, "sha": sha.strip(), "platform": platform, "suite": suite,
                            "document": document_field(files, adapter)}
    environment: dict[str, Any] = {}
    if detect_facts or (detect_facts is None and adapter is not None):
        environment.update(_facts(platform))
    environment.update(_pairs(env_facts))
    if environment:
        body["environment"] = environment
    run = ci_run(os.environ)
    if run is not None:
        body["ci"] = {"provider": run.provider, "run_url": run.run_url}
    headers = {}
    if idempotency_key is not None or run is None:
        # One key for every retry of this command: a retry after a lost answer stores nothing new.
        headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
    # A long read timeout: an upload of a commit the service has not seen waits for its git fetch.
    client = Client(server, token, retry=RetryPolicy(budget_s=budget_s), timeout_s=120.0)
    try:
        response = client.request("POST", "/runs", json=body, headers=headers)
        reply = client.check(response, "upload").json()
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    verb = "stored" if reply.get("created") else "already stored (nothing new)"
    click.echo(f"{verb}: run {reply['run_id']} of {suite} on {platform} at {sha[:12]} ({repository})", err=True)
    click.echo(json.dumps(reply))
    sys.exit(0)
