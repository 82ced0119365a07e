"""How long `parallax --help` takes: the lazy top-level help (each command's one-line summary
from `app.cli.SUMMARIES`, nothing imported) against the alternative it replaced in the same run
(click's own `format_commands`, which imports every command module — Flask, SQLAlchemy, gevent,
numpy — to read each command's help). Each is a fresh process, as a user runs it.

    .venv/bin/python bench/cli_help.py [--runs 5]

Prints a table and writes JSON to bench/results/cli_help.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARALLAX = Path(sys.executable).with_name("parallax")
EAGER = ("import click\nfrom app.cli import LazyGroup, main\n"
         "LazyGroup.format_commands = click.Group.format_commands\nmain(['--help'])\n")
CASES = {
    "parallax --help (lazy summaries)": [str(PARALLAX), "--help"],
    "click's format_commands (imports every command)": [sys.executable, "-c", EAGER],
    "parallax --version": [str(PARALLAX), "--version"],
}


def wall(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, timeout=120)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    results = {}
    for name, argv in CASES.items():
        wall(argv)  # warm the file cache once
        times = [wall(argv) for _ in range(args.runs)]
        results[name] = {"median_s": statistics.median(times), "max_s": max(times), "runs": args.runs}
        print(f"{name:<50} median {results[name]['median_s']:.3f} s   max {results[name]['max_s']:.3f} s", flush=True)
    out = ROOT / "bench" / "results" / "cli_help.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
