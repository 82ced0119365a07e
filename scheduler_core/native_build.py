"""Building Parallax's C kernels on the machine that runs them: one source file into a shared
library, compiled on first use with the machine's C compiler (``$CC``, else ``cc``; a fraction of
a second) into a cache directory (``$PARALLAX_KERNEL_CACHE``, else
``$XDG_CACHE_HOME/parallax/kernels``, else ``~/.cache/...``), named by a hash of the source, the
flags, the compiler and the CPU, so a changed source or another CPU builds its own copy. A header
the source includes by name (``#include "x.h"``, beside the source) is part of the hash.

Used by `scheduler_core.decode_attention`, `scheduler_core.amx_linear` and
`scheduler_core.block_linear`; each keeps its own source, flags and fallback.
"""
from __future__ import annotations

import ctypes
import fcntl
import hashlib
import logging
import os
import platform
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

log = logging.getLogger(__name__)

CACHE_ENV = "PARALLAX_KERNEL_CACHE"


class KernelUnavailable(RuntimeError):
    """A kernel could not be built or loaded; the message says why."""


def cache_dir() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "parallax" / "kernels"


def cpu_flags_line() -> str:
    """The CPU's feature flags as /proc/cpuinfo lists them ("" where it cannot be read)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return ""


_LOCAL_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def _source_with_headers(source_path: Path) -> bytes:
    """The source's bytes followed by those of each header it includes by name from its own
    directory, so that changing a shared header builds the kernel again."""
    source = source_path.read_bytes()
    parts = [source]
    for name in _LOCAL_INCLUDE.findall(source):
        header = source_path.parent / name.decode()
        if header.is_file():
            parts.append(header.read_bytes())
    return b"\0".join(parts)


def _cpu_identity() -> str:
    """What -march=native compiles for: the machine and its CPU's feature flags."""
    return platform.machine() + (cpu_flags_line() or platform.processor())


def build(source_path: Path, flags: tuple[str, ...], compiler: str | None = None,
          directory: Path | None = None, link: tuple[str, ...] = (), timeout_s: float = 120,
          compiler_env: str = "CC") -> Path:
    """The compiled library's path, compiling it if this source, flags, compiler and CPU have none
    yet; ``link`` goes after the source (libraries). Processes asking at once wait for one build.
    ``compiler_env`` names the variable that chooses the compiler (``CXX`` for C++). Raises
    `KernelUnavailable` naming what is missing or what the compiler said."""
    compiler = compiler or os.environ.get(compiler_env) or "cc"
    found = shutil.which(compiler)
    if found is None:
        raise KernelUnavailable(f"no C compiler {compiler!r} on PATH (set {compiler_env})")
    source = _source_with_headers(source_path)
    digest = hashlib.sha256(b"\0".join([source, " ".join(flags + link).encode(), found.encode(),
                                        _cpu_identity().encode()])).hexdigest()[:16]
    directory = directory or cache_dir()
    stem = source_path.stem
    target = directory / f"{stem}-{digest}.so"
    if target.exists():
        return target
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = os.open(directory, os.O_RDONLY)
    except OSError as e:
        raise KernelUnavailable(f"cannot write the kernel cache {directory}: {e} (set {CACHE_ENV})") from e
    try:
        # One process compiles; the others wait here and then find the file (a C++ extension takes
        # twenty seconds of CPU: four test workers compiling it at once would pay that four times).
        # The lock is the directory's own, so the cache holds nothing but the libraries.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            _compile(found, compiler, source_path, flags, link, directory, target, timeout_s)
    finally:
        os.close(lock)
    return target


def _compile(found: str, compiler: str, source_path: Path, flags: tuple[str, ...], link: tuple[str, ...],
             directory: Path, target: Path, timeout_s: float) -> None:
    stem = source_path.stem
    try:
        # Compiled beside the target and renamed: a reader never sees a half-written file.
        fd, partial = tempfile.mkstemp(prefix=f".{stem}-", suffix=".so", dir=directory)
        os.close(fd)
    except OSError as e:
        raise KernelUnavailable(f"cannot write the kernel cache {directory}: {e} (set {CACHE_ENV})") from e
    try:
        result = subprocess.run([found, *flags, "-o", partial, str(source_path), *link], capture_output=True,
                                text=True, timeout=timeout_s)
        if result.returncode != 0:
            raise KernelUnavailable(f"{compiler} failed on {source_path.name}: {result.stderr.strip()[-2000:]}")
        os.replace(partial, target)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KernelUnavailable(f"{compiler} could not build {source_path.name}: {e}") from e
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def load(path: Path, declare: Callable[[ctypes.CDLL], None]) -> ctypes.CDLL:
    """The library at ``path``, its functions typed by ``declare``; `KernelUnavailable` if it cannot
    be loaded."""
    try:
        library = ctypes.CDLL(str(path))
    except OSError as e:
        raise KernelUnavailable(f"cannot load {path}: {e}") from e
    declare(library)
    return library


def build_and_load(source_path: Path, flags: tuple[str, ...], declare: Callable[[ctypes.CDLL], None]) -> ctypes.CDLL:
    """`build`, then `load`; a cached file that does not load (a full disk, a crash) is built again,
    once. Raises `KernelUnavailable` naming what went wrong."""
    path = build(source_path, flags)
    try:
        return load(path, declare)
    except KernelUnavailable as e:
        log.warning("%s; building it again", e)
        path.unlink(missing_ok=True)
        return load(build(source_path, flags), declare)
