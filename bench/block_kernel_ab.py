"""The block-scaled kernel (scheduler_core/block_linear.c, AVX-512 or AVX2) of this tree against the same
kernel at another git revision, interleaved in one process: for kernel changes that keep the packed
layout, on a machine whose speed drifts by a fifth within minutes (two runs of
bench/block_projections.py minutes apart cannot tell a 10 % change from the drift).

Both builds read the same packed SmolLM2-135M weights (this tree's `pack`); each measurement runs
one projection over all 30 layers in a row (cold: every weight from memory, as in a decode step),
process time, the two kernels alternating, ``--repeats`` times each; the table gives the median per
call, the ratio and whether both give the same bits, and "one step" sums the 30 layers' four
projections and the LM head. Writes JSON to bench/results/block_kernel_ab.json.

    .venv/bin/python bench/block_kernel_ab.py --against REV [--rows 13 16 32] [--repeats 9]
"""
from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.amx_projections import smollm2_weights, write_results  # noqa: E402
from scheduler_core import block_linear, native_build  # noqa: E402
from scheduler_core.native_build import KernelUnavailable  # noqa: E402

SOURCES = ("scheduler_core/block_linear.c", "scheduler_core/block_scale.h")


def kernel_at(revision: str, directory: Path) -> ctypes.CDLL:
    """The kernel as it was at ``revision``, built with this tree's flags into ``directory``."""
    for source in SOURCES:
        shown = subprocess.run(["git", "show", f"{revision}:{source}"], cwd=REPO, capture_output=True)
        if shown.returncode != 0:
            raise SystemExit(f"--against {revision}: {shown.stderr.decode().strip()}")
        (directory / Path(source).name).write_bytes(shown.stdout)
    try:
        path = native_build.build(directory / "block_linear.c", block_linear.FLAGS, directory=directory)
        return native_build.load(path, block_linear.declare)
    except KernelUnavailable as e:
        raise SystemExit(f"the kernel at {revision} does not build here: {e}") from e


def call(library: ctypes.CDLL, x: torch.Tensor, packed: block_linear.BlockWeight, out: torch.Tensor) -> None:
    library.parallax_blocks_linear(x.data_ptr(), x.shape[0], packed.in_features, packed.data.data_ptr(),
                                   packed.bits, packed.out_features, out.data_ptr())


def cold_us(library: ctypes.CDLL, x: torch.Tensor, packs: list[block_linear.BlockWeight], out: torch.Tensor) -> float:
    start = time.process_time()
    for packed in packs:
        call(library, x, packed, out)
    return (time.process_time() - start) / len(packs) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="the git revision whose kernel is the baseline")
    parser.add_argument("--rows", type=int, nargs="+", default=[13, 16, 32])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    if args.repeats < 1 or any(r < 1 for r in args.rows):
        parser.error("--repeats and --rows must be at least 1")
    current = block_linear.library()
    if current is None:
        raise SystemExit("this machine cannot run the block-scaled kernel (no AVX-512, or it did not build)")
    with tempfile.TemporaryDirectory() as scratch:
        baseline = kernel_at(args.against, Path(scratch))
        kernels = {"baseline": baseline, "tree": current}
        weights = smollm2_weights()
        packs = {name: [block_linear.pack(w) for w in layers] for name, layers in weights.items()}
        for name, layer_packs in packs.items():
            first = layer_packs[0]
            if baseline.parallax_blocks_packed_bytes(first.out_features, first.in_features, first.bits) != first.data.numel():
                raise SystemExit(f"the kernel at {args.against} packs {name} into another layout: "
                                 "this bench compares kernels that read the same one")
        results = []
        print(f"{'weight':>8} {'rows':>5} {args.against + ' us':>14} {'this tree us':>13} {'ratio':>6} {'same bits':>9}")
        for rows in args.rows:
            step = {"baseline": 0.0, "tree": 0.0}
            for name, layer_packs in packs.items():
                x = torch.randn(rows, layer_packs[0].in_features)
                outs = {side: torch.empty(rows, layer_packs[0].out_features) for side in kernels}
                for side, library in kernels.items():
                    call(library, x, layer_packs[0], outs[side])
                same = torch.equal(outs["baseline"], outs["tree"])
                times: dict[str, list[float]] = {"baseline": [], "tree": []}
                for repeat in range(args.repeats):
                    order = ("baseline", "tree") if repeat % 2 == 0 else ("tree", "baseline")
                    for side in order:
                        times[side].append(cold_us(kernels[side], x, layer_packs, outs[side]))
                us = {side: statistics.median(t) for side, t in times.items()}
                for side in step:
                    step[side] += us[side] * len(layer_packs)
                results.append({"weight": name, "rows": rows, "baseline_us": us["baseline"], "tree_us": us["tree"],
                                "ratio": us["baseline"] / us["tree"], "same_bits": same})
                print(f"{name:>8} {rows:>5} {us['baseline']:>14.0f} {us['tree']:>13.0f} "
                      f"{us['baseline'] / us['tree']:>6.2f} {'yes' if same else 'no':>9}")
            results.append({"weight": "one step", "rows": rows, "baseline_us": step["baseline"], "tree_us": step["tree"],
                            "ratio": step["baseline"] / step["tree"]})
            print(f"{'one step':>8} {rows:>5} {step['baseline']:>14.0f} {step['tree']:>13.0f} "
                  f"{step['baseline'] / step['tree']:>6.2f}")
    write_results("block_kernel_ab", [{"against": args.against, **r} for r in results])


if __name__ == "__main__":
    main()
