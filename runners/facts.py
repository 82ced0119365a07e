"""Platform facts, detected rather than declared: torch's CUDA/HIP build, devices, driver and
toolkit versions, CPU model, torch and Python versions.

torch is probed in a child process: importing it in the long-lived agent would keep a CUDA/HIP
context (and its device memory) alive for weeks, and a wedged driver must not hang the agent.
A box without torch is a `cpu` box.
"""
from __future__ import annotations

import json
import os
import platform as pyplatform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REAL_PLATFORMS = ("cuda", "rocm", "cpu")

# Runs in a child interpreter; prints one JSON object. torch's build writes `torch/version.py` as
# plain assignments (`__version__`, `cuda`, `hip`); a build with neither CUDA nor HIP cannot see a
# device, so for it that file says all the import would, and the import (about 1.2 s of CPU here,
# paid at every runner start) is skipped.
_TORCH_PROBE = r"""
import ast, importlib.util, json, os
out = {"torch": None, "cuda": None, "hip": None, "devices": [], "error": None}
try:
    spec = importlib.util.find_spec("torch")
    build = {}
    if spec is not None and spec.origin:
        try:
            with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as fh:
                tree = ast.parse(fh.read())
        except (OSError, SyntaxError):
            tree = ast.Module(body=[], type_ignores=[])
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
                build[target.id] = node.value.value
    if isinstance(build.get("__version__"), str) and "cuda" in build and "hip" in build \
            and build["cuda"] is None and build["hip"] is None:
        out["torch"] = build["__version__"]
    else:
        import torch  # no torch (no spec): ImportError, below
        out["torch"] = torch.__version__
        out["cuda"] = getattr(torch.version, "cuda", None)
        out["hip"] = getattr(torch.version, "hip", None)
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                out["devices"].append({"name": torch.cuda.get_device_name(i),
                                       "memory_bytes": int(props.total_memory)})
except ImportError:
    pass
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@dataclass
class Facts:
    platform: str
    python: str
    os: str
    cpu_model: str | None
    cpu_count: int | None
    torch: str | None = None
    cuda: str | None = None
    hip: str | None = None
    device: str | None = None
    device_count: int = 0
    device_memory_bytes: list[int] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    driver: str | None = None
    cuda_driver: str | None = None
    rocm: str | None = None
    probe_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def default_labels(self) -> dict[str, str]:
        """Labels a suite may match on; the operator's --label values override them."""
        labels = {"platform": self.platform}
        if self.device:
            labels["gpu"] = self.device
        if self.driver:
            labels["driver"] = self.driver
        return labels


def _run(argv: list[str], timeout_s: float = 20.0) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return pyplatform.processor() or None


def probe_torch(python: str = sys.executable, timeout_s: float = 120.0) -> dict[str, Any]:
    try:
        done = subprocess.run([python, "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"error": f"torch probe timed out after {timeout_s:.0f} s"}
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"torch probe failed (exit {done.returncode}): {done.stderr.strip()[-300:]}"}


def nvidia_smi() -> tuple[str | None, str | None]:
    """(driver version, the driver's CUDA version) from nvidia-smi, when present."""
    driver = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    header = _run(["nvidia-smi"])
    cuda = None
    if header:
        match = re.search(r"CUDA Version:\s*([0-9.]+)", header)
        cuda = match.group(1) if match else None
    return (driver.strip().splitlines()[0].strip() if driver and driver.strip() else None), cuda


def rocm_versions() -> tuple[str | None, str | None]:
    """(kernel driver version from rocm-smi, ROCm release from /opt/rocm), when present."""
    driver = None
    out = _run(["rocm-smi", "--showdriverversion"])
    if out:
        match = re.search(r"Driver version:\s*(\S+)", out, re.IGNORECASE)
        driver = match.group(1) if match else None
    release = None
    for path in ("/opt/rocm/.info/version", "/opt/rocm/.info/version-dev"):
        try:
            with open(path) as fh:
                release = fh.read().strip() or None
                break
        except OSError:
            continue
    return driver, release


def detect(python: str = sys.executable) -> Facts:
    """Detect what this box is. `platform` is cuda or rocm when torch sees a device of that
    build, else cpu."""
    probe = probe_torch(python)
    devices = probe.get("devices") or []
    hip, cuda = probe.get("hip"), probe.get("cuda")
    if devices and hip:
        kind = "rocm"
    elif devices and cuda:
        kind = "cuda"
    else:
        kind = "cpu"
    facts = Facts(platform=kind, python=pyplatform.python_version(),
                  os=f"{pyplatform.system()} {pyplatform.release()}", cpu_model=cpu_model(),
                  cpu_count=os.cpu_count(), torch=probe.get("torch"), cuda=cuda, hip=hip,
                  device=devices[0]["name"] if devices else None, device_count=len(devices),
                  device_memory_bytes=[d["memory_bytes"] for d in devices],
                  devices=[d["name"] for d in devices], probe_error=probe.get("error"))
    if kind == "cuda" or shutil.which("nvidia-smi"):
        facts.driver, facts.cuda_driver = nvidia_smi()
    if kind == "rocm" or shutil.which("rocm-smi"):
        rocm_driver, facts.rocm = rocm_versions()
        facts.driver = facts.driver or rocm_driver
    return facts


if __name__ == "__main__":
    print(json.dumps(detect().as_dict(), indent=2))


# Where an engine's checkout states its version, tried in order (path, regex on the file).
VERSION_FILES = (
    ("python/sglang/version.py", r"__version__\s*=\s*[\"']([^\"']+)[\"']"),    # SGLang
    ("vllm/version.py", r"__version__\s*=\s*[\"']([^\"']+)[\"']"),
    ("lm_eval/__init__.py", r"__version__\s*=\s*[\"']([^\"']+)[\"']"),
    ("pyproject.toml", r"(?m)^version\s*=\s*[\"']([^\"']+)[\"']"),
    ("version.txt", r"(\S+)"),
)


def engine_version(worktree: Path) -> dict[str, str | None]:
    """The checked-out engine's own version string, from the first file above that states one,
    and `git describe` of the checkout (vLLM's version comes from its tags at build time)."""
    found: dict[str, str | None] = {"engine_version": None, "engine_version_source": None}
    for relative, pattern in VERSION_FILES:
        try:
            text = (worktree / relative).read_text(errors="replace")
        except OSError:
            continue
        match = re.search(pattern, text)
        if match:
            found.update(engine_version=match.group(1), engine_version_source=relative)
            break
    try:
        done = subprocess.run(["git", "describe", "--tags", "--always"], cwd=worktree, capture_output=True,
                              text=True, timeout=20, stdin=subprocess.DEVNULL)
        found["git_describe"] = done.stdout.strip() or None if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        found["git_describe"] = None
    return found


def environment_facts(facts: Facts, platform: str, engine: dict[str, str | None],
                      torch_version: str | None = None) -> dict[str, Any]:
    """The results document's `environment` for a measured engine: GPU model and count, driver,
    CUDA / ROCm / HIP versions, torch, and the engine's version."""
    return {
        "platform": platform, "simulated": False,
        "device": facts.device, "device_count": facts.device_count, "devices": facts.devices,
        "driver": facts.driver, "cuda": facts.cuda, "cuda_driver": facts.cuda_driver, "hip": facts.hip,
        "rocm": facts.rocm, "torch": torch_version or facts.torch, "python": facts.python,
        "cpu": facts.cpu_model, **engine,
    }
