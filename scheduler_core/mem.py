"""Memory pools: the request→token table (which KV slot holds each position of a request) and the
token-slot KV allocator with explicit free. Slot 0 is reserved as the attention padding slot."""
from __future__ import annotations

import torch


class OutOfSlotsError(RuntimeError):
    """The allocator cannot serve a request; callers evict or retract and try again."""


class ReqToTokenPool:
    """Row r, column i: the KV slot of position i of the request that holds row r."""

    def __init__(self, size: int, max_context: int) -> None:
        self.size = size
        self.max_context = max_context
        self.req_to_token = torch.zeros((size, max_context), dtype=torch.int64)
        self._free = list(range(size))

    def available(self) -> int:
        return len(self._free)

    def alloc(self) -> int:
        if not self._free:
            raise OutOfSlotsError("no free request rows")
        return self._free.pop()

    def free(self, row: int) -> None:
        self._free.append(row)


class KVAllocator:
    """Hands out token slots 1..size of the KV cache; slots are freed explicitly."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free = torch.arange(1, size + 1, dtype=torch.int64)

    def available(self) -> int:
        return int(self._free.numel())

    def alloc(self, n: int) -> torch.Tensor:
        if n > self._free.numel():
            raise OutOfSlotsError(f"asked for {n} KV slots, {self._free.numel()} free")
        out, self._free = self._free[:n], self._free[n:]
        return out

    def free(self, slots: torch.Tensor) -> None:
        if slots.numel():
            self._free = torch.cat((self._free, slots.to(torch.int64)))
