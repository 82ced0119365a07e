"""The on-disk cache of parsed GGUF models: a second load is the first one's model without parsing
the file, two loads at once parse it once, a replaced file is parsed again, a damaged entry is
replaced, and a cache that is off or cannot be written changes nothing but the time."""
from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gguf
import pytest
import torch

from scheduler_core.model import cache as model_cache
from scheduler_core.model import loader
from scheduler_core.model.loader import LoadedModel, load_model

from .tiny_gguf import write_tiny_gguf


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "model-cache"
    monkeypatch.setenv(model_cache.CACHE_ENV, str(root))
    return root


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, load_model("tiny-random"))
    return path


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every time a GGUF file's metadata is parsed."""
    seen: list[str] = []
    real = gguf.GGUFReader

    def counting(path: str, *args: object, **kwargs: object) -> gguf.GGUFReader:
        seen.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", counting)
    return seen


def _same(a: LoadedModel, b: LoadedModel) -> None:
    assert a.config == b.config and a.source == b.source
    state_a, state_b = a.model.state_dict(), b.model.state_dict()
    assert state_a.keys() == state_b.keys()
    for name in state_a:
        assert torch.equal(state_a[name], state_b[name]), name
    text = "Question: 12 apples cost $3.50 — héllo<|endoftext|>"
    assert a.tokenizer.encode(text) == b.tokenizer.encode(text)
    assert (a.tokenizer.eos_token_id, a.tokenizer.bos_token_id) == (b.tokenizer.eos_token_id, b.tokenizer.bos_token_id)


def test_a_second_load_is_the_first_ones_model_without_parsing_the_file(
        cache: Path, tiny_gguf: Path, parses: list[str]) -> None:
    first = load_model(str(tiny_gguf))
    second = load_model(str(tiny_gguf))
    assert parses == [str(tiny_gguf)]
    _same(second, first)
    (entry,) = cache.iterdir()
    assert sorted(p.name for p in entry.iterdir()) == ["config.json", "tokenizer.json", "weights.safetensors"]


def test_a_replaced_file_is_parsed_again(cache: Path, tiny_gguf: Path, parses: list[str]) -> None:
    load_model(str(tiny_gguf))
    write_tiny_gguf(tiny_gguf, load_model("tiny-random", seed=1), name="tiny-gguf-2")
    os.utime(tiny_gguf, ns=(1, 1))  # another modification time even on a coarse-clocked filesystem
    again = load_model(str(tiny_gguf))
    assert len(parses) == 2 and again.config.name == "tiny-gguf-2"
    assert len(list(cache.iterdir())) == 1  # the old file's entry went with the new one's write


def test_a_damaged_entry_is_named_parsed_around_and_replaced(
        cache: Path, tiny_gguf: Path, parses: list[str], caplog: pytest.LogCaptureFixture) -> None:
    first = load_model(str(tiny_gguf))
    (entry,) = cache.iterdir()
    (entry / "weights.safetensors").write_bytes(b"half a file")
    with caplog.at_level(logging.WARNING, logger="scheduler_core.model.cache"):
        again = load_model(str(tiny_gguf))
    assert f"model cache entry {entry} is unreadable" in caplog.text
    _same(again, first)
    assert len(parses) == 2
    load_model(str(tiny_gguf))
    assert len(parses) == 2  # the replaced entry serves the next load


def test_off_turns_the_cache_off(tmp_path: Path, tiny_gguf: Path, parses: list[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(model_cache.CACHE_ENV, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    load_model(str(tiny_gguf))
    load_model(str(tiny_gguf))
    assert len(parses) == 2 and not (tmp_path / "xdg").exists()


def test_a_cache_that_cannot_be_written_is_logged_and_the_model_still_loads(
        tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(model_cache.CACHE_ENV, str(blocker / "cache"))
    with caplog.at_level(logging.WARNING, logger="scheduler_core.model.cache"):
        loaded = load_model(str(tiny_gguf))
    assert loaded.config.name == "tiny-gguf"
    assert f"model cache {blocker / 'cache'} not written" in caplog.text and "PARALLAX_MODEL_CACHE" in caplog.text


def test_a_failed_parse_leaves_nothing_in_the_cache(cache: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a gguf file at all" * 10)
    with pytest.raises(ValueError, match="corrupt"):
        load_model(str(bad))
    assert not cache.exists() or list(cache.iterdir()) == []


def test_two_loads_of_a_file_missing_from_the_cache_at_once_parse_it_once(
        cache: Path, tiny_gguf: Path, parses: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # The first parse goes on only once the second load has looked in the cache and found nothing,
    # so without the lock both would parse.
    looked, real_read = [], model_cache.read
    second_looked = threading.Event()

    def counting_read(*args: object) -> object:
        looked.append(args)
        if len(looked) >= 2:
            second_looked.set()
        return real_read(*args)

    real_parse = loader.parse_gguf

    def waiting_parse(path: Path) -> LoadedModel:
        assert second_looked.wait(60), "the second load never looked in the cache"
        return real_parse(path)

    monkeypatch.setattr(model_cache, "read", counting_read)
    monkeypatch.setattr(loader, "parse_gguf", waiting_parse)
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: load_model(str(tiny_gguf)), range(2))
    assert parses == [str(tiny_gguf)]
    _same(first, second)
