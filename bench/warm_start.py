"""Cold against warm job starts (runners/warm.py): the demo's decode-throughput command, run N times
each way through `runners.execute.run`, alternating. Reports the command's wall time from start to
exit (one warm interpreter is started and made ready before the first run, untimed, as the runner
does; it forks every warm run) and the decode throughput each run measured, so the table also
shows whether a warm start changes the number being measured. Run:

    .venv/bin/python bench/warm_start.py --runs 10

Prints a table and writes JSON to bench/results/warm_start.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.demo.run import suite_command  # noqa: E402
from runners.execute import resolve_argv, run  # noqa: E402
from runners.warm import ForkedJob, WarmInterpreter  # noqa: E402


def one(argv: list[str], env: dict[str, str], results: Path, warm: WarmInterpreter | None) -> tuple[float, float]:
    output: list[bytes] = []
    started: list[object] = []
    if warm is not None and (reason := warm.mismatch(argv, env)) is not None:
        raise SystemExit(f"the warm interpreter cannot run the command: {reason}")
    outcome = run(argv, cwd=ROOT, env={**env, "PARALLAX_RESULTS": str(results)}, timeout_s=300,
                  output=output.append, interrupt=lambda: None, warm=warm, on_start=started.append)
    if outcome.exit_code != 0:
        raise SystemExit(b"".join(output).decode(errors="replace")[-2000:])
    if warm is not None and not isinstance(started[0], ForkedJob):
        raise SystemExit("the warm interpreter did not fork the command")
    document = json.loads(results.read_text())
    throughput = next(m for m in document["metrics"] if m["name"] == "decode_throughput")
    return outcome.duration_s, statistics.median(throughput["samples"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10, help="runs of each kind (default 10)")
    parser.add_argument("--model", default="tiny-random-8l")
    args = parser.parse_args()
    argv = resolve_argv(suite_command(args.model))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    cold: list[tuple[float, float]] = []
    warm: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.json"
        interpreter = WarmInterpreter.start(argv[0], env, ("torch",), Path(tmp) / "warm")
        if not interpreter.wait_ready(300):
            raise SystemExit("the warm interpreter did not become ready")
        try:
            for i in range(args.runs):
                cold.append(one(argv, env, results, None))
                warm.append(one(argv, env, results, interpreter))
                print(f"run {i + 1}/{args.runs}: cold {cold[-1][0]:.2f} s, warm {warm[-1][0]:.2f} s", file=sys.stderr)
        finally:
            interpreter.close()
    summary = {}
    for name, rows in (("cold", cold), ("warm", warm)):
        seconds = [s for s, _ in rows]
        rates = [r for _, r in rows]
        summary[name] = {"median_s": statistics.median(seconds), "min_s": min(seconds), "max_s": max(seconds),
                         "median_tok_s": statistics.median(rates), "min_tok_s": min(rates), "max_tok_s": max(rates)}
    ratio = summary["cold"]["median_s"] / summary["warm"]["median_s"]
    print(f"{'start':6} {'median s':>9} {'min s':>7} {'max s':>7} {'median tok/s':>13} {'tok/s range':>17}")
    for name, row in summary.items():
        print(f"{name:6} {row['median_s']:9.2f} {row['min_s']:7.2f} {row['max_s']:7.2f} {row['median_tok_s']:13.0f} "
              f"{row['min_tok_s']:8.0f}-{row['max_tok_s']:<8.0f}")
    print(f"cold / warm: {ratio:.2f}x ({args.runs} runs each, alternating; command: {' '.join(suite_command(args.model))})")
    out = ROOT / "bench" / "results" / "warm_start.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": args.runs, "model": args.model, "command": suite_command(args.model),
                               "summary": summary, "cold_over_warm": ratio,
                               "cold": cold, "warm": warm}, indent=2) + "\n")


if __name__ == "__main__":
    main()
