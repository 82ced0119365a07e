"""Output files written the way each tool writes them (same keys, key order, value types and
file mode), with numbers chosen by the test. Each writer names the source it follows; the
versions are the ones docs/adapters.md lists."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def sglang_one_batch(path: Path, rows: list[dict[str, Any]], run_name: str = "default") -> None:
    """sgl-project/sglang python/sglang/bench_one_batch.py @ 009441505062: latency_test_run_once
    fills measurement_results in this order (median_decode_* only when output_len > 1);
    latency_test opens the result file with "a" and writes json.dumps(result) + "\\n"."""
    with open(path, "a") as fout:
        for row in rows:
            bs, il, ol = row["bs"], row["in"], row["out"]
            result: dict[str, Any] = {"run_name": run_name, "batch_size": bs, "input_len": il, "output_len": ol}
            prefill = row.get("prefill_latency", 0.05)
            result["prefill_latency"] = prefill
            result["prefill_throughput"] = il * bs / prefill
            total = prefill
            if ol > 1:
                decode_latency = bs / row["decode_throughput"]
                total += decode_latency * (ol - 1)
                result["median_decode_latency"] = decode_latency
                result["median_decode_throughput"] = bs / decode_latency
            result["total_latency"] = total
            result["overall_throughput"] = (il + ol) * bs / total
            fout.write(json.dumps(result) + "\n")


def sglang_serving(path: Path, *, output_throughput: float, request_rate: float = float("inf"),
                   max_concurrency: int | None = 64, dataset_name: str = "random", input_len: int = 1024,
                   output_len: int = 1024, median_ttft_ms: float = 120.0, median_itl_ms: float = 9.5) -> None:
    """sgl-project/sglang python/sglang/bench_serving.py @ 0033168f0f58: the `result` dict at the
    end of benchmark(), appended with open(output_file_name, "a") and json.dumps(result) + "\\n"
    (json.dumps spells float("inf") as Infinity)."""
    result = {
        "backend": "sglang", "dataset_name": dataset_name, "request_rate": request_rate,
        "max_concurrency": max_concurrency, "sharegpt_output_len": None, "random_input_len": input_len,
        "random_output_len": output_len, "random_range_ratio": 0.0,
        "duration": 61.2, "completed": 500, "total_input_tokens": 512000, "total_output_tokens": 512000,
        "total_output_tokens_retokenized": 511800, "request_throughput": output_throughput / output_len,
        "input_throughput": output_throughput, "output_throughput": output_throughput,
        "mean_e2e_latency_ms": 9800.0, "median_e2e_latency_ms": 9700.0, "std_e2e_latency_ms": 300.0,
        "p99_e2e_latency_ms": 10900.0, "mean_ttft_ms": median_ttft_ms * 1.1, "median_ttft_ms": median_ttft_ms,
        "std_ttft_ms": 20.0, "p99_ttft_ms": median_ttft_ms * 3, "mean_tpot_ms": 9.6, "median_tpot_ms": 9.5,
        "std_tpot_ms": 0.4, "p99_tpot_ms": 11.0, "mean_itl_ms": median_itl_ms * 1.02,
        "median_itl_ms": median_itl_ms, "std_itl_ms": 2.0, "p95_itl_ms": median_itl_ms * 1.5,
        "p99_itl_ms": median_itl_ms * 3, "concurrency": 63.2, "accept_length": None,
    }
    with open(path, "a") as file:
        file.write(json.dumps(result) + "\n")


def sglang_gsm8k(path: Path, *, accuracy: float, latency: float = 41.3, num_questions: int = 200) -> None:
    """sgl-project/sglang benchmark/gsm8k/bench_sglang.py @ 0126b5f43b4f: main() appends this
    dict (latency and accuracy rounded to 3 places) with json.dumps(value) + "\\n"."""
    with open(path, "a") as fout:
        value = {"task": "gsm8k", "backend": "srt", "num_gpus": 1, "latency": round(latency, 3),
                 "accuracy": round(accuracy, 3), "num_requests": num_questions,
                 "other": {"num_questions": num_questions, "parallel": 64}}
        fout.write(json.dumps(value) + "\n")


def vllm_serve(path: Path, *, output_throughput: float, request_rate: float = float("inf"),
               max_concurrency: int | None = None, append: bool = False) -> None:
    """vllm-project/vllm vllm/benchmarks/serve.py @ 009e6d4a1cd6: result_json (setup, traffic with
    request_rate "inf" as a string, then benchmark()'s result and process_one_metric's
    mean/median/std/p99 for ttft, tpot, itl, e2el), detailed lists dropped without
    --save-detailed, written with json.dump; --append-result adds "\\n" before later objects."""
    result_json: dict[str, Any] = {
        "date": "20250101-120000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": 1000, "request_rate": request_rate if request_rate < float("inf") else "inf",
        "burstiness": 1.0, "max_concurrency": max_concurrency,
        "duration": 80.5, "completed": 1000, "failed": 0, "total_input_tokens": 1024000,
        "total_output_tokens": 128000, "request_throughput": 12.4, "request_goodput": None,
        "output_throughput": output_throughput, "total_token_throughput": output_throughput * 9,
        "latencies": [1.0, 1.1], "queue_times": [0.0, 0.0],
        "max_output_tokens_per_s": output_throughput * 1.3, "max_concurrent_requests": 256, "rtfx": 0.0,
    }
    for name, base in (("ttft", 210.0), ("tpot", 22.0), ("itl", 21.0), ("e2el", 3000.0)):
        result_json[f"mean_{name}_ms"] = base * 1.05
        result_json[f"median_{name}_ms"] = base
        result_json[f"std_{name}_ms"] = base * 0.1
        result_json[f"p99_{name}_ms"] = base * 2.5
    with open(path, mode="a+" if append else "w", encoding="utf-8") as outfile:
        if append and outfile.tell() != 0:
            outfile.write("\n")
        json.dump(result_json, outfile)


def vllm_throughput(path: Path, *, tokens_per_second: float, num_requests: int = 1000) -> None:
    """vllm-project/vllm vllm/benchmarks/throughput.py @ 020283147c84: main() writes these five
    keys with json.dump(results, f, indent=4)."""
    total_num_tokens = num_requests * 1152
    elapsed_time = total_num_tokens / tokens_per_second
    results = {"elapsed_time": elapsed_time, "num_requests": num_requests, "total_num_tokens": total_num_tokens,
               "requests_per_second": num_requests / elapsed_time, "tokens_per_second": total_num_tokens / elapsed_time}
    with open(path, "w") as f:
        json.dump(results, f, indent=4)


def lm_eval(out_dir: Path, *, correct: list[int], date_id: str = "2025-01-01T12-00-00.000000",
            model: str = "meta-llama__Llama-3.1-8B-Instruct") -> tuple[Path, Path]:
    """EleutherAI/lm-evaluation-harness @ 4e7e0d47f33b: evaluator_utils.EvalAcc.to_results (keys
    and "<metric>,<filter>" names), evaluator.py's logged sample per document and filter
    (example.update(metrics) adds exact_match), evaluation_tracker.save_results_aggregated
    (indent=2, <output_path>/<model>/results_<date>.json) and save_results_samples
    (samples_<task>_<date>.jsonl, one json.dumps(sample) + "\\n" per sample, mode "a")."""
    path = out_dir / model
    path.mkdir(parents=True, exist_ok=True)
    n = len(correct)
    flexible = [1 if c or i % 7 == 0 else 0 for i, c in enumerate(correct)]
    strict_acc, flexible_acc = sum(correct) / n, sum(flexible) / n
    results = {
        "results": {"gsm8k": {"alias": "gsm8k", "exact_match,strict-match": strict_acc,
                              "exact_match_stderr,strict-match": 0.011,
                              "exact_match,flexible-extract": flexible_acc,
                              "exact_match_stderr,flexible-extract": 0.012}},
        "group_subtasks": {"gsm8k": []},
        "configs": {"gsm8k": {"task": "gsm8k", "num_fewshot": 5, "output_type": "generate_until"}},
        "versions": {"gsm8k": 3.0},
        "n-shot": {"gsm8k": 5},
        "higher_is_better": {"gsm8k": {"exact_match": True}},
        "n-samples": {"gsm8k": {"original": 1319, "effective": n}},
        "config": {"model": "vllm", "model_args": "pretrained=meta-llama/Llama-3.1-8B-Instruct", "limit": n},
        "task_hashes": {"gsm8k": "ab12"},
        "model_name": "meta-llama/Llama-3.1-8B-Instruct",
    }
    results_file = path / f"results_{date_id}.json"
    results_file.write_text(json.dumps(results, indent=2, ensure_ascii=False), encoding="utf-8")
    samples_file = path / f"samples_gsm8k_{date_id}.jsonl"
    with open(samples_file, "a", encoding="utf-8") as f:
        for filter_key, values in (("strict-match", correct), ("flexible-extract", flexible)):
            for doc_id, value in enumerate(values):
                sample = {
                    "doc_id": doc_id, "doc": {"question": f"q{doc_id}", "answer": "#### 4"},
                    "target": "#### 4", "arguments": {"gen_args_0": {"arg_0": f"Question: q{doc_id}\nAnswer:",
                                                                     "arg_1": {"until": ["Question:"]}}},
                    "resps": [["The answer is 4. #### 4"]], "filtered_resps": ["4" if value else "5"],
                    "filter": filter_key, "metrics": ["exact_match"], "doc_hash": "d", "prompt_hash": "p",
                    "target_hash": "t", "exact_match": float(value),
                }
                f.write(json.dumps(sample, ensure_ascii=False) + "\n")
    return results_file, samples_file
