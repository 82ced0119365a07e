"""lm-evaluation-harness, `lm_eval ... --output_path DIR --log_samples`: an aggregated
`results_<date>.json` and, per task, a `samples_<task>_<date>.jsonl` per-sample log.

Followed: EleutherAI/lm-evaluation-harness at 4e7e0d47f33b (0.4.13.dev0) —
lm_eval/evaluator_utils.py (`EvalAcc.to_results`: "results" {task: {"alias", "<metric>,<filter>":
value, "<metric>_stderr,<filter>": value or "N/A"}}, "higher_is_better" {task: {metric: bool or
null}}, "n-samples", "configs", "versions", "n-shot"), lm_eval/evaluator.py (one logged sample per
document and filter: doc_id, doc, target, arguments, resps, filtered_resps, filter, metrics (the
metric names), doc_hash, prompt_hash, target_hash, then each metric's value), and
lm_eval/loggers/evaluation_tracker.py (`save_results_aggregated` writes the results with
indent=2 under <output_path>/<model>/results_<date>.json; `save_results_samples` appends one
`json.dumps(sample)` line per sample to samples_<task>_<date>.jsonl next to it).

Metrics: `<task>/<metric>[filter=<filter>]`, one sample per run, direction from
higher_is_better (a metric whose direction lm-eval leaves null is skipped and listed in the
context). Items: the per-document 0/1 values of each task's first reported metric and filter
(for gsm8k: exact_match, strict-match), tasks in name order, documents in doc_id order, from
the first run — the vector the paired accuracy test compares across commits.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from runners.adapters.base import (
    HIGHER,
    LOWER,
    AdapterError,
    Collector,
    Converted,
    Record,
    identify,
    read_json_or_lines,
    read_jsonl,
    register_signature,
    require_signature,
    series_name,
)

TOOL = "lm-evaluation-harness results"
SAMPLES_TOOL = "lm-evaluation-harness samples"
register_signature(TOOL, ("results", "configs", "versions", "n-shot", "higher_is_better"))
register_signature(SAMPLES_TOOL, ("doc_id", "doc", "target", "arguments", "resps", "filtered_resps",
                                  "filter", "metrics"))


def is_samples_file(path: Path) -> bool:
    return path.name.startswith("samples_") and path.suffix == ".jsonl"


def primary_metrics(record: Record) -> tuple[dict[str, list[tuple[str, str, float]]], list[str]]:
    """Per task, its (metric, filter, value) in the order lm-eval reported them; and the names
    skipped for want of a direction."""
    results = record.data["results"]
    directions = record.data["higher_is_better"]
    if not isinstance(results, dict) or not results:
        raise record.error("must be a non-empty object of tasks", "results")
    if not isinstance(directions, dict):
        raise record.error("must be an object", "higher_is_better")
    out: dict[str, list[tuple[str, str, float]]] = {}
    skipped: list[str] = []
    for task, values in results.items():
        if not isinstance(values, dict):
            raise record.error(f"must be an object, got {type(values).__name__}", f"results.{task}")
        for key, value in values.items():
            if key == "alias" or "," not in key:
                continue
            metric, _, filter_key = key.partition(",")
            if metric.endswith("_stderr"):
                continue
            field = f"results.{task}.{key}"
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise record.error(f"must be a number, got {type(value).__name__} {value!r:.60}", field)
            task_dirs = directions.get(task) or {}
            if not isinstance(task_dirs, dict):
                raise record.error("must be an object", f"higher_is_better.{task}")
            direction = task_dirs.get(metric)
            if direction is None:
                skipped.append(f"{task}/{key}")
                continue
            if not isinstance(direction, bool):
                raise record.error(f"must be true, false or null, got {direction!r:.60}",
                                   f"higher_is_better.{task}.{metric}")
            out.setdefault(task, []).append((metric, filter_key, float(value)))
    return out, skipped


def convert(runs: Sequence[Sequence[Path]]) -> Converted:
    collector = Collector()
    skipped: list[str] = []
    first_primary: dict[str, tuple[str, str]] = {}
    first_samples: list[Path] = []
    tasks_seen: list[str] = []
    for run, files in enumerate(runs, start=1):
        results = [f for f in files if not is_samples_file(f)]
        if len(results) != 1:
            where = files[0].parent if files else Path("$PARALLAX_OUTPUT_DIR")
            raise AdapterError(where, f"run {run} must have exactly one results_*.json among its outputs, "
                                      f"found {len(results)}: {[str(f) for f in results]}")
        (record,) = read_json_or_lines(results[0], run)
        if looks_like_samples(record):
            raise record.error("is a per-sample log, not a results file (name it samples_<task>_<date>.jsonl)")
        require_signature(record, TOOL)
        per_task, skipped_here = primary_metrics(record)
        skipped.extend(s for s in skipped_here if s not in skipped)
        directions = record.data["higher_is_better"]
        for task in sorted(per_task):
            if task not in tasks_seen:
                tasks_seen.append(task)
            for metric, filter_key, value in per_task[task]:
                direction = HIGHER if directions[task][metric] else LOWER
                collector.add(series_name(f"{task}/{metric}", (("filter", filter_key),)), "", direction, value)
            if run == 1:
                first_primary[task] = per_task[task][0][:2]
        if run == 1:
            first_samples = [f for f in files if is_samples_file(f)]
    items = correctness(first_samples, first_primary) if first_samples else None
    context: dict[str, Any] = {"tool": "lm-evaluation-harness", "tasks": tasks_seen}
    if skipped:
        context["skipped_without_direction"] = skipped
    return Converted(metrics=collector.as_list(), items=items, context=context)


def looks_like_samples(record: Record) -> bool:
    return identify(record.data) == SAMPLES_TOOL


def correctness(files: Sequence[Path], primary: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """The 0/1 vector of each task's primary metric and filter, from its per-sample log."""
    by_task: dict[str, dict[int, int]] = {}
    for path in files:
        for record in read_jsonl(path, 1):
            require_signature(record, SAMPLES_TOOL)
            task = task_of(path, primary)
            metric, filter_key = primary[task]
            if record.string("filter") != filter_key:
                continue
            doc_id = record.integer("doc_id")
            value = record.number(metric)
            if value not in (0.0, 1.0):
                raise record.error(f"must be 0 or 1 to count as correct or not, got {value}", metric)
            seen = by_task.setdefault(task, {})
            if doc_id in seen:
                raise record.error(f"document {doc_id} appears twice for filter {filter_key!r}", "doc_id")
            seen[doc_id] = int(value)  # type: ignore[arg-type]
    missing = sorted(set(primary) - set(by_task))
    if missing:
        raise AdapterError(files[0].parent, f"no per-sample log for task(s) {missing}; lm-eval writes "
                                            "samples_<task>_<date>.jsonl with --log_samples")
    correct = [by_task[t][d] for t in sorted(by_task) for d in sorted(by_task[t])]
    names = ",".join(f"{t}:{primary[t][0]},{primary[t][1]}" for t in sorted(by_task))
    return {"name": f"lm-eval[{names}]", "correct": correct}


def task_of(path: Path, primary: dict[str, tuple[str, str]]) -> str:
    """samples_<task>_<date>.jsonl: the longest known task name that the file name starts with."""
    stem = path.name[len("samples_"):]
    candidates = [t for t in primary if stem.startswith(t + "_")]
    if not candidates:
        raise AdapterError(path, f"names no task of the results file (tasks: {sorted(primary)})")
    return max(candidates, key=len)
