"""A dispatch mode that records the name of every aten op it sees (and runs it)."""
from __future__ import annotations

from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode


class OpNames(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None) -> Any:  # type: ignore[no-untyped-def]
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))
