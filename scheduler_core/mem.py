"""Memory pools: the request→token table (which KV slot holds each position of a request) and the
token-slot KV allocator with explicit free. Slot 0 is reserved as the attention padding slot.

As in SGLang's ``req_to_token_pool``, the table and the per-row sequence lengths are device tensors:
the scheduler writes them on the schedule stream and the forward reads them on the forward stream.
The host keeps its own view for scheduling decisions; on a CPU device both are the same tensor.
"""
from __future__ import annotations

import torch


class OutOfSlotsError(RuntimeError):
    """The allocator cannot serve a request; callers evict or retract and try again."""


class ReqToTokenPool:
    """Row r, column i: the KV slot of position i of the request that holds row r."""

    def __init__(self, size: int, max_context: int, device: torch.device | None = None,
                 mirror: bool | None = None) -> None:
        """``mirror``: keep a separate host view (default: when ``device`` is not the CPU; the
        simulator asks for one, since it models a GPU whose memory the host cannot read)."""
        self.size = size
        self.max_context = max_context
        device = device or torch.device("cpu")
        self.device = device
        # Device tensors (the forward reads them): the table and each row's sequence length.
        self.table = torch.zeros((size, max_context), dtype=torch.int64, device=device)
        self.seq_lens = torch.zeros(size, dtype=torch.int64, device=device)
        # The host's view, for scheduling and freeing; the same tensor when the device is the host.
        mirror = device.type != "cpu" if mirror is None else mirror
        self.req_to_token = torch.zeros((size, max_context), dtype=torch.int64) if mirror else self.table
        self._free = list(range(size))

    @property
    def mirrored(self) -> bool:
        """True when the device table is a separate tensor the host view must be copied into."""
        return self.table is not self.req_to_token

    def write(self, row: int, start: int, slots: torch.Tensor) -> None:
        """Positions ``start..start+len(slots)`` of ``row`` hold ``slots``; the row's length becomes their end."""
        end = start + slots.numel()
        self.req_to_token[row, start:end] = slots
        if self.mirrored:
            self.table[row, start:end] = slots.to(self.device, non_blocking=True, copy=True)
        self.seq_lens[row] = end

    def write_decode(self, rows: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> None:
        """One new slot per row at ``positions`` (host tensors); each row's length becomes position + 1."""
        self.req_to_token[rows, positions] = slots
        if self.mirrored:
            rows, positions, slots = (t.to(self.device, non_blocking=True, copy=True) for t in (rows, positions, slots))
            self.table[rows, positions] = slots
        self.seq_lens[rows] = positions + 1

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
