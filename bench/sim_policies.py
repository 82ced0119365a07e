"""Simulator profiles x sync policies on the reference workload: virtual decode tokens/s, device idle
between decode steps, race-detector hazards. Prints a Markdown table and writes JSON to bench/results/.

The rows are the vendor defaults, speculative decoding (self-draft: the model's first 2 layers; n-gram)
and the grammar path on top of the default, the SGLang presets (PARALLAX_SYNC_PRESET; ``sglang-36054`` on
``rocm-mi300x`` is the forecast of the open proposal to turn the barrier on for ROCm), the WAR barrier
read-gated and forced coarse, each switch alone, and the overlap loop off. Noise is off, so the table
is exact and reproducible.

    .venv/bin/python bench/sim_policies.py [--profiles cuda-h100 rocm-mi300x] [--output-len 32] [--model NAME]
        [--rows speculative ...]

``--rows`` keeps only the rows whose label contains one of the words (the vendor default always
stays: it is what "vs default" compares with).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler_core.grammar import GrammarBackend  # noqa: E402
from scheduler_core.jobs.results import current_commit  # noqa: E402
from scheduler_core.model.loader import ModelLoadError, load_model  # noqa: E402
from scheduler_core.platform import DEFAULT_POLICIES, PRESETS, SyncPolicy  # noqa: E402
from scheduler_core.sim.measure import REFERENCE, reference_model, run_reference  # noqa: E402
from scheduler_core.sim.profile import load_profile  # noqa: E402
from scheduler_core.spec import SpecConfig  # noqa: E402

SELF_DRAFT = SpecConfig("self-draft", num_draft_tokens=3, draft_layers=2)
NGRAM = SpecConfig("ngram", num_draft_tokens=4)
GRAMMAR = r"[0-9]{1,6}(\+[0-9]{1,6})*"  # a constraint any output length fits


def rows(vendor: str) -> list[tuple[str, SyncPolicy, bool]]:
    default = DEFAULT_POLICIES[vendor]
    out = [(f"{vendor} default", default, True)]
    for name, preset in PRESETS.items():
        out.append((f"preset {name}", dataclasses.replace(default, **preset.switches), True))
    out += [("default + speculative (self-draft)", default, True),
            ("default + speculative (ngram)", default, True),
            ("default + grammar", default, True)]
    out += [("barrier read-gated", dataclasses.replace(default, war_barrier=True, war_barrier_read_gated=True), True),
            ("barrier coarse (forced)", dataclasses.replace(default, war_barrier=True, war_barrier_read_gated=False), True),
            ("barrier only", SyncPolicy(True, False, False), True),
            ("copy stream only", SyncPolicy(False, True, False), True),
            ("prepare D2H only", SyncPolicy(False, False, True), True),
            ("nothing", SyncPolicy(False, False, False), True),
            ("overlap off", default, False)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profiles", nargs="+", default=["cuda-h100", "rocm-mi300x"])
    parser.add_argument("--output-len", type=int, default=REFERENCE.output_len)
    parser.add_argument("--model", default=None,
                        help="another model (e.g. smollm2-135m, tiny-random-8l) instead of the reference one")
    parser.add_argument("--rows", nargs="+", default=None, metavar="WORD",
                        help="only rows whose label contains one of these words (and the default row)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    try:
        model = reference_model() if args.model is None else load_model(args.model)
    except ModelLoadError as exc:
        parser.error(str(exc))
    workload = dataclasses.replace(REFERENCE, output_len=args.output_len)
    plan = [(p, *row) for p in args.profiles for row in rows(load_profile(p).vendor)
            if args.rows is None or row[0].endswith("default") or any(word in row[0] for word in args.rows)]
    results = []
    backend = GrammarBackend(model.tokenizer, model.config.vocab_size)
    for profile, label, policy, overlap in tqdm(plan, desc="sim runs", file=sys.stderr):
        start = time.perf_counter()
        spec = SELF_DRAFT if "self-draft" in label else NGRAM if "ngram" in label else None
        grammar = (lambda i: backend.regex(GRAMMAR)) if "grammar" in label else None
        run = run_reference(model, profile, policy, overlap=overlap, workload=workload, speculative=spec,
                            grammar=grammar)
        results.append({"profile": profile, "row": label, "policy": dataclasses.asdict(policy), "overlap": overlap,
                        "tokens_per_s": run.tokens_per_s, "idle_pct": run.idle_pct, "hazards": len(run.hazards),
                        "hazard_buffers": sorted({h.buffer for h in run.hazards}),
                        "accept_length": run.accept_length,
                        "wall_s": time.perf_counter() - start})
    print(f"reference workload: batch {workload.batch_size}, input {workload.input_len}, output "
          f"{workload.output_len}, model {model.config.name} ({model.config.num_layers} layers), noise off\n")
    print("| profile | policy | barrier | read-gated | copy stream | prepare D2H | overlap | tok/s (virtual) "
          "| vs default | device idle % | accept length | hazards |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        base = next(x for x in results if x["profile"] == r["profile"] and x["row"].endswith("default"))
        p = r["policy"]
        yes = lambda v: "on" if v else "off"  # noqa: E731
        gated = yes(p["war_barrier_read_gated"]) if p["war_barrier"] else "-"
        print(f"| {r['profile']} | {r['row']} | {yes(p['war_barrier'])} | {gated} | {yes(p['copy_stream'])} "
              f"| {yes(p['fwd_prepare_d2h'])} | {yes(r['overlap'])} | {r['tokens_per_s']:.0f} "
              f"| {100 * (r['tokens_per_s'] / base['tokens_per_s'] - 1):+.1f} % | {r['idle_pct']:.1f} "
              f"| {r['accept_length']:.2f} "
              f"| {r['hazards']}{' (' + ', '.join(r['hazard_buffers']) + ')' if r['hazards'] else ''} |")
    out_dir = REPO / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ("sim_policies.json" if args.model is None else f"sim_policies-{model.config.name}.json")
    if args.rows is not None:
        path = path.with_name(path.stem + "-" + "-".join(args.rows) + ".json")
    path.write_text(json.dumps({"commit": current_commit(), "model": model.config.name,
                                "workload": dataclasses.asdict(workload),
                                "rows": results}, indent=1))
    print(f"\nwritten to {path.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    main()
