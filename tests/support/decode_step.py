"""One decode step of a loaded model on a fresh KV cache, as the engine runs it: its logits."""
from __future__ import annotations

import torch

from scheduler_core.model.llama import ForwardBatch, KVCache
from scheduler_core.model.loader import LoadedModel


def decode_logits(loaded: LoadedModel) -> torch.Tensor:
    """Two prompts prefilled (5 and 3 tokens), then one decode step of both: its logits."""
    kv = KVCache(loaded.config, 16, torch.float32, torch.device("cpu"))
    slots = [torch.arange(1, 6), torch.arange(6, 9)]
    prefill = ForwardBatch.build([3, 7, 11, 13, 17, 19, 23, 29], [0, 0], [5, 3], slots, torch.cat(slots),
                                 torch.device("cpu"))
    loaded.model(prefill, kv)
    step = [torch.cat([slots[0], torch.tensor([9])]), torch.cat([slots[1], torch.tensor([10])])]
    decode = ForwardBatch.build([31, 37], [5, 3], [1, 1], step, torch.tensor([9, 10]), torch.device("cpu"))
    return loaded.model(decode, kv)
