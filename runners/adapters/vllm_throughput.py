"""`vllm bench throughput --output-json F`: one indented JSON object per run.

Followed: vllm-project/vllm vllm/benchmarks/throughput.py at 020283147c84 — `main` writes
`{"elapsed_time" [s], "num_requests", "total_num_tokens", "requests_per_second" [req/s],
"tokens_per_second" [tok/s, prompt and output tokens]}` with `json.dump(results, f, indent=4)`
(and a `<F stem>.pytorch.json` copy in PyTorch's benchmark format, which this adapter does not
read: declare only F in `outputs`).
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
    read_json_or_lines,
    records_of,
    register_signature,
    require_signature,
)

TOOL = "vllm bench throughput"
register_signature(TOOL, ("elapsed_time", "num_requests", "total_num_tokens", "requests_per_second",
                          "tokens_per_second"))

SPECS = (
    MetricSpec("requests_per_second", "request_throughput", "req/s", HIGHER, required=True),
    MetricSpec("tokens_per_second", "total_token_throughput", "tok/s", HIGHER, required=True),
    MetricSpec("elapsed_time", "elapsed_time", "s", LOWER, required=True),
)


def convert(runs: Sequence[Sequence[Path]]) -> Converted:
    collector = Collector()
    requests: list[int] = []
    for record in records_of(runs, read_json_or_lines):
        require_signature(record, TOOL)
        count = record.integer("num_requests")
        if requests and count != requests[0]:
            raise record.error(f"is {count} but an earlier run had {requests[0]}; the runs measured different "
                               "workloads", "num_requests")
        requests.append(count)
        collector.add_specs(record, SPECS, ())
    return Converted(metrics=collector.as_list(), context={"tool": TOOL, "num_requests": requests[0]})
