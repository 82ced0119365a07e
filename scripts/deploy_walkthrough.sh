#!/usr/bin/env bash
# Follows docs/deploy.md literally: clones this checkout's HEAD into a temporary directory and
# runs the doc's ```sh blocks there in order, in one bash, then prints how long it took.
# VENV=/path/to/.venv skips block 1 (the install) and uses that environment instead.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
git clone -q "$here" "$work/parallax"
script="$work/walkthrough.sh"
python3 - "$here/docs/deploy.md" "$script" "${VENV:-}" <<'PY'
import re, sys
doc, out, venv = sys.argv[1], sys.argv[2], sys.argv[3]
blocks = re.findall(r"```sh\n(.*?)```", open(doc).read(), re.S)
if venv:
    blocks[0] = f'export PATH="{venv}/bin:$PATH"\nparallax --version\n'
with open(out, "w") as f:
    f.write("set -euo pipefail\n")
    for i, block in enumerate(blocks, 1):
        f.write(f'echo "== block {i}" >&2\n{block}\n')
PY
cd "$work/parallax"
start=$(date +%s)
if bash "$script"; then
    echo "walkthrough done in $(( $(date +%s) - start )) s (in $work/parallax)"
else
    status=$?
    echo "walkthrough FAILED after $(( $(date +%s) - start )) s (in $work/parallax)" >&2
    # leave nothing running behind a failed run
    for pid in walkthrough/runner.pid walkthrough/serve.pid; do [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null || true; done
    exit $status
fi
