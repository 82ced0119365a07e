"""The jobs record the loop and the sync policy in force, and say when the platform is simulated."""
from __future__ import annotations

import json

import pytest

from runners.results import validate
from scheduler_core.jobs import decode_throughput

ARGS = ["--model", "tiny-random", "--mode", "one-batch", "--batch-size", "2", "--input-len", "8",
        "--output-len", "4"]


@pytest.fixture
def results(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    monkeypatch.setenv("PARALLAX_RESULTS", str(path))
    monkeypatch.setenv("PARALLAX_REPEATS", "1")
    for name in ("PARALLAX_DEVICE", "PARALLAX_PLATFORM", "PARALLAX_WAR_BARRIER", "PARALLAX_COPY_STREAM",
                 "PARALLAX_FWD_PREPARE_D2H", "PARALLAX_SYNC_PRESET"):
        monkeypatch.delenv(name, raising=False)
    return path


def _load(path) -> dict:
    data = json.loads(path.read_text())
    validate(data)
    return data


def test_no_overlap_is_recorded_with_the_cpu_policy(results) -> None:
    decode_throughput.main(ARGS + ["--no-overlap"])
    context = _load(results)["context"]
    assert context["overlap"] is False and context["disaggregation"] is None
    assert context["platform"] == "cpu"
    assert context["sync_policy"] == {"war_barrier": False, "copy_stream": False, "fwd_prepare_d2h": False,
                                      "war_barrier_read_gated": False, "hip_publish_sync": False}
    assert context["sync_policy_overrides"] == []


def test_overlap_and_overrides_are_recorded(results, monkeypatch) -> None:
    monkeypatch.setenv("PARALLAX_WAR_BARRIER", "1")
    decode_throughput.main(["--model", "tiny-random", "--num-prompts", "3", "--input-len", "8", "--output-len", "4",
                            "--overlap", "--disaggregation", "inproc"])
    context = _load(results)["context"]
    assert context["overlap"] is True and context["disaggregation"] == "inproc"
    assert context["sync_policy"]["war_barrier"] is True
    assert context["sync_policy_overrides"] == [
        {"variable": "PARALLAX_WAR_BARRIER", "field": "war_barrier", "value": True, "default": False}]


def test_simulated_platform_is_labelled_and_follows_its_vendor_policy(results, monkeypatch) -> None:
    monkeypatch.setenv("PARALLAX_DEVICE", "sim:rocm-mi300x")
    decode_throughput.main(ARGS)
    doc = _load(results)
    assert doc["environment"]["platform"] == "rocm-sim" and doc["environment"]["simulated"] is True
    assert doc["environment"]["sim_profile"] == "rocm-mi300x"
    assert doc["context"]["platform"] == "rocm-sim"
    assert doc["context"]["sync_policy"] == {"war_barrier": False, "copy_stream": False, "fwd_prepare_d2h": False,
                                             "war_barrier_read_gated": False, "hip_publish_sync": True}


def test_one_batch_mode_refuses_disaggregation(results) -> None:
    with pytest.raises(SystemExit):
        decode_throughput.main(ARGS + ["--disaggregation", "inproc"])
    assert not results.exists()


def test_real_platform_is_not_simulated(results) -> None:
    decode_throughput.main(ARGS)
    env = _load(results)["environment"]
    assert env["platform"] == "cpu" and env["simulated"] is False and env["device"] != "cpu"


def test_simulated_run_reports_hazards_and_device_timeline_throughput(results, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PARALLAX_DEVICE", "sim:cuda-h100")
    monkeypatch.setenv("PARALLAX_SIM_NOISE", "0")
    trace = tmp_path / "trace.json"
    decode_throughput.main(ARGS + ["--trace", str(trace)])
    doc = _load(results)
    metrics = {m["name"]: m for m in doc["metrics"]}
    assert metrics["hazards"]["samples"] == [0.0] and metrics["hazards"]["direction"] == "lower_is_better"
    assert doc["environment"]["simulated"] is True and doc["context"]["sim_profile"] == "cuda-h100"
    assert json.loads(trace.read_text())["traceEvents"]


def test_preset_26380_on_rocm_sim_is_recorded_and_race_free(results, monkeypatch) -> None:
    monkeypatch.setenv("PARALLAX_DEVICE", "sim:rocm-mi300x")
    monkeypatch.setenv("PARALLAX_SYNC_PRESET", "sglang-26380")
    decode_throughput.main(ARGS)
    doc = _load(results)
    assert doc["context"]["sync_preset"] == "sglang-26380"
    assert doc["context"]["sync_policy"] == {"war_barrier": True, "copy_stream": False, "fwd_prepare_d2h": True,
                                             "war_barrier_read_gated": False, "hip_publish_sync": False}
    assert {m["name"]: m["samples"] for m in doc["metrics"]}["hazards"] == [0.0]


def test_hip_default_on_rocm_sim_reports_its_hazards(results, monkeypatch) -> None:
    monkeypatch.setenv("PARALLAX_DEVICE", "sim:rocm-mi300x")
    decode_throughput.main(ARGS)
    doc = _load(results)
    assert {m["name"]: m["samples"] for m in doc["metrics"]}["hazards"][0] > 0
    assert any("req_to_token" in kind for kind in doc["context"]["sim_hazard_kinds"])


def test_a_simulated_run_on_the_fixed_host_clock_skips_the_warm_up(results, monkeypatch, capsys) -> None:
    """The simulator's fixed host clock has no first-run costs: a warm-up would only discard one
    draw of the virtual noise."""
    monkeypatch.setenv("PARALLAX_DEVICE", "sim:rocm-mi300x")
    decode_throughput.main(ARGS)
    err = capsys.readouterr().err
    assert "no warm-up run" in err and "] warm-up run" not in err
    assert len(_load(results)["metrics"][0]["samples"]) == 1


def test_a_simulated_run_on_the_measured_host_clock_warms_up(results, monkeypatch, capsys) -> None:
    monkeypatch.setenv("PARALLAX_DEVICE", "sim:rocm-mi300x")
    monkeypatch.setenv("PARALLAX_SIM_HOST_TIME", "measured")
    decode_throughput.main(ARGS)
    assert "] warm-up run" in capsys.readouterr().err


def test_a_run_on_the_cpu_warms_up_before_its_samples(results, capsys) -> None:
    decode_throughput.main(ARGS)
    assert "] warm-up run" in capsys.readouterr().err
