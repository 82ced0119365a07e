"""How far the simulator's toy ratio could fall if it stopped hooking the model's layers: the
question a layer-level replay (a layer's ops traced once and replayed) has to answer first.

Runs the 64-wide toy (`tiny-random-8l`) on the simulator (sim:cuda-h100, the reference workload of
`bench/sim_overhead.py`) with its decoder layers hooked as usual, with every layer but the first
run outside the dispatch mode, and with every layer outside it, against the plain CPU engine in the
same process. Layers outside the mode are not timed or race-checked at all, so the last two rows
are lower bounds for any replay, whose own bookkeeping (the spans and vector clocks of the ops it
stands for, the external blocks' accesses) comes on top. Best of ``--repeats`` runs, process CPU
time. Prints a table and writes JSON to bench/results/.

It measures the Python hot path (``PARALLAX_SIM_NATIVE=0``, set here): a layer leaves the hook by
leaving the dispatch mode, which the C++ core does not use.

    .venv/bin/python bench/sim_layer_floor.py [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import torch
from torch.utils._python_dispatch import _disable_current_modes

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ["PARALLAX_SIM_NATIVE"] = "0"

from bench.roofline import best_of  # noqa: E402
from scheduler_core.engine import Engine  # noqa: E402
from scheduler_core.jobs.results import current_commit  # noqa: E402
from scheduler_core.model import llama  # noqa: E402
from scheduler_core.model.loader import TINY_RANDOM_8L, load_model  # noqa: E402
from scheduler_core.platform import DEFAULT_POLICIES  # noqa: E402
from scheduler_core.sampling import SamplingParams  # noqa: E402
from scheduler_core.sim.measure import REFERENCE, run_reference  # noqa: E402

HOOKED_FORWARD = llama.DecoderLayer.forward


def layers_unhooked(skip: Callable[[int], bool]) -> Callable[..., torch.Tensor]:
    """A DecoderLayer.forward that runs the layers `skip` names outside the dispatch mode."""
    def forward(self: llama.DecoderLayer, x: torch.Tensor, *args: object) -> torch.Tensor:
        with _disable_current_modes() if skip(self.self_attn.layer) else nullcontext():
            return HOOKED_FORWARD(self, x, *args)
    return forward


def best_process_s(run: Callable[[], object], repeats: int) -> float:
    return best_of(repeats, run, clock=time.process_time)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    torch.set_num_threads(1)
    model = load_model(TINY_RANDOM_8L)
    prompts = REFERENCE.prompts(model.config.vocab_size)
    params = SamplingParams(max_new_tokens=REFERENCE.output_len, ignore_eos=True)
    Engine(model).generate(prompts, params)  # warm-up

    def simulate() -> object:
        return run_reference(model, "cuda-h100", DEFAULT_POLICIES["cuda"], workload=REFERENCE)

    plain = best_process_s(lambda: Engine(model).generate(prompts, params), args.repeats)
    rows = [("plain CPU engine", plain)]
    for name, skip in (("simulator, every layer hooked", None),
                       ("simulator, layers 1-7 outside the hook", lambda layer: layer > 0),
                       ("simulator, every layer outside the hook", lambda layer: True)):
        llama.DecoderLayer.forward = HOOKED_FORWARD if skip is None else layers_unhooked(skip)
        try:
            rows.append((name, best_process_s(simulate, args.repeats)))
        finally:
            llama.DecoderLayer.forward = HOOKED_FORWARD
    print("| run (tiny-random-8l, sim:cuda-h100) | process CPU s | x plain |")
    print("|---|---:|---:|")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} | {seconds / plain:.2f} |")
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim_layer_floor.json").write_text(json.dumps(
        {"commit": current_commit(), "repeats": args.repeats,
         "rows": [{"run": name, "process_s": seconds, "x_plain": seconds / plain} for name, seconds in rows]},
        indent=1))


if __name__ == "__main__":
    main()
