"""Llama-architecture decoder in plain PyTorch: batched extend (prefill) and decode over a paged KV cache.

Tokens of all requests in a batch are flattened into one ragged row list; attention gathers each
request's KV slots into a padded [batch, kv_len] view and masks the padding.

On the plain CPU in fp32 the projections and the LM head multiply with oneDNN-prepacked copies of
their weights, or on one thread of a CPU with AMX on its tiles (`scheduler_core.cpu_kernels`), and
on one thread decode attention reads the paged cache in place (`scheduler_core.decode_attention`)
instead of gathering it. Under a
``TorchDispatchMode`` (the GPU simulator times and race-checks every aten op, and neither kernel is
one) and with ``PARALLAX_CPU_KERNELS=aten`` the forward runs the plain aten ops.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from scheduler_core import decode_attention
from scheduler_core.cpu_kernels import linear, native_decode_attention, ops_observed, pack_ahead, prepacked_projections
from scheduler_core.model.config import ModelConfig


@dataclass
class AttnGroup:
    """Attention metadata for a set of requests padded together: [B, max_kv] KV views and masks."""

    kv_indices: torch.Tensor  # [B, max_kv] KV slots of each request (padding points at slot 0)
    attn_mask: torch.Tensor  # [B, 1, max_q, max_kv] True where a query may attend
    pad_index: torch.Tensor  # [Tg] row of each token in the padded [B * max_q] layout
    max_q: int
    token_index: torch.Tensor | None = None  # [Tg] this group's rows of the batch's tokens; None: all
    # Decode with a KV prefix shared by every request (same slots, e.g. a few-shot prompt from the
    # radix cache): attention over it runs once for the whole group, and kv_indices/attn_mask then
    # cover only each request's own suffix.
    prefix_slots: torch.Tensor | None = None  # [P]
    kv_lens: torch.Tensor | None = None  # [B] int64: request i's keys are kv_indices[i, :kv_lens[i]]

    @property
    def batch_size(self) -> int:
        return self.kv_indices.shape[0]

    @classmethod
    def build(cls, prefix_lens: list[int], extend_lens: list[int], kv_slots: list[torch.Tensor],
              device: torch.device, token_index: torch.Tensor | None = None) -> "AttnGroup":
        """`kv_slots[i]` holds all KV slots of request i (prefix + new tokens), in position order."""
        batch = len(extend_lens)
        max_q = max(extend_lens)
        kv_lens = [p + e for p, e in zip(prefix_lens, extend_lens)]
        max_kv = max(kv_lens)
        kv_indices = torch.zeros((batch, max_kv), dtype=torch.int64)
        pad_index: list[torch.Tensor] = []
        for i, (slots, p, e) in enumerate(zip(kv_slots, prefix_lens, extend_lens)):
            kv_indices[i, : p + e] = slots
            pad_index.append(torch.arange(i * max_q, i * max_q + e))
        prefix = torch.tensor(prefix_lens)
        kv_len = torch.tensor(kv_lens)
        q_pos = torch.arange(max_q)
        k_pos = torch.arange(max_kv)
        # Key j is visible to query i when it is a real key and not in the query's future.
        # Padded query rows still see key 0, so softmax never meets an all-masked row.
        mask = (k_pos[None, None, :] < kv_len[:, None, None]) & (
            k_pos[None, None, :] <= (prefix[:, None, None] + q_pos[None, :, None]))
        return cls(kv_indices=kv_indices.to(device), attn_mask=mask[:, None].to(device),
                   pad_index=torch.cat(pad_index).to(device), max_q=max_q,
                   token_index=None if token_index is None else token_index.to(device), kv_lens=kv_len.to(device))


@dataclass
class DecodeGather:
    """A decode batch's KV indices and mask, read from the device request->token table and sequence
    lengths when the forward runs (on the forward stream, as SGLang's attention metadata is)."""

    table: torch.Tensor  # [rows, max_context] the pool's device table
    seq_lens: torch.Tensor  # [rows] the pool's device sequence lengths
    rows: torch.Tensor  # [B] the batch's pool rows, on the device
    shared: int  # leading slots attended once (cascade), not gathered per request
    max_kv: int

    def apply(self, group: AttnGroup) -> None:
        group.kv_indices = self.table[self.rows, self.shared: self.max_kv]
        lens = self.seq_lens[self.rows] - self.shared
        mask = torch.arange(self.max_kv - self.shared, device=lens.device)[None, :] < lens[:, None]
        group.attn_mask = mask[:, None, None, :]
        group.kv_lens = lens


@dataclass
class ForwardBatch:
    """Everything one forward pass needs, already on the model's device."""

    input_ids: torch.Tensor  # [T] flattened new tokens of all requests
    positions: torch.Tensor  # [T]
    out_cache_loc: torch.Tensor  # [T] KV slot written for each new token
    logits_index: torch.Tensor  # [N] token rows whose logits are returned
    groups: list[AttnGroup]
    gather: DecodeGather | None = None  # decode: KV indices still to read from the device tables

    def materialize(self) -> None:
        """Read what the batch still needs from the device tables, on the current stream."""
        if self.gather is not None:
            self.gather.apply(self.groups[0])
            self.gather = None

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor this batch holds, attention groups included (for stream bookkeeping)."""
        out = [v for v in vars(self).values() if isinstance(v, torch.Tensor)]
        for group in self.groups:
            out += [v for v in vars(group).values() if isinstance(v, torch.Tensor)]
        if self.gather is not None:
            out.append(self.gather.rows)
        return out

    @property
    def prefix_slots(self) -> torch.Tensor | None:
        """The KV prefix a cascade decode attends once (None when the batch has none)."""
        return self.groups[0].prefix_slots if len(self.groups) == 1 else None

    @classmethod
    def build(cls, input_ids: list[int], prefix_lens: list[int], extend_lens: list[int],
              kv_slots: list[torch.Tensor], out_cache_loc: torch.Tensor, device: torch.device,
              all_logits: bool = False) -> "ForwardBatch":
        """An extend batch. Single-token rows (decode tokens riding in a prefill) get their own
        attention group, so they are not padded to the longest prompt's query length."""
        ends = torch.tensor(extend_lens).cumsum(0)
        starts = ends - torch.tensor(extend_lens)
        positions = torch.cat([torch.arange(p, p + e) for p, e in zip(prefix_lens, extend_lens)])
        single = [i for i, e in enumerate(extend_lens) if e == 1]
        multi = [i for i, e in enumerate(extend_lens) if e != 1]
        if single and multi:
            groups = []
            for rows in (multi, single):
                index = torch.cat([torch.arange(int(starts[i]), int(ends[i])) for i in rows])
                groups.append(AttnGroup.build([prefix_lens[i] for i in rows], [extend_lens[i] for i in rows],
                                              [kv_slots[i] for i in rows], device, index))
        else:
            groups = [AttnGroup.build(prefix_lens, extend_lens, kv_slots, device)]
        logits_index = torch.arange(int(ends[-1])) if all_logits else ends - 1
        return cls(input_ids=torch.tensor(input_ids, dtype=torch.int64, device=device),
                   positions=positions.to(device), out_cache_loc=out_cache_loc.to(device, copy=True),
                   logits_index=logits_index.to(device), groups=groups)


class Projection(nn.Linear):
    """A bias-free linear layer: the prepacked CPU kernel (`cpu_kernels.linear`) unless off or under a
    dispatch mode, which then sees the plain ``aten.linear`` (the simulator computes it prepacked)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features, bias=False)
        self.prepacked = prepacked_projections()

    def reset_parameters(self) -> None:
        """No random start: every loader fills the weight (`LlamaModel` says why)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return project(x, self.weight, self.prepacked)


def project(x: torch.Tensor, weight: torch.Tensor, prepacked: bool) -> torch.Tensor:
    if prepacked and not ops_observed():
        return linear(x, weight)
    return F.linear(x, weight)


class KVCache:
    """One K and one V buffer per layer, indexed by token slot. Slot 0 is a padding slot never allocated."""

    def __init__(self, config: ModelConfig, num_slots: int, dtype: torch.dtype, device: torch.device) -> None:
        shape = (config.num_layers, num_slots + 1, config.num_kv_heads, config.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.num_slots = num_slots


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Conversions only where the dtype differs: an fp32 model would dispatch two no-op ops per
        # norm, which the simulator's per-op hook pays for like real ones.
        x32 = x if x.dtype == torch.float32 else x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (x32 if x.dtype == torch.float32 else x32.to(x.dtype))


@dataclass(frozen=True)
class RotaryAngles:
    """The rotary tables' rows for one forward's positions, [T, 1, head_dim], gathered once and read by
    every layer for q and k (SGLang's rope kernel reads its cos/sin cache the same way)."""

    cos: torch.Tensor
    sin: torch.Tensor  # rotate-half's minus sign folded into its first half

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, heads, head_dim]. ``x * cos + rotate_half(x) * sin`` with the same roundings:
        rolling x by half a head gives rotate-half's halves without its negation, and
        ``x2 * -s`` is ``-x2 * s`` bit for bit."""
        return x * self.cos + x.roll(x.shape[-1] // 2, -1) * self.sin


class Rotary(nn.Module):
    """Rotary embeddings in the Hugging Face (rotate-half) layout, cos/sin cached per position."""

    def __init__(self, head_dim: int, base: float, max_positions: int) -> None:
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        sin = emb.sin()
        sin[:, : head_dim // 2] = -sin[:, : head_dim // 2]
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def angles(self, positions: torch.Tensor, dtype: torch.dtype) -> RotaryAngles:
        cos, sin = self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1)
        if dtype != cos.dtype:
            cos, sin = cos.to(dtype), sin.to(dtype)
        return RotaryAngles(cos, sin)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        q_size = self.num_heads * self.head_dim
        kv_size = self.num_kv_heads * self.head_dim
        self.split = (q_size, kv_size, kv_size)
        self.qkv_proj = Projection(config.hidden_size, sum(self.split))
        self.o_proj = Projection(q_size, config.hidden_size)
        self.native_decode = native_decode_attention()

    def forward(self, x: torch.Tensor, batch: ForwardBatch, kv: KVCache, angles: RotaryAngles) -> torch.Tensor:
        tokens = x.shape[0]
        q, k, v = self.qkv_proj(x).split(self.split, dim=-1)
        q = angles.apply(q.view(tokens, self.num_heads, self.head_dim))
        k = angles.apply(k.view(tokens, self.num_kv_heads, self.head_dim))
        v = v.view(tokens, self.num_kv_heads, self.head_dim)
        k_cache, v_cache = kv.k[self.layer], kv.v[self.layer]
        k_cache.index_copy_(0, batch.out_cache_loc, k)
        v_cache.index_copy_(0, batch.out_cache_loc, v)
        if len(batch.groups) == 1:
            out = self._attend(q, batch.groups[0], k_cache, v_cache)
        else:
            out = q.new_empty((tokens, self.num_heads * self.head_dim))
            for group in batch.groups:
                out[group.token_index] = self._attend(q[group.token_index], group, k_cache, v_cache)
        return self.o_proj(out)

    def _attend(self, q: torch.Tensor, group: AttnGroup, k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """q: [Tg, heads, head_dim] -> [Tg, heads * head_dim]."""
        if group.prefix_slots is not None:
            return self._cascade_decode(q, group, k_cache, v_cache)
        if (group.max_q == 1 and group.kv_lens is not None and self.native_decode
                and not ops_observed() and decode_attention.applies(q, k_cache)):
            return decode_attention.decode_attention(q, k_cache, v_cache, group.kv_indices, group.kv_lens)
        bsz, max_q = group.batch_size, group.max_q
        if max_q == 1:
            q_pad = q.unsqueeze(1)
        else:
            q_pad = q.new_zeros((bsz * max_q, self.num_heads, self.head_dim))
            q_pad[group.pad_index] = q
            q_pad = q_pad.view(bsz, max_q, self.num_heads, self.head_dim)
        # index_select is about twice as fast as advanced indexing for this gather on CPU.
        flat = group.kv_indices.reshape(-1)
        gathered = (bsz, -1, self.num_kv_heads, self.head_dim)
        keys = torch.index_select(k_cache, 0, flat).view(gathered).transpose(1, 2)  # [B, kv_heads, max_kv, hd]
        values = torch.index_select(v_cache, 0, flat).view(gathered).transpose(1, 2)
        out = F.scaled_dot_product_attention(q_pad.transpose(1, 2), keys, values,
                                             attn_mask=group.attn_mask, enable_gqa=True)
        out = out.transpose(1, 2).reshape(bsz * max_q, self.num_heads * self.head_dim)
        return out if max_q == 1 else out[group.pad_index]

    def _cascade_decode(self, q: torch.Tensor, batch: AttnGroup, k_cache: torch.Tensor,
                        v_cache: torch.Tensor) -> torch.Tensor:
        """Decode attention as two partial softmaxes merged by their log-sum-exp: one over the shared
        prefix for all queries at once (one gather, one matmul per KV head), one over each suffix."""
        bsz, kvh, hd = batch.batch_size, self.num_kv_heads, self.head_dim
        group = self.num_heads // kvh
        q = q.view(bsz, kvh, group, hd) * hd ** -0.5  # query head h reads KV head h // group
        k_pre = torch.index_select(k_cache, 0, batch.prefix_slots).permute(1, 2, 0)  # [kvh, hd, P]
        v_pre = torch.index_select(v_cache, 0, batch.prefix_slots).transpose(0, 1)  # [kvh, P, hd]
        s_pre = torch.matmul(q.transpose(0, 1).reshape(kvh, bsz * group, hd), k_pre)  # [kvh, B*g, P]
        m_pre = s_pre.amax(-1, keepdim=True)
        e_pre = torch.exp(s_pre - m_pre)
        o_pre = torch.matmul(e_pre, v_pre)  # unnormalised [kvh, B*g, hd]

        def per_request(t: torch.Tensor) -> torch.Tensor:  # [kvh, B*g, x] -> [B, kvh, g, x]
            return t.view(kvh, bsz, group, -1).transpose(0, 1)

        m_pre, l_pre, o_pre = per_request(m_pre), per_request(e_pre.sum(-1, keepdim=True)), per_request(o_pre)
        flat = batch.kv_indices.reshape(-1)
        k_suf = torch.index_select(k_cache, 0, flat).view(bsz, -1, kvh, hd).permute(0, 2, 3, 1)  # [B, kvh, hd, S]
        v_suf = torch.index_select(v_cache, 0, flat).view(bsz, -1, kvh, hd).transpose(1, 2)  # [B, kvh, S, hd]
        s_suf = torch.matmul(q, k_suf).masked_fill(~batch.attn_mask, float("-inf"))  # [B, kvh, g, S]
        m_suf = s_suf.amax(-1, keepdim=True)  # finite: each request's own new token is in its suffix
        e_suf = torch.exp(s_suf - m_suf)
        o_suf = torch.matmul(e_suf, v_suf)
        m = torch.maximum(m_pre, m_suf)
        a_pre, a_suf = torch.exp(m_pre - m), torch.exp(m_suf - m)
        out = (o_pre * a_pre + o_suf * a_suf) / (l_pre * a_pre + e_suf.sum(-1, keepdim=True) * a_suf)
        return out.reshape(bsz, self.num_heads * hd)


class MLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.intermediate = config.intermediate_size
        self.gate_up_proj = Projection(config.hidden_size, 2 * config.intermediate_size)
        self.down_proj = Projection(config.intermediate_size, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, batch: ForwardBatch, kv: KVCache, angles: RotaryAngles) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), batch, kv, angles)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        # Built without nn.Linear's and nn.Embedding's random start: every loader (GGUF, the model
        # cache, an HF directory, the seeded toy) fills each weight, and that draw was 0.6 of the
        # 1.0 CPU-second it took to build SmolLM2 from the model cache. Norms start at one.
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size,
                                         _weight=torch.empty(config.vocab_size, config.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = Rotary(config.head_dim, config.rope_theta, config.max_context)
        self.lm_head = None if config.tie_word_embeddings else Projection(config.hidden_size, config.vocab_size)
        self.prepacked_head = prepacked_projections()  # a tied LM head multiplies by the embedding table

    def pack_weights(self) -> None:
        """The CPU kernels' packed copies of every projection's weight (and of a tied LM head's
        table), made now instead of on first use (`cpu_kernels.pack_ahead`). The LM head
        multiplies one row per request, a decode batch's rows even in a prefill."""
        for layer in self.layers:
            for projection in (layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj,
                               layer.mlp.down_proj):
                if projection.prepacked:
                    pack_ahead(projection.weight)
        if self.lm_head is not None and self.lm_head.prepacked:
            pack_ahead(self.lm_head.weight, prefill_rows=False)
        elif self.lm_head is None and self.prepacked_head:
            pack_ahead(self.embed_tokens.weight, prefill_rows=False)

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, kv: KVCache, num_layers: int | None = None) -> torch.Tensor:
        """Returns fp32 logits [len(batch.logits_index), vocab]. ``num_layers``: run only the first
        layers, then the final norm and head (the self-speculative draft)."""
        batch.materialize()
        x = self.embed_tokens(batch.input_ids)
        angles = self.rotary.angles(batch.positions, x.dtype)
        for layer in self.layers if num_layers is None else self.layers[:num_layers]:
            x = layer(x, batch, kv, angles)
        x = self.norm(x[batch.logits_index])
        if self.lm_head is not None:
            logits = self.lm_head(x)
        else:
            logits = project(x, self.embed_tokens.weight, self.prepacked_head)
        return logits if logits.dtype == torch.float32 else logits.float()
