"""Adapters on output files written the way each tool writes them (tests/adapters/tool_output.py)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from runners.adapters.base import AdapterError
from runners.adapters.registry import ADAPTERS, build_document
from tests.adapters import tool_output

ENV = {"platform": "rocm", "device": "AMD Instinct MI300X", "simulated": False}


def build(adapter: str, run_dirs: list[Path], outputs: list[str], **context: Any) -> dict[str, Any]:
    raw = build_document(adapter, run_dirs, outputs, suite="s", context=context, environment=ENV)
    return json.loads(raw)


def metric(doc: dict[str, Any], name: str) -> dict[str, Any]:
    found = [m for m in doc["metrics"] if m["name"] == name]
    assert found, f"{name} not in {[m['name'] for m in doc['metrics']]}"
    return found[0]


def runs(tmp_path: Path, n: int) -> list[Path]:
    dirs = [tmp_path / f"run-{i}" for i in range(1, n + 1)]
    for d in dirs:
        d.mkdir()
    return dirs


def test_one_batch_sweep_gives_one_series_per_configuration_with_a_sample_per_run(tmp_path: Path):
    dirs = runs(tmp_path, 3)
    for i, d in enumerate(dirs):
        tool_output.sglang_one_batch(d / "one_batch.jsonl", [
            {"bs": 1, "in": 1024, "out": 256, "decode_throughput": 90.0 + i},
            {"bs": 32, "in": 1024, "out": 256, "decode_throughput": 2400.0 + i},
        ])
    doc = build("sglang-bench-one-batch", dirs, ["one_batch.jsonl"])
    decode = metric(doc, "decode_throughput[bs=32,in=1024,out=256]")
    assert decode["samples"] == pytest.approx([2400.0, 2401.0, 2402.0])
    assert decode["unit"] == "tok/s" and decode["direction"] == "higher_is_better"
    assert metric(doc, "decode_throughput[bs=1,in=1024,out=256]")["samples"] == pytest.approx([90.0, 91.0, 92.0])
    assert metric(doc, "decode_latency[bs=32,in=1024,out=256]")["direction"] == "lower_is_better"
    assert metric(doc, "prefill_latency[bs=1,in=1024,out=256]")["unit"] == "s"
    assert len(doc["metrics"]) == 2 * 6
    assert doc["context"]["adapter"] == "sglang-bench-one-batch" and doc["context"]["run_name"] == ["default"]


def test_one_batch_output_len_one_has_no_decode_metrics(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    tool_output.sglang_one_batch(d / "r.jsonl", [{"bs": 8, "in": 128, "out": 1}])
    names = {m["name"] for m in build("sglang-bench-one-batch", [d], ["r.jsonl"])["metrics"]}
    assert names == {f"{m}[bs=8,in=128,out=1]" for m in
                     ("prefill_latency", "prefill_throughput", "total_latency", "overall_throughput")}


def test_lines_appended_by_repeated_invocations_into_one_file_are_samples_too(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    for value in (100.0, 101.0):
        tool_output.sglang_one_batch(d / "r.jsonl", [{"bs": 4, "in": 64, "out": 16, "decode_throughput": value}])
    doc = build("sglang-bench-one-batch", [d], ["r.jsonl"])
    assert metric(doc, "decode_throughput[bs=4,in=64,out=16]")["samples"] == pytest.approx([100.0, 101.0])


def test_serving_names_series_by_dataset_lengths_rate_and_concurrency(tmp_path: Path):
    dirs = runs(tmp_path, 2)
    for i, d in enumerate(dirs):
        tool_output.sglang_serving(d / "serving.jsonl", output_throughput=5000.0 + i, max_concurrency=64)
        tool_output.sglang_serving(d / "serving.jsonl", output_throughput=900.0 + i, request_rate=4.0,
                                   max_concurrency=None)
    doc = build("sglang-bench-serving", dirs, ["serving.jsonl"])
    assert metric(doc, "output_throughput[dataset=random,in=1024,out=1024,rate=inf,conc=64]")["samples"] \
        == pytest.approx([5000.0, 5001.0])
    assert metric(doc, "output_throughput[dataset=random,in=1024,out=1024,rate=4]")["samples"] \
        == pytest.approx([900.0, 901.0])
    ttft = metric(doc, "ttft_p99[dataset=random,in=1024,out=1024,rate=inf,conc=64]")
    assert ttft["unit"] == "ms" and ttft["direction"] == "lower_is_better"
    assert metric(doc, "itl_p95[dataset=random,in=1024,out=1024,rate=4]")["samples"] == pytest.approx([14.25] * 2)
    assert not any(m["name"].startswith(("accept_length", "std_", "concurrency")) for m in doc["metrics"])


def test_gsm8k_accuracy_and_latency_one_sample_per_run(tmp_path: Path):
    dirs = runs(tmp_path, 2)
    for d, acc in zip(dirs, (0.792, 0.79)):
        tool_output.sglang_gsm8k(d / "gsm8k.jsonl", accuracy=acc)
    doc = build("sglang-gsm8k", dirs, ["gsm8k.jsonl"])
    assert metric(doc, "accuracy") == {"name": "accuracy", "unit": "fraction", "direction": "higher_is_better",
                                       "samples": [0.792, 0.79]}
    assert metric(doc, "latency")["direction"] == "lower_is_better"
    assert doc["context"]["num_questions"] == 200 and "items" not in doc


def test_vllm_serve_reads_single_and_appended_results_and_the_inf_rate_string(tmp_path: Path):
    dirs = runs(tmp_path, 2)
    tool_output.vllm_serve(dirs[0] / "serve.json", output_throughput=3000.0)
    tool_output.vllm_serve(dirs[1] / "serve.json", output_throughput=3100.0)
    tool_output.vllm_serve(dirs[0] / "sweep.json", output_throughput=800.0, request_rate=2.0, max_concurrency=16,
                           append=True)
    tool_output.vllm_serve(dirs[0] / "sweep.json", output_throughput=1500.0, request_rate=8.0, max_concurrency=16,
                           append=True)
    tool_output.vllm_serve(dirs[1] / "sweep.json", output_throughput=810.0, request_rate=2.0, max_concurrency=16)
    tool_output.vllm_serve(dirs[1] / "sweep.json", output_throughput=1490.0, request_rate=8.0, max_concurrency=16,
                           append=True)
    doc = build("vllm-bench-serve", dirs, ["serve.json", "sweep.json"])
    assert metric(doc, "output_throughput[rate=inf]")["samples"] == [3000.0, 3100.0]
    assert metric(doc, "output_throughput[rate=2,conc=16]")["samples"] == [800.0, 810.0]
    assert metric(doc, "output_throughput[rate=8,conc=16]")["samples"] == [1500.0, 1490.0]
    e2el = metric(doc, "e2el_p99[rate=inf]")
    assert e2el["unit"] == "ms" and e2el["direction"] == "lower_is_better" and e2el["samples"] == [7500.0] * 2
    assert not any(m["name"].startswith("request_goodput") for m in doc["metrics"])  # null without --goodput


def test_vllm_throughput_reads_the_indented_object(tmp_path: Path):
    dirs = runs(tmp_path, 2)
    for d, tps in zip(dirs, (20000.0, 20400.0)):
        tool_output.vllm_throughput(d / "throughput.json", tokens_per_second=tps)
    doc = build("vllm-bench-throughput", dirs, ["throughput.json"])
    assert metric(doc, "total_token_throughput")["samples"] == pytest.approx([20000.0, 20400.0])
    assert metric(doc, "elapsed_time")["direction"] == "lower_is_better"


def test_lm_eval_gives_metrics_per_filter_and_the_per_question_vector(tmp_path: Path):
    dirs = runs(tmp_path, 2)
    correct = [1, 0, 1, 1, 0, 0, 1, 0, 1, 1]
    tool_output.lm_eval(dirs[0], correct=correct)
    tool_output.lm_eval(dirs[1], correct=correct[::-1])
    doc = build("lm-eval", dirs, ["**/results_*.json", "**/samples_*.jsonl"])
    strict = metric(doc, "gsm8k/exact_match[filter=strict-match]")
    assert strict["direction"] == "higher_is_better" and strict["samples"] == [0.6, 0.6]
    assert metric(doc, "gsm8k/exact_match[filter=flexible-extract]")["samples"] == [0.7, 0.6]
    assert doc["items"] == {"name": "lm-eval[gsm8k:exact_match,strict-match]", "correct": correct}


def test_lm_eval_items_follow_doc_id_not_file_order(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    _, samples = tool_output.lm_eval(d, correct=[1, 0, 0, 1])
    lines = samples.read_text().splitlines()
    samples.write_text("\n".join(reversed(lines)) + "\n")
    doc = build("lm-eval", [d], ["**/results_*.json", "**/samples_*.jsonl"])
    assert doc["items"]["correct"] == [1, 0, 0, 1]


def test_every_adapter_is_registered_under_its_suite_name():
    assert sorted(ADAPTERS) == ["lm-eval", "sglang-bench-one-batch", "sglang-bench-serving", "sglang-gsm8k",
                                "vllm-bench-serve", "vllm-bench-throughput"]


# ---------------------------------------------------------------- bad input

def failure(adapter: str, run_dir: Path, outputs: list[str]) -> AdapterError:
    with pytest.raises(AdapterError) as info:
        build(adapter, [run_dir], outputs)
    return info.value


def test_a_missing_file_is_named(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    error = failure("sglang-bench-one-batch", d, ["one_batch.jsonl"])
    assert error.file == str(d.resolve() / "one_batch.jsonl") and "missing" in str(error)


def test_a_glob_that_matches_nothing_is_named(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    error = failure("lm-eval", d, ["**/results_*.json"])
    assert "results_*.json" in error.file and "no file matched" in str(error)


def test_an_empty_file_is_refused(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    (d / "r.jsonl").write_text("")
    error = failure("sglang-bench-one-batch", d, ["r.jsonl"])
    assert error.file.endswith("r.jsonl") and "empty" in str(error)


def test_a_file_truncated_mid_line_names_the_line(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    path = d / "r.jsonl"
    tool_output.sglang_one_batch(path, [{"bs": 1, "in": 8, "out": 4, "decode_throughput": 10.0},
                                        {"bs": 2, "in": 8, "out": 4, "decode_throughput": 20.0}])
    text = path.read_text()
    path.write_text(text[: len(text) - 30])
    error = failure("sglang-bench-one-batch", d, ["r.jsonl"])
    assert error.line == 2 and "truncated mid-line" in str(error)


def test_a_field_of_the_wrong_type_names_file_line_and_field(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    path = d / "r.jsonl"
    tool_output.sglang_one_batch(path, [{"bs": 1, "in": 8, "out": 4, "decode_throughput": 10.0}])
    row = json.loads(path.read_text())
    row["median_decode_throughput"] = "fast"
    path.write_text(path.read_text() + json.dumps(row) + "\n")
    error = failure("sglang-bench-one-batch", d, ["r.jsonl"])
    assert (error.file, error.line, error.field) == (str(path.resolve()), 2, "median_decode_throughput")
    assert "must be a number, got str" in str(error)


def test_a_non_finite_measurement_is_refused(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    tool_output.sglang_serving(d / "s.jsonl", output_throughput=float("nan"))
    error = failure("sglang-bench-serving", d, ["s.jsonl"])
    assert error.field == "request_throughput" and "finite" in str(error)


def test_another_tools_file_is_recognised(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    tool_output.sglang_serving(d / "one_batch.jsonl", output_throughput=100.0)
    error = failure("sglang-bench-one-batch", d, ["one_batch.jsonl"])
    assert error.line == 1 and error.field == "run_name"
    assert "not sglang.bench_one_batch output" in str(error) and "sglang.bench_serving" in str(error)


def test_a_vllm_file_given_to_the_sglang_serving_adapter_is_recognised(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    tool_output.vllm_serve(d / "serve.json", output_throughput=100.0)
    error = failure("sglang-bench-serving", d, ["serve.json"])
    assert "vllm bench serve" in str(error)


def test_an_lm_eval_sample_that_is_not_zero_or_one_is_refused(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    _, samples = tool_output.lm_eval(d, correct=[1, 0])
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    lines[1]["exact_match"] = 0.5
    samples.write_text("".join(json.dumps(x) + "\n" for x in lines))
    error = failure("lm-eval", d, ["**/results_*.json", "**/samples_*.jsonl"])
    assert (error.line, error.field) == (2, "exact_match")


def test_outputs_may_not_leave_the_output_directory(tmp_path: Path):
    (d,) = runs(tmp_path, 1)
    error = failure("sglang-bench-one-batch", d, ["../elsewhere.jsonl"])
    assert "stay inside" in str(error)
