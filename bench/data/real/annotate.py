"""The change-point annotations of the real corpus (rule and snapping step: README.md).

The marks below were read by eye off plots of each series (points plus a 9-point running median,
grid every 10 or 25 commits); `snap` moves each mark to the split with the largest difference of
means within 4 commits of it and writes the result into the series files."""
import json
from pathlib import Path

import numpy as np

d = Path("bench/data/real")
S = "level shift"
A = {
 "andymai-brepkit-boolean-cut-box-box": [(18, "drop ~45 %"), (92, "up ~17 % to a new level"), (172, "down ~11 %"), (280, "up ~18 %"), (288, "back down ~9 % after the excursion")],
 "andymai-brepkit-boolean-cut-cylinder-through-box": [(18, "up ~5 %, then a slow upward drift (not marked)")],
 "andymai-brepkit-boolean-fuse-box-box": [(18, "drop ~43 %"), (92, "up ~13 %"), (172, "down ~12 %"), (278, "up ~20 %"), (287, "back down ~9 %")],
 "andymai-brepkit-boolean-intersect-box-box": [],
 "andymai-brepkit-boolean-perforated-cut-36": [(18, "down ~8 %"), (92, "up ~30 %"), (172, "down ~20 %"), (278, "up ~35 %"), (287, "down ~18 %"), (592, "up ~70 %")],
 "huggingface-safetensors-benches-test-flax-py-test-flax-flax-load": [(165, "up ~65 %"), (185, "up ~70 % into a noisy regime"), (275, "up ~75 %"), (355, "down ~50 %"), (450, "down ~30 %"), (505, "up ~130 %")],
 "huggingface-safetensors-benches-test-flax-py-test-flax-sf-load": [(183, "up ~50 %"), (430, "up ~12 % after a drift")],
 "huggingface-safetensors-benches-test-paddle-py-test-paddle-paddle-load": [(7, "up ~35 % for ten commits"), (17, "back down"), (50, "up ~30 %"), (82, "up ~230 %"), (97, "down ~37 %")],
 "huggingface-safetensors-benches-test-paddle-py-test-paddle-sf-load": [(88, "up ~45 %"), (101, "up ~50 %"), (422, "up ~60x")],
 "huggingface-safetensors-benches-test-pt-py-test-pt-pt-load-cpu": [(165, "up ~150 %")],
 "huggingface-safetensors-benches-test-pt-py-test-pt-pt-load-cpu-small": [(22, "down ~15 %"), (33, "down ~50 %"), (72, "down ~16 %")],
 "huggingface-safetensors-benches-test-pt-py-test-pt-sf-load-cpu": [(14, "up from ~5 to ~215"), (82, "down ~42 %"), (163, "up ~90 %"), (238, "up ~14 %"), (436, "up ~8 %")],
 "huggingface-safetensors-benches-test-pt-py-test-pt-sf-load-cpu-small": [(16, "down ~15 %"), (24, "back up ~19 %"), (335, "down ~16 %")],
 "huggingface-safetensors-benches-test-pt-py-test-pt-sf-save-cpu": [(61, "up ~150 %")],
 "huggingface-safetensors-benches-test-tf-py-test-tf-sf-load": [(425, "up ~25 % after a drift")],
 "huggingface-safetensors-benches-test-tf-py-test-tf-tf-load": [(165, "up ~55 %"), (185, "up ~35 %"), (395, "up ~20 %")],
 "rune-rs-rune-aoc-2020-11a": [(258, "down ~25 %"), (300, "down ~12 %"), (325, "down ~70 %"), (353, "up ~230 %")],
 "rune-rs-rune-aoc-2020-19b": [(243, "down ~20 %"), (283, "up ~30 %"), (303, "up ~13 %"), (315, "down ~15 %"), (345, "up ~18 %")],
 "rune-rs-rune-aoc-2020-1a": [(10, "down ~19 %"), (170, "up ~19 %"), (218, "down ~15 %"), (268, "up ~10 %"), (280, "down ~17 %"), (295, "down ~20 %"), (360, "down ~16 %")],
 "rune-rs-rune-aoc-2020-1b": [(8, "down ~15 %"), (295, "down ~20 %"), (323, "down ~15 %"), (333, "up ~65 %"), (360, "down ~15 %"), (388, "up ~20 %")],
 "rune-rs-rune-bf-fib": [], "rune-rs-rune-bf-hello-world": [], "rune-rs-rune-bf-hello-world2": [], "rune-rs-rune-bf-loopity": [],
 "rune-rs-rune-brainfuck-fib": [(87, "down ~10 % after a short bump"), (163, "down ~30 %"), (194, "down ~16 %"), (206, "down ~13 %"), (216, "up ~10 %"), (230, "down ~28 %")],
 "rune-rs-rune-brainfuck-hello-world": [(87, "down ~15 % after a short bump"), (163, "down ~28 %"), (194, "down ~15 %"), (206, "down ~20 %"), (216, "up ~13 %"), (231, "down ~25 %")],
 "rune-rs-rune-fib-15": [(165, "up ~38 %"), (198, "down ~17 %"), (313, "down ~60 %")],
 "rune-rs-rune-fib-20": [(162, "up ~40 %"), (198, "down ~17 %"), (312, "down ~60 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-01-run1k": [(66, "down ~42 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-02-replace1k": [(66, "down ~40 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-03-update10th1k-x16": [(25, "up ~20 %"), (70, "down ~25 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-04-select1k": [(25, "up ~28 %"), (68, "down ~13 %"), (82, "down ~15 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-05-swap1k": [(27, "up ~12 %"), (68, "down ~30 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-06-remove-one-1k": [(68, "down ~38 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-07-create10k": [(66, "down ~37 %"), (81, "down ~16 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-08-create1k-after1k-x2": [(66, "down ~42 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-09-clear1k-x8": [(24, "up ~13 %"), (67, "down ~32 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-21-ready-memory": [],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-22-run-memory": [(25, "up ~5.5 %"), (91, "down ~58 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-25-run-clear-memory": [(25, "up ~7 %"), (64, "down ~6 %")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-41-size-uncompressed": [(34, "down 2.2 % on a noise-free series"), (96, "up 3.4 % on a noise-free series"), (123, "up 1.2 % on a noise-free series")],
 "yewstack-yew-yew-hooks-v0-21-0-keyed-43-first-paint": [],
}
NOTES = {
 "andymai-brepkit-boolean-intersect-box-box": "bimodal: two bands ~10 % apart with runs of a few commits in the upper one, plus low outliers; no change point",
 "rune-rs-rune-bf-fib": "very noisy (~10 % scatter); no persistent shift of 5 %",
 "rune-rs-rune-bf-hello-world": "very noisy; no persistent shift", "rune-rs-rune-bf-hello-world2": "very noisy; no persistent shift",
 "rune-rs-rune-bf-loopity": "very noisy; no persistent shift",
 "yewstack-yew-yew-hooks-v0-21-0-keyed-21-ready-memory": "slow staircase drift of +10 % over the whole history in steps of 1-2 % (a trend, not marked)",
 "yewstack-yew-yew-hooks-v0-21-0-keyed-43-first-paint": "slow downward drift of ~12 % over commits 20-70 (a trend, not marked)",
}
files = sorted(p for p in d.glob("*.json") if p.name != "split.json")
assert {p.stem for p in files} == set(A), set(A) ^ {p.stem for p in files}
for p in files:
    s = json.loads(p.read_text())
    v = np.array(s["values"])
    n = len(v)
    cps = []
    marks = [m for m, _ in A[p.stem]]
    for k, (mark, reason) in enumerate(A[p.stem]):
        lo = marks[k - 1] + 2 if k else 0
        hi = marks[k + 1] - 2 if k + 1 < len(marks) else n
        best, score = mark, -1.0
        for i in range(max(lo + 1, mark - 4), min(hi, n - 1, mark + 5)):
            left, right = v[max(lo, i - 8):i], v[i:min(hi, i + 8)]
            gap = abs(float(np.mean(right)) - float(np.mean(left)))
            if gap > score + 1e-12 * abs(gap):
                best, score = i, gap
        cps.append({"index": int(best), "marked_at": mark, "reason": reason})
    s["change_points"] = cps
    s["annotated"] = True
    if p.stem in NOTES:
        s["annotation_note"] = NOTES[p.stem]
    p.write_text(json.dumps(s, indent=1) + "\n")
    print(p.stem[:50], [(c["marked_at"], c["index"]) for c in cps])
