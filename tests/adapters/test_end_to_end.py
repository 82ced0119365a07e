"""A suite that runs an SGLang-shaped `bench_one_batch` through the `sglang-bench-one-batch`
adapter, measured by real runner agents (in-process, one per platform, with the platform's
facts given since this box has no GPU) against the real service over loopback HTTP."""
from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.git.workdir import git
from runners.agent import Agent, Config
from runners.client import RetryPolicy
from runners.facts import Facts
from tests.support.runner_harness import Server, free_port, wait_for
from tests.support.settings import ADMIN_TOKEN, make_settings

FAKE_TOOL = Path(__file__).with_name("fake_one_batch.py")
COMMITS = 14
SLOW_FROM = 7          # the commit from which ROCm decodes 20 % slower
DEVICES = {"cuda": "NVIDIA H100 80GB HBM3", "rocm": "AMD Instinct MI300X"}


def engine_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "sglang"
    (repo / "python" / "sglang").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for i in range(COMMITS):
        rocm = 75.0 * (0.8 if i >= SLOW_FROM else 1.0)
        (repo / "speed.json").write_text(json.dumps({"cuda": 80.0, "rocm": rocm}))
        (repo / "python" / "sglang" / "version.py").write_text(f'__version__ = "0.4.{i}"\n')
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"commit {i}")
    return repo


def facts(platform: str) -> Facts:
    return Facts(platform=platform, python="3.11", os="Linux", cpu_model="test", cpu_count=2, torch="2.13.0",
                 cuda="12.8" if platform == "cuda" else None, hip="6.3" if platform == "rocm" else None,
                 device=DEVICES[platform], device_count=8, devices=[DEVICES[platform]] * 8,
                 driver="570.1" if platform == "cuda" else "6.10.5")


SUITE = {
    "name": "sglang-one-batch",
    "command": [sys.executable, str(FAKE_TOOL), "--batch-size", "1", "32", "--input-len", "1024",
                "--output-len", "256", "--result-filename", "$PARALLAX_OUTPUT_DIR/one_batch.jsonl"],
    "adapter": "sglang-bench-one-batch", "outputs": ["one_batch.jsonl"],
    "platforms": ["cuda", "rocm"], "repeats": 3, "timeout_s": 60,
    "env": {"SGLANG_ENABLE_TORCH_COMPILE": "0"},
}


@pytest.fixture
def suite() -> dict[str, Any]:
    return dict(SUITE)


@pytest.fixture
def service(tmp_path: Path, database_url: str, suite: dict[str, Any]) -> Any:
    from app.core.config import RepositorySpec, parse_catalogue
    from app.web import create_app
    repo = engine_repo(tmp_path)
    catalogue = parse_catalogue({"suites": [suite]})
    settings = make_settings(database_url, lease_s=30, claim_max_wait_s=1.0, suites=catalogue["suites"],
                             repositories=(RepositorySpec(name="sgl-project/sglang", url=str(repo)),))
    flask_app = create_app(settings)
    server = Server(flask_app, free_port())
    server.start()
    yield flask_app, server, repo
    server.stop()


def start_runner(flask_app: Any, server: Server, tmp_path: Path, platform: str) -> tuple[Agent, threading.Thread]:
    from app.auth.tokens import create_registration_token
    with flask_app.extensions["parallax.db"].session() as session:
        token = create_registration_token(session, platform)
    config = Config(server=server.url, work_dir=tmp_path / f"work-{platform}", registration_token=token,
                    name=f"{platform}-box", claim_wait_s=1.0, retry=RetryPolicy())
    agent = Agent(config, facts=facts(platform))
    thread = threading.Thread(target=agent.run, name=f"runner-{platform}", daemon=True)
    thread.start()
    return agent, thread


def test_one_batch_suite_stores_sweep_metrics_and_a_rocm_only_slowdown_alerts_on_rocm(service, tmp_path):
    flask_app, server, repo = service
    client = flask_app.test_client()
    shas = git(repo, "rev-list", "--reverse", "HEAD").split()
    job_ids = []
    for sha in shas:  # queued in commit order: the series order without a branch history
        reply = client.post("/api/v1/jobs", json={"repository": "sgl-project/sglang", "commit": sha},
                            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert reply.status_code == 201, reply.get_json()
        job_ids += [job["id"] for job in reply.get_json()["jobs"]]
    assert len(job_ids) == 2 * COMMITS
    agents = [start_runner(flask_app, server, tmp_path, platform) for platform in ("cuda", "rocm")]
    try:
        def all_done() -> bool:
            states = [client.get(f"/api/v1/jobs/{i}").get_json()["state"] for i in job_ids]
            assert "failed" not in states, [client.get(f"/api/v1/jobs/{i}").get_json() for i in job_ids]
            return all(s == "succeeded" for s in states)
        wait_for(all_done, 240, "every job to succeed", interval_s=0.5)
    finally:
        for agent, _ in agents:
            agent.stop_at = time.monotonic()
        for _, thread in agents:
            thread.join(30)

    from app.core.models import AlertChange, Run
    from app.detection.service import scan_dirty
    db = flask_app.extensions["parallax.db"]
    with db.session() as session:
        runs = list(session.scalars(select(Run).order_by(Run.id)))
        assert len(runs) == 2 * COMMITS
        first = runs[0]
        by_name = {m.metric: m for m in first.measurements}
        decode = by_name["decode_throughput[bs=32,in=1024,out=256]"]
        assert (decode.unit, decode.direction, len(decode.samples)) == ("tok/s", "higher_is_better", 3)
        assert by_name["decode_latency[bs=1,in=1024,out=256]"].direction == "lower_is_better"
        assert len(by_name) == 12 and all(len(m.samples) == 3 for m in by_name.values())
        assert first.context["adapter"] == "sglang-bench-one-batch"
        assert first.context["env"] == {"SGLANG_ENABLE_TORCH_COMPILE": "0"}
        assert first.environment["device"] == DEVICES[first.platform] and first.environment["device_count"] == 8
        assert first.environment["engine_version"] == "0.4.0"

    scan_dirty(db)
    with db.session() as session:
        regressions = [c for c in session.scalars(select(AlertChange)) if c.is_regression]
        described = [(c.platform, c.metric, c.classification) for c in regressions]
        assert regressions, "no regression found"
        assert {c.platform for c in regressions} == {"rocm"}, described
        decode_changes = [c for c in regressions if c.metric.startswith("decode_throughput[")]
        assert {c.metric for c in decode_changes} == {"decode_throughput[bs=1,in=1024,out=256]",
                                                      "decode_throughput[bs=32,in=1024,out=256]"}, described
        assert all(c.classification == "platform_specific" for c in decode_changes), described
        assert all(c.relative_change == pytest.approx(-0.2, abs=0.03) for c in decode_changes)
        assert all(shas[SLOW_FROM] in c.suspected_commits for c in decode_changes), described


BROKEN_BUILD = [sys.executable, "-c", "import sys; print('compiling kernels'); sys.exit('error: kernel build failed')"]


@pytest.mark.parametrize("suite", [dict(SUITE, setup=BROKEN_BUILD)])
def test_a_failing_setup_is_reported_as_a_build_failure_and_nothing_is_measured(service, tmp_path, suite):
    flask_app, server, repo = service
    client = flask_app.test_client()
    sha = git(repo, "rev-parse", "HEAD").strip()
    reply = client.post("/api/v1/jobs", json={"repository": "sgl-project/sglang", "commit": sha, "platform": "rocm"},
                        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    (job_id,) = [job["id"] for job in reply.get_json()["jobs"]]
    agent, thread = start_runner(flask_app, server, tmp_path, "rocm")
    try:
        job = wait_for(lambda: (j := client.get(f"/api/v1/jobs/{job_id}").get_json())["state"] == "failed" and j,
                       60, "the job to fail")
    finally:
        agent.stop_at = time.monotonic()
        thread.join(30)
    assert job["failure_kind"] == "build" and job["attempt"] == 1
    assert job["failure_reason"].startswith("build failed: setup exited with status 1")
    assert "kernel build failed" in job["failure_reason"]
    setup_log = tmp_path / "work-rocm" / "logs" / f"job-{job_id}-1-setup.log"
    assert "compiling kernels" in setup_log.read_text()
    from app.core.models import Run
    with flask_app.extensions["parallax.db"].session() as session:
        assert session.scalars(select(Run)).first() is None
