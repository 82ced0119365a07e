"""Loaders: unknown names, corrupt GGUF files, and a Hugging Face safetensors directory."""
from __future__ import annotations

import json

import pytest
import torch

from scheduler_core.engine import Engine
from scheduler_core.model.loader import ModelLoadError, load_model, smollm2_gguf_path
from scheduler_core.sampling import SamplingParams


def test_unknown_model_name() -> None:
    with pytest.raises(ModelLoadError, match="unknown model 'llama-9000'.*smollm2-135m"):
        load_model("llama-9000")


def test_garbage_gguf_file(tmp_path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a gguf file at all" * 10)
    with pytest.raises(ModelLoadError, match="corrupt.*bad.gguf"):
        Engine(model=str(bad))


def test_truncated_gguf_file(tmp_path) -> None:
    bad = tmp_path / "truncated.gguf"
    with smollm2_gguf_path().open("rb") as fh:
        bad.write_bytes(fh.read(2_000_000))
    with pytest.raises(ModelLoadError, match="truncated.gguf"):
        load_model(str(bad))


def test_hf_safetensors_directory_matches_the_same_weights(tmp_path) -> None:
    from safetensors.torch import save_file

    tiny = load_model("tiny-random")
    cfg = tiny.config
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    weights = {"model.embed_tokens.weight": tiny.model.embed_tokens.weight,
               "model.norm.weight": tiny.model.norm.weight, "lm_head.weight": tiny.model.lm_head.weight}
    for i, layer in enumerate(tiny.model.layers):
        p = f"model.layers.{i}."
        wq, wk, wv = layer.self_attn.qkv_proj.weight.split([q, kv, kv])
        gate, up = layer.mlp.gate_up_proj.weight.split(cfg.intermediate_size)
        weights.update({p + "self_attn.q_proj.weight": wq, p + "self_attn.k_proj.weight": wk,
                        p + "self_attn.v_proj.weight": wv, p + "self_attn.o_proj.weight": layer.self_attn.o_proj.weight,
                        p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                        p + "mlp.down_proj.weight": layer.mlp.down_proj.weight,
                        p + "input_layernorm.weight": layer.input_layernorm.weight,
                        p + "post_attention_layernorm.weight": layer.post_attention_layernorm.weight})
    save_file({k: v.detach().contiguous().clone() for k, v in weights.items()}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
        "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.rms_norm_eps, "max_position_embeddings": cfg.max_context,
        "tie_word_embeddings": False, "eos_token_id": cfg.eos_token_id}))
    tiny.tokenizer.tokenizer.save(str(tmp_path / "tokenizer.json"))
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    from_dir = Engine(model=str(tmp_path), kv_tokens=512).generate(["hello there"], params)[0]
    original = Engine(model="tiny-random", kv_tokens=512).generate(["hello there"], params)[0]
    assert from_dir.output_ids == original.output_ids
    assert torch.equal(load_model(str(tmp_path)).model.layers[0].self_attn.qkv_proj.weight,
                       tiny.model.layers[0].self_attn.qkv_proj.weight)


def test_hf_directory_without_weights(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
                                                      "num_hidden_layers": 1, "num_attention_heads": 2}))
    with pytest.raises(ModelLoadError, match="no \\*.safetensors"):
        load_model(str(tmp_path))
