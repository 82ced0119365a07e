"""Platform labels come from detection; simulated platforms need the simulator's device setting
and every result they upload says so."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runners.agent import Agent, Config, RunnerError, default_sim_device, resolve_labels
from runners.client import RetryPolicy
from runners.facts import Facts, detect
from tests.support.runner_harness import Harness

CPU = Facts(platform="cpu", python="3.11", os="Linux", cpu_model="test cpu", cpu_count=2)
CUDA = Facts(platform="cuda", python="3.11", os="Linux", cpu_model="x", cpu_count=64, torch="2.5.0", cuda="12.4",
             device="NVIDIA H100 80GB HBM3", device_count=8, driver="550.54.15")


def test_detected_facts_give_the_default_labels():
    assert resolve_labels(CUDA, {}, None) == {"platform": "cuda", "gpu": "NVIDIA H100 80GB HBM3",
                                              "driver": "550.54.15"}
    assert resolve_labels(CPU, {"team": "perf"}, None) == {"platform": "cpu", "team": "perf"}


def test_a_declared_platform_must_match_what_was_detected():
    with pytest.raises(RunnerError, match="'cuda' was declared but this box was detected as 'cpu'"):
        resolve_labels(CPU, {"platform": "cuda"}, None)


def test_a_simulated_platform_needs_the_simulator_device_setting():
    with pytest.raises(RunnerError, match="--sim-profile"):
        resolve_labels(CPU, {"platform": "rocm-sim"}, None)
    labels = resolve_labels(CUDA, {"platform": "rocm-sim"}, "sim:mi300x")
    assert labels == {"platform": "rocm-sim"}  # the real GPU's labels do not describe the simulated one


def test_the_simulator_setting_on_a_real_platform_is_refused():
    with pytest.raises(RunnerError, match="needs a simulated platform"):
        resolve_labels(CPU, {}, "sim:mi300x")


def test_a_malformed_simulator_setting_is_refused():
    with pytest.raises(RunnerError, match="sim:<profile>"):
        resolve_labels(CPU, {"platform": "rocm-sim"}, "sim:bad profile;rm")


def test_detection_on_this_box_reports_torch_and_python_versions():
    facts = detect()
    probe = json.loads(subprocess.run([sys.executable, "-c", "import json, torch; print(json.dumps("
                                       "[torch.__version__, torch.version.cuda, torch.cuda.is_available()]))"],
                                      capture_output=True, text=True, check=True).stdout)
    assert facts.torch == probe[0] and facts.cuda == probe[1]
    assert facts.python == ".".join(map(str, sys.version_info[:3]))
    assert facts.platform == ("cuda" if probe[2] else "cpu") or facts.hip
    assert facts.cpu_count and facts.cpu_model


def test_a_box_without_torch_is_a_cpu_box(tmp_path):
    # An interpreter whose `import torch` fails, like a runner box before its torch is installed.
    (tmp_path / "torch.py").write_text("raise ImportError('no torch here')\n")
    wrapper = tmp_path / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    facts = detect(python=str(wrapper))
    assert facts.platform == "cpu" and facts.torch is None and facts.device_count == 0


def fake_torch(root, version_file: str, init: str) -> str:
    """An interpreter that finds a torch package of our own: its version file and its __init__."""
    package = root / "torch"
    package.mkdir()
    (package / "version.py").write_text(version_file)
    (package / "__init__.py").write_text(init)
    wrapper = root / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={root} exec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_cpu_build_of_torch_is_read_from_its_version_file_without_importing_it(tmp_path):
    python = fake_torch(tmp_path, "from typing import Optional\n__version__ = '9.9.9+cpu'\n"
                                  "cuda: Optional[str] = None\nhip: Optional[str] = None\n",
                        "raise RuntimeError('the probe imported torch')\n")
    facts = detect(python=python)
    assert (facts.torch, facts.cuda, facts.hip, facts.probe_error) == ("9.9.9+cpu", None, None, None)
    assert facts.platform == "cpu" and facts.device_count == 0


def test_a_gpu_build_of_torch_is_imported_to_list_its_devices(tmp_path):
    init = ("import types\n__version__ = '9.9.9+imported'\n"
            "version = types.SimpleNamespace(cuda='12.4', hip=None)\n"
            "cuda = types.SimpleNamespace(is_available=lambda: False)\n")
    python = fake_torch(tmp_path, "__version__ = '9.9.9+cu124'\ncuda = '12.4'\nhip = None\n", init)
    facts = detect(python=python)
    assert (facts.torch, facts.cuda, facts.probe_error) == ("9.9.9+imported", "12.4", None)
    assert facts.platform == "cpu"  # a CUDA build on a box without a GPU


def test_a_simulated_platform_without_a_setting_or_default_refuses_to_start(harness: Harness):
    proc = harness.start_runner("sim", "--once", "--label", "platform=npu-sim")
    assert harness.wait_exit(proc) == 1
    assert "--sim-profile" in harness.runner_log(proc)
    assert harness.runner_ids() == {}  # nothing registered


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_simulated_runner_passes_the_device_setting_and_uploads_simulated_results(harness: Harness, how):
    job_id = harness.enqueue(harness.shas[0], platform="rocm-sim")
    args = ["--once", "--label", "platform=rocm-sim"]
    env = {}
    if how == "option":
        args += ["--sim-profile", "mi300x"]
    else:
        env["PARALLAX_DEVICE"] = "sim:mi300x"
    proc = harness.start_runner("sim", *args, env=env)
    job = harness.wait_job(job_id, ("succeeded", "failed"), proc=proc)
    assert job["state"] == "succeeded", job
    [run] = harness.runs(job_id)
    assert run["simulated"] is True and run["platform"] == "rocm-sim"
    assert run["context"]["device_env"] == "sim:mi300x"
    assert harness.wait_exit(proc) == 0


@pytest.mark.parametrize("label,device", [("cuda-sim", "sim:cuda-h100"), ("rocm-sim", "sim:rocm-mi300x")])
def test_a_simulated_platform_label_selects_its_profile(label, device):
    assert default_sim_device({"platform": label}, None) == device
    assert default_sim_device({"platform": label}, "sim:other") == "sim:other"
    assert default_sim_device({"platform": "cpu"}, None) is None


def test_a_rocm_sim_runner_without_a_profile_runs_jobs_on_rocm_mi300x(harness: Harness):
    job_id = harness.enqueue(harness.shas[0], platform="rocm-sim")
    proc = harness.start_runner("sim", "--once", "--label", "platform=rocm-sim")
    job = harness.wait_job(job_id, ("succeeded", "failed"), proc=proc)
    assert job["state"] == "succeeded", job
    [run] = harness.runs(job_id)
    assert run["simulated"] is True and run["context"]["device_env"] == "sim:rocm-mi300x"


def test_a_simulated_runner_refuses_a_document_that_does_not_say_simulated(harness: Harness, monkeypatch):
    job_id = harness.enqueue(harness.shas[0], platform="rocm-sim")
    monkeypatch.setenv("FAKE_SUITE_MODE", "claims-real")
    monkeypatch.setenv("FAKE_SUITE_DIR", str(harness.control))
    config = Config(server=harness.server.url, work_dir=harness.tmp_path / "work-sim", name="sim",
                    registration_token=harness.registration_token(), once=True, claim_wait_s=1.0,
                    labels={"platform": "rocm-sim"}, sim_device="sim:mi300x",
                    retry=RetryPolicy(base_delay_s=0.1, max_delay_s=0.5, budget_s=10.0))
    assert Agent(config, facts=CPU).run() == 0
    job = harness.job(job_id)
    assert job["state"] == "failed"
    assert "environment.simulated must be true" in job["failure_reason"]
    assert harness.runs(job_id) == []
