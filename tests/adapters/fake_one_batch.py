"""Stands in for `python -m sglang.bench_one_batch` in the end-to-end test: takes the same
sweep arguments and appends the same JSON lines (via tool_output.sglang_one_batch) to
--result-filename. The decode throughput comes from the checkout's `speed.json` (per platform),
so a commit can make one platform slower; a seeded 1 % jitter per run stands for noise."""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.adapters import tool_output  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--batch-size", type=int, nargs="+", default=[1])
parser.add_argument("--input-len", type=int, nargs="+", default=[1024])
parser.add_argument("--output-len", type=int, nargs="+", default=[16])
parser.add_argument("--result-filename", required=True)
args = parser.parse_args()

speed = json.loads(Path("speed.json").read_text())[os.environ["PARALLAX_PLATFORM"]]
seed = f"{os.environ['PARALLAX_COMMIT']}-{os.environ['PARALLAX_PLATFORM']}-{os.environ['PARALLAX_RUN']}"
jitter = random.Random(seed)
rows = [{"bs": bs, "in": il, "out": ol, "decode_throughput": speed * bs * jitter.uniform(0.99, 1.01)}
        for bs in args.batch_size for il in args.input_len for ol in args.output_len]
tool_output.sglang_one_batch(Path(args.result_filename), rows)
print(f"wrote {len(rows)} results to {args.result_filename}")
