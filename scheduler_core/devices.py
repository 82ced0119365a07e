"""The device facade for a platform: ``CudaDevice`` for CUDA and ROCm, ``CpuDevice`` for the CPU, the
simulator's ``SimDevice`` for ``sim:<profile>``. A module of its own so that the facade
(``device.py``) and the simulator (``sim/``, which implements it) import one way."""
from __future__ import annotations

from scheduler_core.device import CpuDevice, CudaDevice, Device
from scheduler_core.platform import Platform, detect_platform
from scheduler_core.sim import make_sim_device


def make_device(platform: Platform | None = None, index: int = 0) -> Device:
    """The device for ``platform`` (detected from PARALLAX_DEVICE and the hardware when None)."""
    platform = detect_platform() if platform is None else platform
    if platform.kind in ("cuda", "rocm"):
        return CudaDevice(platform, index)
    if platform.kind == "cpu":
        return CpuDevice(platform)
    return make_sim_device(platform)
