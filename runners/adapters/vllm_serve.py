"""`vllm bench serve --save-result [--append-result] --result-filename F`: one JSON object per
benchmark (one line each when appended).

Followed: vllm-project/vllm vllm/benchmarks/serve.py at 009e6d4a1cd6 — `main_async` writes
`result_json`: date, endpoint_type, backend, label, model_id, tokenizer_id, num_prompts,
request_rate (a number, or the string "inf"), burstiness, max_concurrency, then `benchmark()`'s
result: duration, completed, failed, total_input_tokens, total_output_tokens,
request_throughput [req/s], request_goodput [req/s, null without --goodput], output_throughput,
total_token_throughput, max_output_tokens_per_s [tok/s], and per selected metric (ttft, tpot,
itl, e2el by default for generation) mean_/median_/std_/p<percentile>_<metric>_ms [ms].
`--append-result` writes a newline before each object after the first.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from runners.adapters.base import (
    HIGHER,
    LOWER,
    Collector,
    Converted,
    MetricSpec,
    Record,
    read_json_or_lines,
    records_of,
    register_signature,
    require_signature,
    series_name,
)

TOOL = "vllm bench serve"
register_signature(TOOL, ("date", "endpoint_type", "model_id", "num_prompts", "request_rate", "burstiness",
                          "completed", "output_throughput"))

SPECS = (
    MetricSpec("request_throughput", "request_throughput", "req/s", HIGHER, required=True),
    MetricSpec("request_goodput", "request_goodput", "req/s", HIGHER),
    MetricSpec("output_throughput", "output_throughput", "tok/s", HIGHER, required=True),
    MetricSpec("total_token_throughput", "total_token_throughput", "tok/s", HIGHER),
    MetricSpec("max_output_tokens_per_s", "peak_output_throughput", "tok/s", HIGHER),
)
LATENCY = re.compile(r"(mean|median|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms")


def params(record: Record) -> tuple[tuple[str, Any], ...]:
    rate: Any = record.data.get("request_rate")
    if rate != "inf":
        rate = record.number("request_rate")
    concurrency = record.data.get("max_concurrency")
    if concurrency is not None:
        concurrency = record.integer("max_concurrency")
    return (("rate", rate), ("conc", concurrency))


def convert(runs: Sequence[Sequence[Path]]) -> Converted:
    collector = Collector()
    models: list[str] = []
    for record in records_of(runs, read_json_or_lines):
        require_signature(record, TOOL)
        if record.integer("completed") == 0:
            raise record.error("no request completed, so the benchmark measured nothing", "completed")
        model = record.string("model_id")
        if model not in models:
            models.append(model)  # type: ignore[arg-type]
        key = params(record)
        collector.add_specs(record, SPECS, key)
        for field in record.data:
            match = LATENCY.fullmatch(field)
            if match:
                stat, what = match.groups()
                collector.add(series_name(f"{what}_{stat}", key), "ms", LOWER, record.number(field))  # type: ignore[arg-type]
    return Converted(metrics=collector.as_list(), context={"tool": TOOL, "model": models})

