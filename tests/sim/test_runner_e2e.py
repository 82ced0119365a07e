"""End to end: the real service, `parallax runner --label platform=cuda-sim|rocm-sim` as separate
processes, and the real decode-throughput job on the simulator; the stored runs are simulated, carry
the hazards metric and run on the profile the label selects."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.support.runner_harness import Harness, Server, free_port
from tests.support.settings import ADMIN_TOKEN, make_settings

REPO = Path(__file__).resolve().parents[2]
JOB = (sys.executable, "-m", "scheduler_core.jobs.decode_throughput", "--model", "tiny-random", "--mode",
       "one-batch", "--batch-size", "2", "--input-len", "8", "--output-len", "4")


@pytest.fixture
def service(tmp_path: Path, git_repo: Path, sqlite_url: str):
    from app.core.config import RepositorySpec, SuiteSpec
    from app.web import create_app
    suite = SuiteSpec(name="decode-throughput", command=JOB, platforms=("cuda-sim", "rocm-sim"), timeout_s=300,
                      repeats=1, max_attempts=1)
    settings = make_settings(sqlite_url, lease_s=30, claim_max_wait_s=2.0,
                             repositories=(RepositorySpec(name="demo/engine", url=str(git_repo)),), suites=(suite,))
    flask_app = create_app(settings)
    server = Server(flask_app, free_port())
    server.start()
    harness = Harness(flask_app, server, git_repo, tmp_path)
    yield harness
    harness.close()
    harness.db.engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("label,profile,vendor_barrier", [("cuda-sim", "cuda-h100", True),
                                                          ("rocm-sim", "rocm-mi300x", False)])
def test_a_simulated_runner_runs_the_real_job_on_its_profile(service: Harness, label, profile, vendor_barrier):
    response = service.client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": service.shas[-1],
                                                         "suite": "decode-throughput", "platform": label},
                                   headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status_code == 201, response.get_json()
    job_id = response.get_json()["jobs"][0]["id"]
    proc = service.start_runner(label, "--once", "--label", f"platform={label}",
                                env={"PYTHONPATH": str(REPO), "PARALLAX_SIM_NOISE": "0"})
    job = service.wait_job(job_id, ("succeeded", "failed"), timeout_s=240, proc=proc)
    assert job["state"] == "succeeded", service.runner_log(proc)
    [run] = service.runs(job_id)
    assert run["simulated"] is True and run["platform"] == label
    assert run["environment"]["sim_profile"] == profile and run["context"]["sim_profile"] == profile
    assert run["context"]["sync_policy"]["war_barrier"] is vendor_barrier
    assert "hazards" in run["samples"] and run["samples"]["decode_throughput"][0] > 0
    assert (run["samples"]["hazards"] == [0.0]) is vendor_barrier  # HIP's default races (docs/sim.md)
