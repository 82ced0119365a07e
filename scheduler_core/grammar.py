"""Constrained decoding: a request's output must match a regular expression or a JSON schema.

Built on ``outlines-core`` (the Rust core of Outlines, one of SGLang's grammar backends; a wheel with
no runtime dependencies, where xgrammar pulls in transformers and triton). ``GrammarBackend`` turns
the tokenizer's vocabulary into the byte strings the constraint is matched on, once per tokenizer,
and compiles a pattern into an index; ``Grammar`` is one request's position in it: ``allowed_mask``
gives the tokens that keep the output inside the language (the end-of-sequence token where the
output may end), ``advance`` moves on by the token the request produced.

The mask depends on the previous token, so a batch with a grammar samples only once its requests'
tokens are on the host: the overlap loop does not overlap it (``ScheduleBatch.needs_host_tokens``,
upstream's grammar sync in ``is_disable_overlap_for_batch``), and the mask is applied on the device
before the greedy pick (upstream's delayed sampling).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch
from outlines_core import Guide, Index, Vocabulary
from outlines_core.json_schema import build_regex_from_schema
from tokenizers import pre_tokenizers

from scheduler_core.model.tokenizer import TextTokenizer


class GrammarError(ValueError):
    """A constraint that cannot be compiled against the vocabulary; the message names the cause."""


@dataclass
class Grammar:
    """One request's state in a compiled constraint."""

    guide: Guide
    vocab_size: int
    eos_token_id: int
    pattern: str

    def allowed_mask(self) -> torch.Tensor:
        """[vocab] bool: the tokens the constraint allows next."""
        mask = torch.zeros(self.vocab_size, dtype=torch.bool)
        allowed = [t for t in self.guide.get_tokens() if t < self.vocab_size]
        mask[allowed] = True
        return mask

    def advance(self, token: int) -> None:
        if token == self.eos_token_id:
            return
        try:
            self.guide.advance(token)
        except Exception as exc:  # outlines-core raises a plain ValueError for a token outside the language
            raise GrammarError(f"token {token} is not allowed by the constraint {self.pattern!r}: {exc}") from exc

    @property
    def finished(self) -> bool:
        """The output so far is a complete match (the end-of-sequence token is allowed)."""
        return self.guide.is_finished()


@dataclass
class GrammarBackend:
    """The tokenizer's vocabulary as outlines-core sees it, and compiled constraints (cached)."""

    tokenizer: TextTokenizer
    vocab_size: int  # the model's (logits) width; tokenizer ids beyond it are never allowed
    _indexes: dict[str, Index] = field(default_factory=dict)

    @cached_property
    def vocabulary(self) -> Vocabulary:
        eos = self.tokenizer.eos_token_id
        if eos is None:
            raise GrammarError("constrained decoding needs a tokenizer with an end-of-sequence token")
        decode_byte = {ch: b for b, ch in _byte_level_chars().items()}
        tokens: dict[bytes, list[int]] = {}
        added = {t.content for t in self.tokenizer.tokenizer.get_added_tokens_decoder().values()}
        for text, token_id in self.tokenizer.tokenizer.get_vocab(with_added_tokens=False).items():
            if token_id == eos or token_id >= self.vocab_size or text in added:
                continue
            try:
                raw = bytes(decode_byte[ch] for ch in text)
            except KeyError:  # not a byte-level token (never produced as text)
                continue
            tokens.setdefault(raw, []).append(token_id)
        return Vocabulary(eos, tokens)

    def regex(self, pattern: str) -> Grammar:
        """A constraint from a regular expression (the whole output must match it)."""
        index = self._indexes.get(pattern)
        if index is None:
            try:
                index = Index(pattern, self.vocabulary)
            except Exception as exc:
                raise GrammarError(f"cannot compile the regular expression {pattern!r}: {exc}") from exc
            self._indexes[pattern] = index
        eos = self.tokenizer.eos_token_id
        assert eos is not None
        return Grammar(Guide(index), self.vocab_size, eos, pattern)

    def json_schema(self, schema: dict[str, Any] | str) -> Grammar:
        """A constraint from a JSON schema (compact JSON, no free whitespace)."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        try:
            pattern = build_regex_from_schema(text, whitespace_pattern="")
        except Exception as exc:
            raise GrammarError(f"cannot turn the JSON schema into a constraint: {exc}") from exc
        return self.regex(pattern)


def _byte_level_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: byte value -> the printable character a BPE vocabulary uses for it."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    assert set(chars.values()) == set(pre_tokenizers.ByteLevel.alphabet())
    return chars


def grammar_masks(reqs: list[Any], vocab_size: int, device: torch.device) -> torch.Tensor | None:
    """[len(reqs), vocab] bool on ``device``: each request's allowed tokens (all, for a request
    without a grammar); None when no request has one."""
    if all(r.grammar is None for r in reqs):
        return None
    full = torch.ones(vocab_size, dtype=torch.bool)
    return torch.stack([full if r.grammar is None else r.grammar.allowed_mask() for r in reqs]).to(device)


def apply_masks(logits: torch.Tensor, masks: torch.Tensor | None) -> torch.Tensor:
    """Logits with every token a row's constraint forbids at -inf (``masks`` [rows, vocab] bool or None)."""
    if masks is None:
        return logits
    return logits.masked_fill(~masks, float("-inf"))
