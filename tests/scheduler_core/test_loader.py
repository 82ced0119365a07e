"""Loaders: unknown names, corrupt GGUF files, and a Hugging Face safetensors directory."""
from __future__ import annotations

import json

import pytest
import torch

from scheduler_core.engine import Engine
from scheduler_core.model.loader import ModelLoadError, first_layers, load_model, smollm2_gguf_path
from scheduler_core.sampling import SamplingParams

from .tiny_gguf import write_tiny_gguf


def test_unknown_model_name() -> None:
    with pytest.raises(ModelLoadError, match="unknown model 'llama-9000'.*smollm2-135m"):
        load_model("llama-9000")


def test_smollm2_8l_is_smollm2_cut_after_its_eighth_layer() -> None:
    full, cut = load_model("smollm2-135m"), load_model("smollm2-135m-8l")
    assert (full.config.num_layers, cut.config.num_layers, len(cut.model.layers)) == (30, 8, 8)
    for name, param in cut.model.state_dict().items():
        assert torch.equal(param, full.model.state_dict()[name]), name
    assert set(full.model.state_dict()) - set(cut.model.state_dict()) == {
        k for k in full.model.state_dict() if k.startswith("layers.") and int(k.split(".")[1]) >= 8}


def test_cutting_more_layers_than_the_model_has_names_both_counts() -> None:
    with pytest.raises(ModelLoadError, match="tiny-random has 2 layers; cannot keep 3"):
        first_layers(load_model("tiny-random"), 3, "tiny-random-3l")


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


def test_gguf_written_with_q8_0_and_q4_1_round_trips(tmp_path) -> None:
    tiny = load_model("tiny-random")
    cfg = tiny.config
    q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    path = tmp_path / "tiny.gguf"
    expected = write_tiny_gguf(path, tiny)

    loaded = load_model(str(path))
    assert loaded.config.name == "tiny-gguf" and not loaded.config.tie_word_embeddings
    layer = loaded.model.layers[1]
    wq, wk, wv = layer.self_attn.qkv_proj.weight.split([q_size, kv_size, kv_size])
    assert torch.equal(wq, torch.from_numpy(expected["blk.1.attn_q.weight"]))  # Q4_1 + un-permuted
    assert torch.equal(wk, torch.from_numpy(expected["blk.1.attn_k.weight"]))
    assert torch.equal(wv, torch.from_numpy(expected["blk.1.attn_v.weight"]))  # Q8_0
    assert torch.equal(loaded.model.norm.weight, torch.from_numpy(expected["output_norm.weight"]))  # F32
    assert (wq - tiny.model.layers[1].self_attn.qkv_proj.weight[:q_size]).abs().max() < 0.2
    out = Engine(model=str(path), kv_tokens=256).generate(["hello"], SamplingParams(max_new_tokens=4))[0]
    assert out.error is None and out.output_ids and loaded.tokenizer.decode(loaded.tokenizer.encode("héllo")) == "héllo"
