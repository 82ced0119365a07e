"""The two jobs on the tiny random model: results documents pass the runner's validator."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import pytest

from runners.results import validate
from scheduler_core.jobs import decode_throughput, gsm8k
from scheduler_core.jobs.common import best_of, best_run, repeats
from tests.scheduler_core.conftest import GSM8K_DIR, REPO

CONTEXT_KEYS = {"model", "batch_size", "input_len", "output_len", "mode", "max_running_requests", "kv_tokens",
                "chunked_prefill_size", "overlap", "commit"}


@pytest.fixture
def results(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    monkeypatch.setenv("PARALLAX_RESULTS", str(path))
    monkeypatch.setenv("PARALLAX_REPEATS", "2")
    return path


def _load(path) -> dict:
    data = json.loads(path.read_text())
    validate(data)
    return data


def test_decode_throughput_serving(results) -> None:
    decode_throughput.main(["--model", "tiny-random", "--num-prompts", "6", "--input-len", "24",
                            "--output-len", "8", "--max-running-requests", "4"])
    doc = _load(results)
    names = {m["name"]: m for m in doc["metrics"]}
    assert set(names) == {"output_throughput", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "tpot"}
    assert all(len(m["samples"]) == 2 for m in names.values())
    assert names["output_throughput"]["direction"] == "higher_is_better"
    assert names["itl_p50"]["direction"] == "lower_is_better"
    assert CONTEXT_KEYS <= set(doc["context"]) and doc["context"]["mode"] == "serving"
    assert doc["context"]["overlap"] is True  # the default; --no-overlap is tested in tests/overlap
    env = doc["environment"]
    assert env["platform"] == (os.environ.get("PARALLAX_PLATFORM") or "cpu") and env["simulated"] is False
    assert {"device", "torch", "cuda", "hip"} <= set(env)


def test_decode_throughput_one_batch(results) -> None:
    decode_throughput.main(["--model", "tiny-random", "--mode", "one-batch", "--batch-size", "3",
                            "--input-len", "16", "--output-len", "6"])
    doc = _load(results)
    assert {m["name"] for m in doc["metrics"]} == {"decode_throughput", "step_latency_p50"}
    assert doc["context"]["batch_size"] == 3 and doc["context"]["mode"] == "one-batch"


def test_decode_throughput_freezes_the_heap_before_the_timed_repeats(results) -> None:
    gc.unfreeze()
    decode_throughput.main(["--model", "tiny-random", "--mode", "one-batch", "--batch-size", "2",
                            "--input-len", "8", "--output-len", "4"])
    assert gc.get_freeze_count() > 0


def test_decode_throughput_on_the_process_clock_says_so_in_its_context(results, monkeypatch) -> None:
    monkeypatch.setenv("PARALLAX_HOST_CLOCK", "process")
    decode_throughput.main(["--model", "tiny-random", "--mode", "one-batch", "--batch-size", "2",
                            "--input-len", "8", "--output-len", "4"])
    assert _load(results)["context"]["clock"] == "process"


def test_decode_throughput_on_the_wall_clock_keeps_its_context_unchanged(results, monkeypatch) -> None:
    monkeypatch.setenv("PARALLAX_HOST_CLOCK", "wall")
    decode_throughput.main(["--model", "tiny-random", "--mode", "one-batch", "--batch-size", "2",
                            "--input-len", "8", "--output-len", "4"])
    assert "clock" not in _load(results)["context"]


def test_gsm8k_job_writes_items(results) -> None:
    if not GSM8K_DIR.is_dir():
        pytest.skip(f"GSM8k data not found at {GSM8K_DIR}")
    gsm8k.main(["--model", "tiny-random", "--limit", "3", "--max-new-tokens", "4", "--data", str(GSM8K_DIR)])
    doc = _load(results)
    assert {m["name"] for m in doc["metrics"]} == {"accuracy", "invalid_rate", "output_throughput"}
    assert doc["items"]["name"] == "gsm8k" and len(doc["items"]["correct"]) == 3
    assert doc["context"]["num_questions"] == 3 and "commit" in doc["context"]


def test_gsm8k_data_from_env_and_missing_data_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gsm8k, "CACHE_DIR", tmp_path / "no-cache")
    monkeypatch.delenv("PARALLAX_GSM8K", raising=False)
    with pytest.raises(SystemExit, match="--data DIR.*PARALLAX_GSM8K"):
        gsm8k.resolve_data(None)
    with pytest.raises(SystemExit, match="--data points at"):
        gsm8k.resolve_data(str(tmp_path))
    (tmp_path / "train.jsonl").write_text("{}\n")
    (tmp_path / "test.jsonl").write_text("{}\n")
    monkeypatch.setenv("PARALLAX_GSM8K", str(tmp_path))
    assert gsm8k.resolve_data(None) == tmp_path


@pytest.mark.parametrize("text, value", [
    (" She makes 9 * 2 = $18.\n#### 18", 18.0), ("It costs 1,250 dollars", 1250.0),
    ("The answer is -3.5.", -3.5), ("no digits here", None)])
def test_last_number(text, value) -> None:
    assert gsm8k.last_number(text) == value


def test_job_runs_as_a_module(tmp_path) -> None:
    out = tmp_path / "doc.json"
    env = {**os.environ, "PARALLAX_RESULTS": str(out), "PARALLAX_REPEATS": "1"}
    proc = subprocess.run([sys.executable, "-m", "scheduler_core.jobs.decode_throughput", "--model", "tiny-random",
                           "--num-prompts", "3", "--input-len", "16", "--output-len", "4"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "repeat 1/1" in proc.stderr  # progress goes to stderr
    assert _load(out)["suite"] == "decode-throughput"


@pytest.mark.parametrize(("setting", "model", "message"), [
    (("PARALLAX_HOST_CLOCK", "cpu-cycles"), "tiny-random",
     "error: PARALLAX_HOST_CLOCK='cpu-cycles' is not a host clock; expected one of wall, process"),
    (("PARALLAX_CPU_KERNELS", "avx512"), "tiny-random",
     "error: PARALLAX_CPU_KERNELS='avx512': expected one of native, no-amx, no-blocks, onednn, aten"),
    (None, "smollm2-135", "error: unknown model 'smollm2-135': expected one of smollm2-135m,"),
], ids=["host clock", "cpu kernels", "model"])
def test_a_bad_engine_setting_or_model_is_one_line_naming_it(tmp_path, setting, model, message) -> None:
    out = tmp_path / "doc.json"
    env = {**os.environ, "PARALLAX_RESULTS": str(out), **dict([setting] if setting else [])}
    proc = subprocess.run([sys.executable, "-m", "scheduler_core.jobs.decode_throughput", "--model", model,
                           "--mode", "one-batch", "--batch-size", "2", "--input-len", "8", "--output-len", "4"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_best_run_reports_the_fastest_run_whole_and_tries_every_cpu() -> None:
    allowed = os.sched_getaffinity(0)
    seen: list[set[int]] = []
    throughputs = iter([100.0, 300.0, 200.0, 250.0])

    def run() -> dict[str, float]:
        seen.append(os.sched_getaffinity(0))
        value = next(throughputs)
        return {"decode_throughput": value, "step_latency_p50": 1000.0 / value}

    best = best_run(run, 4, "decode_throughput")
    assert best == {"decode_throughput": 300.0, "step_latency_p50": 1000.0 / 300.0}
    assert os.sched_getaffinity(0) == allowed
    if len(allowed) > 1:
        assert all(len(cpus) == 1 for cpus in seen) and set().union(*seen) == set(sorted(allowed)[:4])


def test_best_of_from_the_environment_is_checked(monkeypatch) -> None:
    monkeypatch.setenv("PARALLAX_BEST_OF", "0")
    with pytest.raises(SystemExit, match=r"PARALLAX_BEST_OF='0' must be a positive integer"):
        best_of()
    monkeypatch.setenv("PARALLAX_BEST_OF", "4")
    assert best_of() == 4


@pytest.mark.parametrize("raw", ["0", "-2", "three"])
def test_repeats_from_the_environment_is_checked(monkeypatch, raw: str) -> None:
    monkeypatch.setenv("PARALLAX_REPEATS", raw)
    with pytest.raises(SystemExit, match=rf"PARALLAX_REPEATS='{raw}' must be a positive integer"):
        repeats()


def test_decode_throughput_best_of_runs_says_so_in_its_context(results, monkeypatch) -> None:
    monkeypatch.setenv("PARALLAX_BEST_OF", "3")
    decode_throughput.main(["--model", "tiny-random", "--mode", "one-batch", "--batch-size", "2",
                            "--input-len", "8", "--output-len", "4"])
    doc = _load(results)
    assert doc["context"]["best_of"] == 3
    assert all(len(m["samples"]) == 2 for m in doc["metrics"])  # still PARALLAX_REPEATS samples


def test_on_the_simulator_each_sample_is_one_run(results, monkeypatch) -> None:
    monkeypatch.setenv("PARALLAX_BEST_OF", "3")
    monkeypatch.setenv("PARALLAX_DEVICE", "sim:cuda-h100")
    decode_throughput.main(["--model", "tiny-random", "--mode", "one-batch", "--batch-size", "2",
                            "--input-len", "8", "--output-len", "4"])
    assert "best_of" not in _load(results)["context"]
