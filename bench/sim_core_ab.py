"""The simulator's C++ core against an older revision's, on the narrow toy: one batch
(`sim.measure.REFERENCE` on `tiny-random-8l`, cuda-h100, the CUDA default policy) simulated
`--runs` times in a child process per side, the sides alternating for `--rounds` rounds; per
side and round the best and mean process time of a run, and the plain CPU engine's best in the
same child as a yardstick. Only the core's source differs between the sides (this tree's Python
around it): the older core must take the same interface.

    .venv/bin/python bench/sim_core_ab.py --against REV [--rounds 3] [--runs 40]

Prints a table and writes JSON to bench/results/sim_core_ab.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.backends import print_table, write_results  # noqa: E402
from scheduler_core.engine import Engine  # noqa: E402
from scheduler_core.model.loader import TINY_RANDOM_8L, load_model  # noqa: E402
from scheduler_core.platform import DEFAULT_POLICIES  # noqa: E402
from scheduler_core.sampling import SamplingParams  # noqa: E402
from scheduler_core.sim import native  # noqa: E402
from scheduler_core.sim.measure import REFERENCE, run_reference  # noqa: E402

CORE = "scheduler_core/sim/native_core.cpp"


def child(source: str, runs: int) -> None:
    """One side: the core built from `source`, `runs` simulated toy runs and as many plain ones."""
    torch.set_num_threads(1)
    native.SOURCE = Path(source)
    if native.core() is None:
        raise SystemExit(f"the core from {source} did not build or load (see the warning above)")
    model = load_model(TINY_RANDOM_8L)
    prompts = REFERENCE.prompts(model.config.vocab_size)
    params = SamplingParams(max_new_tokens=REFERENCE.output_len, ignore_eos=True)
    simulated, plain = [], []
    run_reference(model, "cuda-h100", DEFAULT_POLICIES["cuda"])  # warm-up
    for _ in range(runs):
        start = time.process_time()
        run_reference(model, "cuda-h100", DEFAULT_POLICIES["cuda"])
        simulated.append(time.process_time() - start)
        start = time.process_time()
        Engine(model).generate(prompts, params)
        plain.append(time.process_time() - start)
    print(json.dumps({"sim_best_ms": 1000 * min(simulated), "sim_mean_ms": 1000 * statistics.mean(simulated),
                      "plain_best_ms": 1000 * min(plain)}))


def side(source: Path, runs: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", str(source), "--runs", str(runs)], cwd=ROOT,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the run with {source} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="the revision whose core is the other side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.runs)
        return
    if not args.against:
        parser.error("--against REV is required")
    if args.rounds < 1 or args.runs < 1:
        parser.error("--rounds and --runs must be at least 1")
    shown = subprocess.run(["git", "show", f"{args.against}:{CORE}"], cwd=ROOT, capture_output=True, text=True)
    if shown.returncode != 0:
        parser.error(f"no {CORE} at {args.against}: {shown.stderr.strip()}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        older = Path(tmp) / "native_core.cpp"
        older.write_text(shown.stdout)
        for round_ in range(1, args.rounds + 1):
            for label, source in ((args.against, older), ("this tree", ROOT / CORE)):
                print(f"round {round_}/{args.rounds}: {label} ...", file=sys.stderr, flush=True)
                result = side(source, args.runs)
                rows.append({"round": round_, "core": label, **{k: round(v, 1) for k, v in result.items()}})
    print_table(rows, [("round", "round"), ("core", "core"), ("sim best ms", "sim_best_ms"),
                       ("sim mean ms", "sim_mean_ms"), ("plain best ms", "plain_best_ms")])
    write_results("sim_core_ab", rows)


if __name__ == "__main__":
    main()
