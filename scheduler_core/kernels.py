"""Builds every native piece ahead of its first use: the C kernels this CPU takes (decode attention,
block-scaled and AMX projections) and the simulator's C++ core, into the kernel cache
(``native_build``). ``make install`` runs it, so the first engine run or simulated job does not stop
to compile (the core takes about 20 s); anything it cannot build is built, or reported, on first use
as before, so a failure here fails nothing.

    python -m scheduler_core.kernels
"""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any, Callable

from scheduler_core import amx_linear, block_linear, decode_attention
from scheduler_core.sim import native

PIECES: tuple[tuple[str, Callable[[], Any]], ...] = (
    ("decode attention (C)", decode_attention.library),
    ("block-scaled projections (C, AVX-512 or AVX2)", block_linear.library),
    ("AMX projections (C)", amx_linear.library),
    ("the simulator's core (C++)", native.core),
)


def where(loaded: Any) -> str:
    """The file a loaded library (ctypes) or extension module (Python) came from."""
    return Path(getattr(loaded, "_name", None) or loaded.__file__).name


def build_all(echo: Callable[[str], None] = print) -> list[tuple[str, str | None]]:
    """Each piece's name and the file it was built to or found as, or None where it is not available
    here (its own log line says why)."""
    results: list[tuple[str, str | None]] = []
    for name, load in PIECES:
        started = time.perf_counter()
        loaded = load()
        file = None if loaded is None else where(loaded)
        results.append((name, file))
        echo(f"{name}: {file or 'not available here'} ({time.perf_counter() - started:.1f} s)")
    return results


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    build_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
