"""The simulator's C++ core (``native_core.cpp``): built on first use into the kernel cache
(``scheduler_core.native_build``) against the installed torch, and loaded as a Python module.

``PARALLAX_SIM_NATIVE=0`` keeps the simulator on its Python hot path (the reference the C++ core
matches bit for bit). Where the core cannot be built (no C++ compiler, no Python headers), the
simulator says why once and runs the Python path.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import sysconfig
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from scheduler_core.native_build import KernelUnavailable, build
from scheduler_core.platform import PlatformError

log = logging.getLogger(__name__)

NATIVE_ENV = "PARALLAX_SIM_NATIVE"
MODULE = "parallax_sim_core"
SOURCE = Path(__file__).with_name("native_core.cpp")


def wanted() -> bool:
    value = os.environ.get(NATIVE_ENV, "1")
    if value not in ("0", "1"):
        raise PlatformError(f"{NATIVE_ENV}={value!r}: use 1 (the C++ core where it builds) or 0 (Python)")
    return value == "1"


def _flags() -> tuple[tuple[str, ...], tuple[str, ...]]:
    # torch.utils.cpp_extension's include_paths() and library_paths() for a CPU build, without
    # importing it (it imports setuptools: a tenth of a second in every simulated job's process).
    root = Path(torch.__file__).parent
    includes = [str(root / "include"), str(root / "include" / "torch" / "csrc" / "api" / "include"),
                sysconfig.get_paths()["include"]]
    flags = ("-O2", "-shared", "-fPIC", "-std=c++17", "-w", f"-DTORCH_EXTENSION_NAME={MODULE}",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             f"-DPARALLAX_TORCH_VERSION=\"{torch.__version__}\"", *(f"-I{path}" for path in includes))
    libs = root / "lib"
    link = (f"-L{libs}", f"-Wl,-rpath,{libs}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python")
    return flags, link


@cache
def core() -> ModuleType | None:
    """The compiled core, or None (logged once) where it cannot be built or loaded."""
    try:
        flags, link = _flags()
        path = build(SOURCE, flags, compiler=os.environ.get("CXX") or "c++", link=link, timeout_s=600,
                     compiler_env="CXX")
        spec = importlib.util.spec_from_file_location(MODULE, path)
        if spec is None or spec.loader is None:
            raise KernelUnavailable(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (KernelUnavailable, ImportError, OSError) as e:
        log.warning("the simulator runs its Python hot path: its C++ core is unavailable: %s", e)
        return None
    log.info("the simulator's per-op work runs in its C++ core (%s)", path.name)
    return module
