"""SGLang's GSM8k few-shot benchmark, `python benchmark/gsm8k/bench_sglang.py --result-file F`:
one JSON line per evaluation, appended to F.

Followed: sgl-project/sglang benchmark/gsm8k/bench_sglang.py at 0126b5f43b4f — `main` appends
`{"task": "gsm8k", "backend", "num_gpus", "latency" [s, rounded to 3 places], "accuracy" [a
fraction, rounded to 3 places], "num_requests", "other": {"num_questions", "parallel"}}`.
`python -m sglang.test.few_shot_gsm8k` (python/sglang/test/few_shot_gsm8k.py at 109fdd2fd44a)
writes no file; run the benchmark script instead. Neither writes per-question results, so these
documents carry no `items`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from runners.adapters.base import HIGHER, LOWER, Collector, Converted, records_of, register_signature, require_signature

TOOL = "sglang gsm8k benchmark"
register_signature(TOOL, ("task", "backend", "accuracy", "latency", "num_requests"))


def convert(runs: Sequence[Sequence[Path]]) -> Converted:
    collector = Collector()
    questions: list[int] = []
    for record in records_of(runs):
        require_signature(record, TOOL)
        if record.string("task") != "gsm8k":
            raise record.error(f"is {record.data['task']!r}, expected 'gsm8k'", "task")
        accuracy = record.number("accuracy")
        assert accuracy is not None
        if not 0.0 <= accuracy <= 1.0:
            raise record.error(f"must be a fraction between 0 and 1, got {accuracy}", "accuracy")
        count = record.integer("num_requests")
        if questions and count != questions[0]:
            raise record.error(f"is {count} but an earlier run evaluated {questions[0]} questions; their "
                               "accuracies are not samples of one quantity", "num_requests")
        questions.append(count)
        collector.add("accuracy", "fraction", HIGHER, accuracy)
        collector.add("latency", "s", LOWER, record.number("latency"))  # type: ignore[arg-type]
    return Converted(metrics=collector.as_list(), context={"tool": TOOL, "num_questions": questions[0]})
