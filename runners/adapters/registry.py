"""The adapters by name (the suite key `adapter`), and the one call the runner makes: the files
of a job's runs in, a validated `parallax.results/1` document out — or an AdapterError, and
nothing at all."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from runners import results
from runners.adapters import lm_eval, sglang_gsm8k, sglang_one_batch, sglang_serving, vllm_serve, vllm_throughput
from runners.adapters.base import AdapterError, Converted, resolve_outputs


@dataclass(frozen=True)
class Adapter:
    name: str
    tool: str          # the command whose output it reads
    stores: str        # what a suite using it will store, in a sentence
    convert: Callable[[Sequence[Sequence[Path]]], Converted]


ADAPTERS: dict[str, Adapter] = {a.name: a for a in (
    Adapter("sglang-bench-one-batch", "python -m sglang.bench_one_batch --result-filename $PARALLAX_OUTPUT_DIR/F",
            "per (batch size, input, output length): prefill/decode/total latency [s] and throughput [tok/s], "
            "e.g. decode_throughput[bs=32,in=1024,out=256]", sglang_one_batch.convert),
    Adapter("sglang-bench-serving", "python -m sglang.bench_serving --output-file $PARALLAX_OUTPUT_DIR/F",
            "per (dataset, lengths, request rate, concurrency): request/input/output throughput and "
            "TTFT, ITL, TPOT, E2E latency mean/median/p95/p99 [ms]", sglang_serving.convert),
    Adapter("sglang-gsm8k", "python benchmark/gsm8k/bench_sglang.py --result-file $PARALLAX_OUTPUT_DIR/F",
            "GSM8k accuracy [fraction] and latency [s], one sample per run", sglang_gsm8k.convert),
    Adapter("vllm-bench-serve", "vllm bench serve --save-result --result-dir $PARALLAX_OUTPUT_DIR --result-filename F",
            "per (request rate, concurrency): request throughput and goodput, output/total/peak throughput "
            "[tok/s], TTFT/TPOT/ITL/E2EL mean, median and percentiles [ms]", vllm_serve.convert),
    Adapter("vllm-bench-throughput", "vllm bench throughput --output-json $PARALLAX_OUTPUT_DIR/F",
            "request throughput [req/s], total token throughput [tok/s], elapsed time [s]", vllm_throughput.convert),
    Adapter("lm-eval", "lm_eval ... --output_path $PARALLAX_OUTPUT_DIR --log_samples",
            "<task>/<metric>[filter=...] per task, and the per-question correctness vector from the "
            "samples_*.jsonl logs", lm_eval.convert),
)}


def get(name: str) -> Adapter:
    try:
        return ADAPTERS[name]
    except KeyError:
        raise KeyError(f"unknown adapter {name!r}; known: {', '.join(sorted(ADAPTERS))}") from None


def build_document(adapter_name: str, run_dirs: Sequence[Path], outputs: Sequence[str], *, suite: str,
                   context: dict[str, Any], environment: dict[str, Any]) -> bytes:
    """Convert the runs' output files into a validated results document (JSON bytes)."""
    adapter = get(adapter_name)
    if not outputs:
        raise AdapterError("outputs", "the suite declares no output files for its adapter")
    runs = [resolve_outputs(run_dir, outputs) for run_dir in run_dirs]
    converted = adapter.convert(runs)
    if not converted.metrics:
        raise AdapterError(run_dirs[0], f"the outputs hold no {adapter.tool.split(' --')[0]} results")
    data: dict[str, Any] = {"schema": results.SCHEMA, "suite": suite, "metrics": converted.metrics,
                            "context": {**converted.context, **context, "adapter": adapter_name},
                            "environment": environment}
    if converted.items is not None:
        data["items"] = converted.items
    document = results.validate(data)
    return json_bytes(results.to_json(document))


def json_bytes(data: dict[str, Any]) -> bytes:
    import json
    return json.dumps(data, allow_nan=False, sort_keys=False).encode()
