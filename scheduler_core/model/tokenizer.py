"""Byte-level BPE tokenizer built with the `tokenizers` package from GGUF metadata or a tokenizer.json."""
from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

# GGUF token_type value of control tokens (<|im_start|>, <|endoftext|>, ...), as in llama.cpp.
_CONTROL = 3


class TextTokenizer:
    """Thin wrapper: encode without adding BOS (SmolLM2 does not), decode skipping special tokens."""

    def __init__(self, tokenizer: Tokenizer, eos_token_id: int | None, bos_token_id: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.eos_token_id = eos_token_id
        self.bos_token_id = bos_token_id

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @classmethod
    def from_gguf_fields(cls, tokens: list[str], merges: list[str], token_types: list[int], pre: str,
                         eos_token_id: int | None, bos_token_id: int | None) -> "TextTokenizer":
        vocab = {token: i for i, token in enumerate(tokens)}
        pairs = [tuple(m.split(" ", 1)) for m in merges]
        tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        if pre == "smollm":
            # llama.cpp's "smollm" pre-tokenizer splits every digit before the GPT-2 regex.
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
        else:
            tok.pre_tokenizer = byte_level
        tok.decoder = decoders.ByteLevel()
        specials = [AddedToken(t, special=True, normalized=False)
                    for t, kind in zip(tokens, token_types) if kind == _CONTROL]
        tok.add_special_tokens(specials)
        return cls(tok, eos_token_id, bos_token_id)

    @classmethod
    def from_file(cls, path: str | Path, eos_token_id: int | None, bos_token_id: int | None) -> "TextTokenizer":
        return cls(Tokenizer.from_file(str(path)), eos_token_id, bos_token_id)

    @classmethod
    def byte_level(cls) -> "TextTokenizer":
        """256 byte tokens plus <|endoftext|> (id 256): any text round-trips. For the tiny random model."""
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
        tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
        return cls(tok, eos_token_id=len(alphabet))
