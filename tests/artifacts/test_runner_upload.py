"""End to end: `parallax runner --label platform=rocm-sim` runs the real decode-throughput job on
the simulator; the job's stream timeline goes up as an artifact beside its results, and a
service cap it exceeds is named in the job log while the results are still stored."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from app.core.models import JobLog
from tests.support.runner_harness import Harness, Server, free_port
from tests.support.settings import ADMIN_TOKEN, make_settings

REPO = Path(__file__).resolve().parents[2]
JOB = (sys.executable, "-m", "scheduler_core.jobs.decode_throughput", "--model", "tiny-random", "--mode",
       "one-batch", "--batch-size", "2", "--input-len", "8", "--output-len", "4")


def _service(tmp_path: Path, git_repo: Path, sqlite_url: str, **overrides: object) -> Harness:
    from app.core.config import RepositorySpec, SuiteSpec
    from app.web import create_app
    suite = SuiteSpec(name="decode-throughput", command=JOB, platforms=("rocm-sim",), timeout_s=300,
                      repeats=1, max_attempts=1)
    settings = make_settings(sqlite_url, lease_s=30, claim_max_wait_s=2.0,
                             repositories=(RepositorySpec(name="demo/engine", url=str(git_repo)),), suites=(suite,),
                             **overrides)
    flask_app = create_app(settings)
    server = Server(flask_app, free_port())
    server.start()
    return Harness(flask_app, server, git_repo, tmp_path)


def _run_one_job(service: Harness) -> tuple[int, dict]:
    response = service.client.post("/api/v1/jobs", json={"repository": "demo/engine", "commit": service.shas[-1],
                                                         "suite": "decode-throughput", "platform": "rocm-sim"},
                                   headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status_code == 201, response.get_json()
    job_id = response.get_json()["jobs"][0]["id"]
    proc = service.start_runner("rocm-sim", "--once", "--label", "platform=rocm-sim",
                                env={"PYTHONPATH": str(REPO), "PARALLAX_SIM_NOISE": "0"})
    job = service.wait_job(job_id, ("succeeded", "failed"), timeout_s=240, proc=proc)
    assert job["state"] == "succeeded", service.runner_log(proc)
    return job_id, job


def _log(service: Harness, job_id: int) -> str:
    with service.db.session() as session:
        return "".join(session.scalars(select(JobLog.text).where(JobLog.job_id == job_id).order_by(JobLog.id)))


@pytest.mark.slow
def test_a_simulated_jobs_timeline_is_uploaded_and_listed_on_the_job(tmp_path, git_repo, sqlite_url):
    service = _service(tmp_path, git_repo, sqlite_url)
    try:
        job_id, _ = _run_one_job(service)
        (artifact,) = service.client.get(f"/api/v1/jobs/{job_id}/artifacts").get_json()["artifacts"]
        assert artifact["name"] == "timeline.json" and artifact["content_type"] == "application/json"
        trace = json.loads(service.client.get(artifact["url"]).data)
        lanes = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
        assert {"host", "forward", "schedule"} <= lanes
        assert "artifact timeline.json uploaded" in _log(service, job_id)
    finally:
        service.close()
        service.db.engine.dispose()


@pytest.mark.slow
def test_a_timeline_over_the_cap_is_refused_and_the_results_are_still_stored(tmp_path, git_repo, sqlite_url):
    service = _service(tmp_path, git_repo, sqlite_url, max_artifact_bytes=1000)
    try:
        job_id, _ = _run_one_job(service)
        assert service.client.get(f"/api/v1/jobs/{job_id}/artifacts").get_json()["artifacts"] == []
        assert len(service.runs(job_id)) == 1
        log = _log(service, job_id)
        assert "artifact timeline.json not kept" in log and "HTTP 413" in log and "over the limit of 1000" in log
    finally:
        service.close()
        service.db.engine.dispose()
