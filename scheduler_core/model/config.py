"""Model hyper-parameters, read from GGUF metadata or a Hugging Face config.json."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    rope_theta: float
    rms_norm_eps: float
    max_context: int
    tie_word_embeddings: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads
