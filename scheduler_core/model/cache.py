"""The on-disk cache of parsed GGUF models: config, tokenizer and fp32 weights, as the loader built them.

Reading SmolLM2-135M's GGUF costs about 7 s of CPU in every process that loads it (every job run
on a runner, every test): `gguf`'s reader parses the 100,000 tokenizer strings one by one, then the
quantized blocks are dequantized and the projections fused. The result is kept as one directory
per GGUF file, ``config.json``, ``tokenizer.json`` and ``weights.safetensors``, which loads in about
a second. An entry is named by the GGUF file's path, size and modification time and by the source
of the modules that build a model from it, so a replaced file or a changed loader is parsed again;
writing an entry removes the entries of older files or loaders of the same file name. Processes
that find the same entry missing at once (a test run's workers, a machine's runners starting
together) parse the file once: one holds the cache's lock while it parses and writes, the others
wait for it and read the entry it wrote.

``PARALLAX_MODEL_CACHE`` names the directory (default ``$XDG_CACHE_HOME/parallax/models``, else
``~/.cache/parallax/models``); ``off`` turns the cache off. A cache that cannot be written or read
is logged and passed by: the model is parsed from the GGUF as without it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from scheduler_core.model import config as config_module
from scheduler_core.model import llama as llama_module
from scheduler_core.model import tokenizer as tokenizer_module
from scheduler_core.model.config import ModelConfig
from scheduler_core.model.tokenizer import TextTokenizer

log = logging.getLogger(__name__)

CACHE_ENV = "PARALLAX_MODEL_CACHE"
# What a cached entry was built by, besides the loader (passed in by it): a change to any of these
# may change the model built from the same file.
_BUILDERS = (config_module, llama_module, tokenizer_module)


def cache_root() -> Path | None:
    """The cache directory, or None when ``PARALLAX_MODEL_CACHE=off``."""
    chosen = os.environ.get(CACHE_ENV)
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "parallax" / "models"


def entry_name(gguf: Path, loader_source: bytes) -> str:
    stat = gguf.stat()
    digest = hashlib.sha256()
    for part in (str(gguf.resolve()), str(stat.st_size), str(stat.st_mtime_ns)):
        digest.update(part.encode() + b"\0")
    digest.update(loader_source)
    for module in _BUILDERS:
        digest.update(Path(module.__file__ or "").read_bytes())
    return f"{gguf.stem}-{digest.hexdigest()[:16]}"


@contextlib.contextmanager
def filling() -> Iterator[None]:
    """Held while a process parses a file the cache lacks and writes its entry. An exclusive
    `flock` on the cache directory itself (no lock file to leave behind), released by the kernel if
    the process dies; without a cache, or one that cannot be created, nothing is locked."""
    root = cache_root()
    handle: int | None = None
    if root is not None:
        try:
            root.mkdir(parents=True, exist_ok=True)
            handle = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as exc:
            log.debug("model cache %s not locked (%s)", root, exc)
            if handle is not None:
                os.close(handle)
            handle = None
    try:
        yield
    finally:
        if handle is not None:
            os.close(handle)


def read(gguf: Path, loader_source: bytes) -> tuple[ModelConfig, TextTokenizer, dict[str, torch.Tensor]] | None:
    """The cached config, tokenizer and state dict for this file, or None (absent, off or unreadable)."""
    root = cache_root()
    if root is None:
        return None
    entry = root / entry_name(gguf, loader_source)
    if not entry.is_dir():
        return None
    try:
        fields = json.loads((entry / "config.json").read_text())
        config = ModelConfig(**fields)
        tokenizer = TextTokenizer(Tokenizer.from_file(str(entry / "tokenizer.json")), config.eos_token_id,
                                  config.bos_token_id)
        state = load_file(str(entry / "weights.safetensors"))
    except Exception as exc:  # a damaged entry: parse the GGUF again, and replace the entry
        log.warning("model cache entry %s is unreadable (%s: %s); reading %s again", entry, type(exc).__name__,
                    exc, gguf)
        shutil.rmtree(entry, ignore_errors=True)
        return None
    return config, tokenizer, state


def write(gguf: Path, loader_source: bytes, config: ModelConfig, tokenizer: TextTokenizer,
          state: dict[str, torch.Tensor]) -> None:
    """Keep a parsed model for the next load; a failure is logged, never raised."""
    root = cache_root()
    if root is None:
        return
    entry = root / entry_name(gguf, loader_source)
    partial: Path | None = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        # Written whole into a fresh directory, then renamed into place: a reader never sees half
        # an entry, and of two processes writing at once the first rename wins.
        partial = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=root))
        (partial / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
        tokenizer.tokenizer.save(str(partial / "tokenizer.json"))
        save_file({name: t.contiguous() for name, t in state.items()}, str(partial / "weights.safetensors"))
        os.rename(partial, entry)
        partial = None
        # The same file's entries for an older loader or an older copy of the file: never read again.
        for stale in root.glob(f"{gguf.stem}-*"):
            if stale != entry and stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
    except OSError as exc:
        if not entry.is_dir():
            log.warning("model cache %s not written (%s); the next load reads %s again (set %s)", root, exc, gguf,
                        CACHE_ENV)
    finally:
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
