"""`python -m sglang.bench_one_batch --result-filename F`: one JSON line per (batch size, input
length, output length) of the sweep, appended to F.

Followed: sgl-project/sglang python/sglang/bench_one_batch.py at 009441505062 —
`latency_test_run_once` builds `measurement_results` (run_name, batch_size, input_len,
output_len, prefill_latency [s], prefill_throughput [tok/s], median_decode_latency [s],
median_decode_throughput [tok/s] only when output_len > 1, total_latency [s],
overall_throughput [tok/s]); `latency_test` appends `json.dumps(result) + "\\n"` per result.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from runners.adapters.base import (
    HIGHER,
    LOWER,
    Collector,
    Converted,
    MetricSpec,
    records_of,
    register_signature,
    require_signature,
)

TOOL = "sglang.bench_one_batch"
register_signature(TOOL, ("run_name", "batch_size", "input_len", "output_len", "prefill_latency"))

SPECS = (
    MetricSpec("prefill_latency", "prefill_latency", "s", LOWER, required=True),
    MetricSpec("prefill_throughput", "prefill_throughput", "tok/s", HIGHER, required=True),
    MetricSpec("median_decode_latency", "decode_latency", "s", LOWER),
    MetricSpec("median_decode_throughput", "decode_throughput", "tok/s", HIGHER),
    MetricSpec("total_latency", "total_latency", "s", LOWER, required=True),
    MetricSpec("overall_throughput", "overall_throughput", "tok/s", HIGHER, required=True),
)


def convert(runs: Sequence[Sequence[Path]]) -> Converted:
    collector = Collector()
    run_names: list[str] = []
    for record in records_of(runs):
        require_signature(record, TOOL)
        params = (("bs", record.integer("batch_size")), ("in", record.integer("input_len")),
                  ("out", record.integer("output_len")))
        name = record.string("run_name")
        if name not in run_names:
            run_names.append(name)  # type: ignore[arg-type]
        if params[2][1] > 1 and record.number("median_decode_throughput", optional=True) is None:
            raise record.error("missing although output_len > 1 (bench_one_batch writes it then)",
                               "median_decode_throughput")
        collector.add_specs(record, SPECS, params)
    return Converted(metrics=collector.as_list(), context={"tool": TOOL, "run_name": run_names})
