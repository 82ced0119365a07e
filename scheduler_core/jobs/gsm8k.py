"""GSM8k accuracy job: 5-shot "Question: …\\nAnswer:" prompts from the train split, greedy decoding that
stops at "Question:", the last number of the answer as the prediction. Reports accuracy, invalid
rate, output tok/s and the per-question correctness vector to $PARALLAX_RESULTS.

    python -m scheduler_core.jobs.gsm8k [--limit 200] [--data DIR_OR_TEST_JSONL] [--model smollm2-135m]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from scheduler_core.engine import GenerateOutput
from scheduler_core.jobs.common import add_engine_args, finish_sim, hazard_metric, log, make_engine, sim_context, simulator
from scheduler_core.jobs.results import Metric, build_document, current_commit, write_document
from scheduler_core.sampling import SamplingParams

SUITE = "gsm8k"
CACHE_DIR = Path.home() / ".cache" / "parallax" / "gsm8k"
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


class DataNotFound(SystemExit):
    pass


def resolve_data(explicit: str | None) -> Path:
    """The directory holding train.jsonl and test.jsonl: --data, then $PARALLAX_GSM8K, then the cache."""
    candidates = [(explicit, "--data"), (os.environ.get("PARALLAX_GSM8K"), "PARALLAX_GSM8K"),
                  (str(CACHE_DIR), "the cache directory")]
    for value, origin in candidates:
        if not value:
            continue
        path = Path(value).expanduser()
        if path.is_file():
            path = path.parent
        if (path / "test.jsonl").is_file() and (path / "train.jsonl").is_file():
            return path
        if origin != "the cache directory":
            raise DataNotFound(f"GSM8k data not found: {origin} points at {path}, which has no train.jsonl "
                               "and test.jsonl")
    raise DataNotFound(
        "GSM8k data not found. Provide a directory with train.jsonl and test.jsonl (the openai/grade-school-math "
        f"files) with --data DIR, or set PARALLAX_GSM8K=DIR, or copy them to {CACHE_DIR}")


def load_jsonl(path: Path) -> list[dict]:
    with path.open() as fh:
        return [json.loads(line) for line in fh if line.strip()]


def few_shot_prefix(train: list[dict], shots: int) -> str:
    return "".join(f"Question: {ex['question']}\nAnswer: {ex['answer']}\n\n" for ex in train[:shots])


def last_number(text: str) -> float | None:
    found = _NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def label_of(answer: str) -> float:
    return float(answer.split("####")[-1].strip().replace(",", ""))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", help="directory with train.jsonl and test.jsonl (or the test.jsonl file)")
    parser.add_argument("--limit", type=int, default=200, help="number of test questions (from the start)")
    parser.add_argument("--num-shots", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--output", help="write the document here instead of $PARALLAX_RESULTS")
    add_engine_args(parser, max_running=32, kv_tokens=32768)
    args = parser.parse_args(argv)
    data = resolve_data(args.data)
    train, test = load_jsonl(data / "train.jsonl"), load_jsonl(data / "test.jsonl")[: args.limit]
    if not test:
        raise SystemExit("no GSM8k questions selected (--limit must be positive)")
    prefix = few_shot_prefix(train, args.num_shots)
    prompts = [f"{prefix}Question: {ex['question']}\nAnswer:" for ex in test]
    engine = make_engine(args)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, stop=["Question:"])
    done = 0

    def progress(out: GenerateOutput) -> None:
        nonlocal done
        done += 1
        if done % 10 == 0 or done == len(prompts):
            log(f"{done}/{len(prompts)} questions answered")

    log(f"{len(prompts)} questions, {args.num_shots}-shot prompts from {data}")
    start = engine.streams.now()  # wall time, or the simulator's virtual time
    outs = engine.generate(prompts, params, on_finish=progress)
    wall = engine.streams.now() - start
    correct, invalid = [], 0
    for ex, out in zip(test, outs):
        pred = last_number(out.text)
        invalid += pred is None
        correct.append(int(pred is not None and abs(pred - label_of(ex["answer"])) < 1e-6))
    tokens = sum(len(o.output_ids) for o in outs)
    accuracy = sum(correct) / len(correct)
    metrics = [Metric("accuracy", "", "higher_is_better", [accuracy]),
               Metric("invalid_rate", "", "lower_is_better", [invalid / len(correct)]),
               Metric("output_throughput", "tok/s", "higher_is_better", [tokens / wall])]
    device = simulator(engine)
    if device is not None:
        metrics.append(hazard_metric([float(len(device.hazards))]))
    context = {**engine.settings(), "num_questions": len(test), "num_shots": args.num_shots,
               "max_new_tokens": args.max_new_tokens, "wall_s": round(wall, 2), "output_tokens": tokens,
               "commit": current_commit()}
    if device is not None:
        context.update(sim_context(device))
    finish_sim(engine, args)
    doc = build_document(SUITE, metrics, context, items=("gsm8k", correct))
    path = write_document(doc, args.output)
    log(f"accuracy {accuracy:.3f} ({sum(correct)}/{len(correct)}), invalid {invalid}, "
        f"{tokens / wall:.1f} output tok/s, {wall:.1f}s" + (f"; results written to {path}" if path else ""))
    json.dump({k: v for k, v in doc.items() if k != "items"}, sys.stdout, indent=1)
    print()
    return doc


if __name__ == "__main__":
    main()
