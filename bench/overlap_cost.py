"""What issue 27's overlap-scheduler features cost on the CPU, against the commit before them, same run.

Exports ``--base`` (default: the merge base with ``main``) into a temporary directory and runs
``bench/engine_vs_transformers.py --engine-only`` (64 GSM8k prompts by default, SmolLM2-135M fp32,
the overlap loop) alternately on the base tree and on this tree, ``--repeats`` times each, then this
tree with speculative decoding (n-gram and self-draft). Prints a table (median tok/s, change against
the base, accept length, whether the outputs equal the base's token for token) and writes JSON to
bench/results/overlap_cost.json.

    .venv/bin/python bench/overlap_cost.py [--base REV] [--repeats 2] [--prompts 32] [--threads 1]
        [--speculative [ngram] [self-draft]] [--data DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.engine_vs_transformers import gsm8k_dir  # noqa: E402
from scheduler_core.jobs.gsm8k import DataNotFound  # noqa: E402


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def run(tree: Path, out: Path, args: argparse.Namespace, *extra: str) -> dict:
    """One engine run in a child process; adds the child's CPU seconds (user + system), which a
    shared machine's load changes far less than the wall time."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # The exported base tree has no ../shared beside it: both sides read the questions this tree finds.
    command = [sys.executable, str(tree / "bench" / "engine_vs_transformers.py"), "--engine-only",
               "--prompts", str(args.prompts), "--threads", str(args.threads), "--json", str(out),
               "--data", str(args.data), *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = json.loads(out.read_text())
    result["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=None, help="the commit to compare with (default: merge base with main)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--speculative", nargs="*", default=["ngram", "self-draft"],
                        help="speculative runs of this tree after the rounds (none: --speculative)")
    parser.add_argument("--data", help="GSM8k directory (default: PARALLAX_GSM8K, the cache, or ../shared)")
    args = parser.parse_args()
    try:
        args.data = gsm8k_dir(args.data)
    except DataNotFound as e:
        parser.error(str(e))
    base = args.base or git("merge-base", "HEAD", "main")
    rows: dict[str, list[dict]] = {"base": [], "head": [], **{f"head + {name}": [] for name in args.speculative}}
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "base"
        tree.mkdir()
        # A plain export of the base commit (git archive): the repository itself is left untouched.
        archive = subprocess.run(["git", "archive", base], cwd=REPO, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        # The same bench script on both sides (the base's may lack --engine-only); it imports the
        # scheduler_core of the tree it sits in.
        for script in ("engine_vs_transformers.py", "roofline.py"):  # roofline: imported by the first
            (tree / "bench" / script).write_text((REPO / "bench" / script).read_text())
        out = Path(tmp) / "run.json"
        for i in range(args.repeats):  # interleaved, the order alternating (ABBA), so load drifts hit both alike
            for side in (("base", "head") if i % 2 == 0 else ("head", "base")):
                print(f"round {i + 1}/{args.repeats}: {side}", file=sys.stderr)
                rows[side].append(run(tree if side == "base" else REPO, out, args))
        for name in args.speculative:
            print(f"head + {name}", file=sys.stderr)
            rows[f"head + {name}"].append(run(REPO, out, args, "--speculative", name))
    reference = rows["base"][0]["output_ids"]
    base_tok_s = statistics.median(r["tok_s"] for r in rows["base"])
    base_cpu = statistics.median(r["cpu_s"] for r in rows["base"])
    summary = []
    print(f"{args.prompts} GSM8k prompts, SmolLM2-135M fp32, overlap loop, {args.threads} thread(s); base {base[:10]}\n")
    print("| engine | runs tok/s (wall) | median tok/s | vs base | runs CPU s (process, load and all) | median CPU s "
          "| vs base | accept length | outputs = base |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, runs in rows.items():
        median = statistics.median(r["tok_s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        accept = runs[0].get("accept_length")
        same = all(r["output_ids"] == reference for r in runs)
        summary.append({"engine": name, "tok_s": [r["tok_s"] for r in runs], "median_tok_s": median,
                        "vs_base_pct": 100 * (median / base_tok_s - 1), "cpu_s": [r["cpu_s"] for r in runs],
                        "median_cpu_s": cpu, "cpu_vs_base_pct": 100 * (cpu / base_cpu - 1),
                        "accept_length": accept, "same_outputs": same})
        each = ", ".join(f"{r['tok_s']:.1f}" for r in runs)
        each_cpu = ", ".join(f"{r['cpu_s']:.1f}" for r in runs)
        accept_text = "-" if accept is None else f"{accept:.2f}"
        print(f"| {name} | {each} | {median:.1f} | {100 * (median / base_tok_s - 1):+.1f} % | {each_cpu} | {cpu:.1f} "
              f"| {100 * (cpu / base_cpu - 1):+.1f} % | {accept_text} | {same} |")
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "overlap_cost.json").write_text(json.dumps({"base": base, "head": git("rev-parse", "HEAD"),
                                                            "prompts": args.prompts, "rows": summary}, indent=1))


if __name__ == "__main__":
    main()
