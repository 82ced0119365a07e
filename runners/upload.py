"""`parallax upload`: send results a CI job already measured to `POST /api/v1/runs` — a
Parallax results document, or a tool's raw output for one of the runner's adapters (the
service converts it with the same code). Runner side only: click and requests, no Flask or
database. Repository, commit and the CI run's URL come from GitHub Actions' or Buildkite's
environment when not given; connection errors and 5xx are retried with backoff (the runner's
`Client`), and a refusal ends the command non-zero with the service's reason. An upload of a
commit the service has not seen is answered 202 (the service reads it from git in the
background): the command polls `GET /api/v1/uploads/<id>` until it is stored or refused."""
from __future__ import annotations

import json
import os
import sys
import time
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


POLL_S = (0.2, 0.5, 1.0, 2.0, 5.0)  # pauses between polls of a queued upload, the last repeated


def wait_for_upload(client: Client, queued: dict[str, Any], wait_s: float) -> dict[str, Any]:
    """Poll `GET /api/v1/uploads/<id>` until the queued upload is stored or failed."""
    deadline = time.monotonic() + wait_s
    polls = 0
    while True:
        reply = client.check(client.request("GET", f"/uploads/{queued['upload_id']}"), "upload").json()
        if reply.get("state") != "pending":
            return reply
        pause = POLL_S[min(polls, len(POLL_S) - 1)]
        polls += 1
        if time.monotonic() + pause > deadline:
            raise ServiceError(f"upload: upload {queued['upload_id']} is still queued after {wait_s:.0f} s; "
                               f"see {queued['poll_url']}")
        time.sleep(pause)


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
@click.option("--wait-for", "wait_s", default=900.0, show_default=True, type=float,
              help="seconds to wait for an upload the service queued (a commit it reads from git first)")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def upload(server: str, token: str, repository: str, sha: str, platform: str, suite: str, adapter: str | None,
           env_facts: tuple[str, ...], detect_facts: bool | None, idempotency_key: str | None, budget_s: float,
           wait_s: float, files: tuple[Path, ...]) -> None:
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
    client = Client(server, token, retry=RetryPolicy(budget_s=budget_s), timeout_s=120.0)
    try:
        response = client.request("POST", "/runs", json=body, headers=headers)
        reply = client.check(response, "upload").json()
        if reply.get("state") == "pending":
            # A commit the service had not seen: it reads it from git in the background (202).
            click.echo(f"queued: upload {reply['upload_id']} waits for the service to read {sha[:12]} from git", err=True)
            reply = wait_for_upload(client, reply, wait_s)
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    if reply.get("state") == "failed":
        error = reply.get("error") or {}
        raise click.ClickException(f"upload: HTTP {reply.get('status')}: {error.get('detail', error)}")
    verb = "stored" if reply.get("created") else "already stored (nothing new)"
    click.echo(f"{verb}: run {reply['run_id']} of {suite} on {platform} at {sha[:12]} ({repository})", err=True)
    click.echo(json.dumps(reply))
    sys.exit(0)
