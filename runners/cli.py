"""`parallax runner`: the agent's command line. Imports only the runner side (click, requests),
so it works on a GPU box without Flask or a database driver."""
from __future__ import annotations

import logging
import os
import re
import signal
import sys
from pathlib import Path
from urllib.parse import urlsplit

import click

from runners.agent import Agent, Config, RunnerError, default_sim_device


def _server_url(value: str) -> str:
    """The service URL with its scheme: `127.0.0.1:8765` is refused at once, not retried forever."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise click.BadParameter(f"{value!r} is not a URL with a scheme; write http://{value.strip()} "
                                 f"(or https://...)", param_hint="--server")
    return value.strip().rstrip("/")


def _parse_labels(values: tuple[str, ...]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key.strip() or not val.strip():
            raise click.BadParameter(f"expected key=value, got {value!r}", param_hint="--label")
        labels[key.strip()] = val.strip()
    return labels


MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _module_names(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        if MODULE_RE.fullmatch(value) is None:
            raise click.BadParameter(f"{value!r} is not a module name (like torch or numpy.linalg)")
    return values


@click.command("runner")
@click.option("--server", required=True, envvar="PARALLAX_SERVER", help="service URL, e.g. https://parallax.example")
@click.option("--registration-token", envvar="PARALLAX_REGISTRATION_TOKEN", default=None,
              help="from `parallax token create`; needed only for the first start (env PARALLAX_REGISTRATION_TOKEN)")
@click.option("--name", default=None, help="runner name (default: the host name)")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="label (repeatable); platform defaults to the detected cuda/rocm/cpu")
@click.option("--work-dir", default="var/runner", show_default=True, type=click.Path(file_okay=False),
              help="mirrors, worktrees and the runner's token (mode 0600)")
@click.option("--once", is_flag=True, help="run one job, then exit")
@click.option("--sim-profile", default=None,
              help="simulator profile; sets PARALLAX_DEVICE=sim:PROFILE for jobs (needs platform=<x>-sim; "
                   "default: cuda-h100 for platform=cuda-sim, rocm-mi300x for platform=rocm-sim)")
@click.option("--grace", "grace_s", default=60.0, show_default=True, type=float,
              help="seconds a running job may take to finish after SIGTERM/SIGINT before it is handed back")
@click.option("--poll", "claim_wait_s", default=10.0, show_default=True, type=float,
              help="long-poll seconds per claim")
@click.option("--heartbeat", "heartbeat_s", default=None, type=float,
              help="heartbeat interval in seconds (default: a third of the lease, 1-30 s)")
@click.option("--upload-retry", "upload_budget_s", default=900.0, show_default=True, type=float,
              help="seconds to keep retrying an upload through an outage")
@click.option("--kill-grace", "kill_grace_s", default=5.0, show_default=True, type=float,
              help="seconds between SIGTERM and SIGKILL when a job's process group is stopped")
@click.option("--claim-retry", "claim_retry_s", default=15.0, show_default=True, type=click.FloatRange(min=0.1),
              help="seconds one claim retries through an outage before it counts as failed")
@click.option("--outage-report", "outage_report_s", default=60.0, show_default=True, type=click.FloatRange(min=1.0),
              help="while claims fail: the first failure is a warning, then one line at most this often")
@click.option("--host-lock", default=None, envvar="PARALLAX_HOST_LOCK", type=click.Path(dir_okay=False),
              help="a lock file shared by the runners of this machine: a job on a real platform measures "
                   "alone, simulated jobs share it (wall-clock numbers must not time the neighbours)")
@click.option("--warm-import", "warm_imports", multiple=True, metavar="MODULE", envvar="PARALLAX_WARM_IMPORTS",
              callback=_module_names,
              help="(repeatable) a library imported once by an interpreter that forks each job, e.g. torch; "
                   "a `python -m ...` suite then starts without that import (docs/runner.md)")
@click.option("-v", "--verbose", is_flag=True, help="debug logging")
def runner(server: str, registration_token: str | None, name: str | None, labels: tuple[str, ...],
           work_dir: str, once: bool, sim_profile: str | None, grace_s: float, claim_wait_s: float,
           heartbeat_s: float | None, upload_budget_s: float, kill_grace_s: float, claim_retry_s: float,
           outage_report_s: float, host_lock: str | None, warm_imports: tuple[str, ...], verbose: bool) -> None:
    """Run jobs for the service at --server on this machine (CUDA, ROCm, CPU or simulated)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    sim_device = os.environ.get("PARALLAX_DEVICE") or None
    if sim_profile is not None:
        sim_device = f"sim:{sim_profile}"
    elif sim_device is not None and not sim_device.startswith("sim:"):
        sim_device = None  # a real device selection (e.g. cuda:1) is not the simulator setting
    declared = _parse_labels(labels)
    sim_device = default_sim_device(declared, sim_device)  # platform=cuda-sim / rocm-sim pick their profile
    config = Config(server=_server_url(server), work_dir=Path(work_dir), registration_token=registration_token,
                    labels=declared, once=once, sim_device=sim_device, grace_s=grace_s,
                    claim_wait_s=claim_wait_s, heartbeat_s=heartbeat_s, upload_budget_s=upload_budget_s,
                    kill_grace_s=kill_grace_s, claim_retry_s=claim_retry_s, outage_report_s=outage_report_s,
                    host_lock=Path(host_lock).resolve() if host_lock else None, warm_imports=warm_imports)
    if name:
        config.name = name
    agent = Agent(config)
    signal.signal(signal.SIGTERM, agent.on_signal)
    signal.signal(signal.SIGINT, agent.on_signal)
    try:
        code = agent.run()
    except RunnerError as exc:
        raise click.ClickException(str(exc)) from exc
    sys.exit(code)

