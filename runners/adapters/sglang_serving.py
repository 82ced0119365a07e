"""`python -m sglang.bench_serving --output-file F`: one JSON line per benchmark (request rate,
concurrency, dataset lengths), appended to F.

Followed: sgl-project/sglang python/sglang/bench_serving.py at 0033168f0f58 — the `result`
dict at the end of `benchmark()` (backend, dataset_name, request_rate (a float; inf is written
as Infinity), max_concurrency, random_input_len, random_output_len, duration, completed,
request_throughput [req/s], input_throughput / output_throughput [tok/s], mean/median/p99
e2e_latency_ms, mean/median/p99 ttft_ms, mean/median/p99 tpot_ms, mean/median/p95/p99 itl_ms,
concurrency, accept_length), appended as `json.dumps(result) + "\\n"`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from runners.adapters.base import (
    HIGHER,
    LOWER,
    Collector,
    Converted,
    MetricSpec,
    Record,
    records_of,
    register_signature,
    require_signature,
)

TOOL = "sglang.bench_serving"
register_signature(TOOL, ("backend", "dataset_name", "request_rate", "completed", "output_throughput",
                          "median_ttft_ms"))

SPECS = (
    MetricSpec("request_throughput", "request_throughput", "req/s", HIGHER, required=True),
    MetricSpec("input_throughput", "input_throughput", "tok/s", HIGHER),
    MetricSpec("output_throughput", "output_throughput", "tok/s", HIGHER, required=True),
    *(MetricSpec(f"{stat}_{what}_ms", f"{what}_{stat}", "ms", LOWER, required=(stat == "median"))
      for what in ("ttft", "itl", "tpot", "e2e_latency") for stat in ("mean", "median", "p95", "p99")),
    MetricSpec("accept_length", "accept_length", "tok", HIGHER),
)


def params(record: Record) -> tuple[tuple[str, Any], ...]:
    dataset = record.string("dataset_name")
    rate = record.number("request_rate", optional=True) if record.data.get("request_rate") != float("inf") \
        else float("inf")
    concurrency = record.data.get("max_concurrency")
    if concurrency is not None:
        concurrency = record.integer("max_concurrency")
    lengths: tuple[tuple[str, Any], ...] = ()
    if dataset and dataset.startswith("random"):
        lengths = (("in", record.integer("random_input_len")), ("out", record.integer("random_output_len")))
    return (("dataset", dataset), *lengths, ("rate", rate), ("conc", concurrency))


def convert(runs: Sequence[Sequence[Path]]) -> Converted:
    collector = Collector()
    backends: list[str] = []
    for record in records_of(runs):
        require_signature(record, TOOL)
        if record.integer("completed") == 0:
            raise record.error("no request completed, so the benchmark measured nothing", "completed")
        backend = record.string("backend")
        if backend not in backends:
            backends.append(backend)  # type: ignore[arg-type]
        collector.add_specs(record, SPECS, params(record))
    return Converted(metrics=collector.as_list(), context={"tool": TOOL, "backend": backends})
