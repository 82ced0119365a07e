"""A stand-in suite command for runner tests, run by absolute path inside the job's worktree.

It reports what it can see — the checked-out HEAD, the file contents, its PARALLAX_* variables —
so tests check the runner, not the suite. FAKE_SUITE_MODE (inherited from the runner's
environment) picks a behaviour; FAKE_SUITE_DIR receives marker files tests wait on.
"""
from __future__ import annotations

import sys

# Which of these a warm interpreter (runners/warm.py) imported before the suite started.
PRELOADED = sorted(name for name in ("decimal", "fractions") if name in sys.modules)

import json  # noqa: E402  (after the look at sys.modules above)
import math  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

MODE = os.environ.get("FAKE_SUITE_MODE", "ok")
CONTROL = Path(os.environ.get("FAKE_SUITE_DIR", "."))


def mark(name: str, **data: object) -> None:
    tmp = CONTROL / f".{name}.tmp"
    tmp.write_text(json.dumps(data))
    tmp.replace(CONTROL / name)


def document(samples: list[float]) -> dict[str, object]:
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    device = os.environ.get("PARALLAX_DEVICE", "")
    return {
        "schema": "parallax.results/1",
        "suite": os.environ.get("PARALLAX_SUITE", "fake"),
        "metrics": [{"name": "output_throughput", "unit": "tok/s", "direction": "higher_is_better",
                     "samples": samples}],
        "context": {"head": head, "file": Path("file.txt").read_text().strip(),
                    "job_id": os.environ.get("PARALLAX_JOB_ID"), "commit_env": os.environ.get("PARALLAX_COMMIT"),
                    "repeats": os.environ.get("PARALLAX_REPEATS"), "device_env": device,
                    "secret_seen": "PARALLAX_REGISTRATION_TOKEN" in os.environ, "preloaded": PRELOADED,
                    "main": __name__, "pid": os.getpid()},
        "environment": {"platform": os.environ.get("PARALLAX_PLATFORM"), "device": "fake",
                        "simulated": device.startswith("sim:") and MODE != "claims-real"},
    }


def write(doc: dict[str, object]) -> None:
    text = json.dumps(doc)
    if MODE == "overflow":  # valid JSON whose first sample parses to infinity
        text = text.replace("[100.0", "[1e999", 1)
    Path(os.environ["PARALLAX_RESULTS"]).write_text(text)


def main() -> int:
    print(f"fake suite: mode {MODE}, job {os.environ.get('PARALLAX_JOB_ID')}", flush=True)
    repeats = int(os.environ.get("PARALLAX_REPEATS", "1"))
    samples = [100.0 + i for i in range(repeats)]
    if MODE == "hang":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        mark("started", pid=os.getpid(), child=child.pid)
        time.sleep(600)
        return 0
    if MODE == "block":
        # Runs until the test creates `release`; SIGTERM is ignored so that only the runner's
        # escalation to SIGKILL ends it.
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        mark("started", pid=os.getpid(), attempt=os.environ.get("PARALLAX_ATTEMPT"))
        while not (CONTROL / "release").exists():
            time.sleep(0.05)
    if MODE == "nan":
        samples[0] = math.nan
    if MODE == "exit3":
        print("something went wrong in the engine", flush=True)
        return 3
    if MODE == "nul":  # output with NUL bytes, then a failure
        sys.stdout.buffer.write(b"engine crashed\x00\x00 at step 7\n")
        sys.stdout.flush()
        return 3
    if MODE == "silent":
        return 0
    doc = document(samples)
    print(f"measured at {doc['context']['head']}", flush=True)  # type: ignore[index]
    write(doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
