"""Writing a GGUF file the way llama.cpp's converter does, from the tiny random model: Q8_0 and Q4_1
blocks, F32 norms, Q/K rows permuted."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import torch
from gguf.quants import dequantize, quantize

from scheduler_core.model.loader import LoadedModel


def _llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    # What llama.cpp's converter does to Q/K rows; the loader must undo it.
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(path: Path, tiny: LoadedModel, name: str = "tiny-gguf") -> dict[str, np.ndarray]:
    """Write `tiny` to `path`; returns each GGUF tensor's dequantized values, un-permuted."""
    cfg = tiny.config
    q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    Q8, Q4, F32 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.F32
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_block_count(cfg.num_layers)
    writer.add_context_length(cfg.max_context)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_heads)
    writer.add_head_count_kv(cfg.num_kv_heads)
    writer.add_rope_freq_base(cfg.rope_theta)
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    writer.add_tokenizer_model("gpt2")
    vocab = tiny.tokenizer.tokenizer.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.get)
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t == "<|endoftext|>" else 1 for t in tokens])
    writer.add_eos_token_id(cfg.eos_token_id)
    expected: dict[str, np.ndarray] = {}

    def put(name: str, w: torch.Tensor, qtype: gguf.GGMLQuantizationType, permute_heads: int | None = None) -> None:
        array = w.detach().numpy().astype(np.float32)
        expected[name] = dequantize(quantize(array, qtype), qtype) if qtype != F32 else array
        stored = _llama_cpp_permute(array, permute_heads) if permute_heads else array
        writer.add_tensor(name, quantize(stored, qtype) if qtype != F32 else stored, raw_dtype=qtype)

    put("token_embd.weight", tiny.model.embed_tokens.weight, Q8)
    put("output.weight", tiny.model.lm_head.weight, Q8)
    put("output_norm.weight", tiny.model.norm.weight, F32)
    for i, layer in enumerate(tiny.model.layers):
        wq, wk, wv = layer.self_attn.qkv_proj.weight.split([q_size, kv_size, kv_size])
        gate, up = layer.mlp.gate_up_proj.weight.split(cfg.intermediate_size)
        put(f"blk.{i}.attn_q.weight", wq, Q4, cfg.num_heads)
        put(f"blk.{i}.attn_k.weight", wk, Q4, cfg.num_kv_heads)
        put(f"blk.{i}.attn_v.weight", wv, Q8)
        put(f"blk.{i}.attn_output.weight", layer.self_attn.o_proj.weight, Q8)
        put(f"blk.{i}.ffn_gate.weight", gate, Q4)
        put(f"blk.{i}.ffn_up.weight", up, Q8)
        put(f"blk.{i}.ffn_down.weight", layer.mlp.down_proj.weight, Q8)
        put(f"blk.{i}.attn_norm.weight", layer.input_layernorm.weight, F32)
        put(f"blk.{i}.ffn_norm.weight", layer.post_attention_layernorm.weight, F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return expected
