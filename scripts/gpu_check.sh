#!/usr/bin/env bash
# GPU checks of the overlap scheduler, for a lent CUDA machine (about 3-5 minutes):
#   1. equivalence on CUDA: normal / overlap / in-process / torch.distributed disaggregation
#   2. decode throughput (SmolLM2, one batch) with overlap off, overlap + barrier, overlap without barrier
#   3. a short overlap run (plain and disaggregated) under TORCH_CUDA_SANITIZER=1 with the CUDA policy
# Without a CUDA GPU it stops at once with exit status 2 and says so. Results: $OUT (default
# var/gpu_check), one JSON file per step plus summary.json; the summary is printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-var/gpu_check}
MODEL=${GPU_CHECK_MODEL:-smollm2-135m}
mkdir -p "$OUT"
export PYTHONPATH=.

$PY scripts/gpu_check.py require-gpu | tee "$OUT/gpu.json"

echo "== 1/3 equivalence on CUDA" >&2
timeout 150 $PY scripts/gpu_check.py equivalence | tee "$OUT/equivalence.json"

echo "== 2/3 decode throughput: overlap off / on, barrier on / off ($MODEL)" >&2
run_tp() {
    local name=$1 barrier=$2 overlap=$3
    PARALLAX_WAR_BARRIER=$barrier PARALLAX_REPEATS=3 timeout 120 $PY -m scheduler_core.jobs.decode_throughput \
        --model "$MODEL" --device cuda --mode one-batch --batch-size 32 --input-len 128 --output-len 64 \
        "$overlap" --output "$OUT/throughput_$name.json" > /dev/null
}
run_tp no_overlap 1 --no-overlap
run_tp overlap_barrier 1 --overlap
run_tp overlap_no_barrier 0 --overlap

echo "== 3/3 TORCH_CUDA_SANITIZER=1, CUDA policy" >&2
if ! TORCH_CUDA_SANITIZER=1 timeout 120 $PY scripts/gpu_check.py sanitize > "$OUT/sanitizer.json" 2> "$OUT/sanitizer.log"; then
    tail -40 "$OUT/sanitizer.log" >&2
    echo "gpu_check: the sanitizer run failed (see $OUT/sanitizer.log)" >&2
    exit 1
fi
if grep -qi "data race" "$OUT/sanitizer.log"; then
    grep -i -A20 "data race" "$OUT/sanitizer.log" | head -60 >&2
    echo "gpu_check: CSAN reported a data race under the CUDA policy" >&2
    exit 1
fi
cat "$OUT/sanitizer.json"

$PY - "$OUT" <<'EOF' | tee "$OUT/summary.json"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
summary = {"gpu": json.loads((out / "gpu.json").read_text()),
           "equivalence": json.loads((out / "equivalence.json").read_text())["equivalence"],
           "sanitizer": json.loads((out / "sanitizer.json").read_text())}
for name in ("no_overlap", "overlap_barrier", "overlap_no_barrier"):
    doc = json.loads((out / f"throughput_{name}.json").read_text())
    summary[name] = {m["name"]: m["samples"] for m in doc["metrics"]} | {
        "sync_policy": doc["context"]["sync_policy"], "overlap": doc["context"]["overlap"]}
print(json.dumps(summary, indent=1))
EOF
