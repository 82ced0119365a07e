"""One stream/event facade, so the scheduler never branches on the platform except through policy.

- ``CudaDevice`` wraps ``torch.cuda`` and serves CUDA and ROCm (``torch.cuda`` is HIP there).
- ``CpuDevice`` has no-op streams and events: CPU work is synchronous, so every ordering request is
  already satisfied and every event is complete when recorded. It still tracks the current stream,
  so code (and ``RecordingDevice``) sees which stream a copy was issued on. Its clock is the wall
  clock, or with ``PARALLAX_HOST_CLOCK=process`` the process's CPU time (a runner on a shared
  machine: time its job was not running, preempted by other work, is not counted).
- ``RecordingDevice`` wraps another device and appends a ``Call`` for every action (stream
  creation, entering/leaving a stream, ``wait_stream``, events, copies with the stream they ran on,
  pinned allocations) to ``calls``, for tests of the sync policy.

``scheduler_core.devices.make_device(platform)`` builds the right one (the simulator's included).
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch

from scheduler_core.platform import Platform, PlatformError

DEFAULT_STREAM = "default"
HOST_CLOCK_ENV = "PARALLAX_HOST_CLOCK"
HOST_CLOCKS = {"wall": time.perf_counter, "process": time.process_time}


def host_clock(name: str | None = None) -> str:
    """The CPU device's clock: ``name``, else $PARALLAX_HOST_CLOCK, else ``wall``; refused by name."""
    chosen = name if name is not None else (os.environ.get(HOST_CLOCK_ENV, "").strip() or "wall")
    if chosen not in HOST_CLOCKS:
        raise PlatformError(f"{HOST_CLOCK_ENV}={chosen!r} is not a host clock; expected one of "
                            f"{', '.join(HOST_CLOCKS)}")
    return chosen


class Event(ABC):
    """A point in a stream's work; complete once the stream has run everything before it."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block the host until the event is complete."""

    @abstractmethod
    def query(self) -> bool:
        """True when the event is complete (never blocks)."""


class Stream(ABC):
    """An ordered queue of device work, named for records and error messages."""

    name: str

    @abstractmethod
    def wait_stream(self, other: Stream) -> None:
        """Work queued on this stream from now on starts after all work queued on ``other`` so far."""

    @abstractmethod
    def wait_event(self, event: Event) -> None:
        """Work queued on this stream from now on starts after ``event``."""

    @abstractmethod
    def record_event(self) -> Event:
        """An event marking all work queued on this stream so far."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block the host until all work queued on this stream is done."""


class Device(ABC):
    """Streams, events, copies and pinned host memory of one compute device."""

    platform: Platform
    torch_device: torch.device

    @abstractmethod
    def current_stream(self) -> Stream:
        """The stream new work goes to in this thread."""

    @abstractmethod
    def new_stream(self, name: str) -> Stream:
        """A fresh stream; ``name`` is for records and messages."""

    @abstractmethod
    def stream(self, s: Stream) -> AbstractContextManager[Stream]:
        """Context manager: make ``s`` the current stream inside the block."""

    @abstractmethod
    def synchronize(self) -> None:
        """Block the host until all work on the device is done."""

    @abstractmethod
    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        """A page-locked copy of a host tensor (the tensor itself where pinning does not exist)."""

    @abstractmethod
    def empty_pinned(self, size: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised page-locked host tensor (plain host memory where pinning does not exist)."""

    @abstractmethod
    def copy_(self, dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        """``dst.copy_(src)`` queued on the current stream without blocking the host; returns dst."""

    @abstractmethod
    def to_host(self, src: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """A host copy of ``src`` queued on the current stream (into ``out`` if given).

        Non-blocking: read it only after an event recorded after the copy is complete.
        """

    @abstractmethod
    def record_stream(self, tensor: torch.Tensor, s: Stream) -> None:
        """Tell the allocator ``tensor`` is in use on ``s``, so its memory is not reused early."""

    def to_host_sync(self, src: torch.Tensor) -> torch.Tensor:
        """A host copy of ``src`` that blocks the host until the current stream has produced it
        (``tensor.cpu()`` on a GPU)."""
        return src.to("cpu", copy=True)

    def host_list(self, tensor: torch.Tensor) -> list:
        """The host reads a host tensor (e.g. a finished device->host copy) as a Python list."""
        return tensor.tolist()

    def name_buffer(self, tensor: torch.Tensor, name: str) -> None:
        """Give ``tensor``'s memory a name for diagnostics (the simulator's hazard reports)."""

    def declare_reads_done(self, event: Event, tensors: Sequence[torch.Tensor]) -> None:
        """``event``, just recorded on the current stream, claims that stream's last read of ``tensors``
        for this batch is behind it (a read-done event others wait on). The simulator checks the claim:
        a later read by that stream, before it next waits on another stream, is a hazard."""

    @property
    def shares_host_memory(self) -> bool:
        """True when device tensors are host memory (the CPU): no host mirror of device tables needed."""
        return self.torch_device.type == "cpu"

    def mark_device(self, tensor: torch.Tensor) -> None:
        """Declare ``tensor``'s memory device memory (matters where device tensors live on the host,
        as in the simulator)."""

    def now(self) -> float:
        """Seconds on this device's clock: the wall clock, or the simulator's virtual host time."""
        return time.perf_counter()

    def begin_run(self) -> None:
        """A measured repetition starts (the simulator draws its run-to-run noise here)."""


# --------------------------------------------------------------------------------------- CUDA/HIP

@dataclass(frozen=True)
class CudaEvent(Event):
    raw: torch.cuda.Event

    def synchronize(self) -> None:
        self.raw.synchronize()

    def query(self) -> bool:
        return bool(self.raw.query())


@dataclass(frozen=True)
class CudaStream(Stream):
    name: str
    raw: torch.cuda.Stream = field(compare=True)

    def wait_stream(self, other: Stream) -> None:
        self.raw.wait_stream(_raw_cuda(other))

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, CudaEvent):
            raise TypeError(f"stream {self.name!r} cannot wait on a {type(event).__name__}")
        self.raw.wait_event(event.raw)

    def record_event(self) -> Event:
        raw = torch.cuda.Event()
        raw.record(self.raw)
        return CudaEvent(raw)

    def synchronize(self) -> None:
        self.raw.synchronize()


def _raw_cuda(s: Stream) -> torch.cuda.Stream:
    if not isinstance(s, CudaStream):
        raise TypeError(f"a CUDA stream cannot wait on the {type(s).__name__} {s.name!r}")
    return s.raw


class CudaDevice(Device):
    """``torch.cuda`` streams and events on one GPU (NVIDIA, or AMD through HIP)."""

    def __init__(self, platform: Platform | None = None, index: int = 0) -> None:
        if not torch.cuda.is_available():
            raise PlatformError("CudaDevice needs a visible GPU (torch.cuda.is_available() is False)")
        self.platform = platform or Platform("rocm" if torch.version.hip else "cuda")
        self.torch_device = torch.device("cuda", index)
        # Names of the streams this device made, by their handle; the default stream's handle is 0.
        self._names: dict[int, str] = {0: DEFAULT_STREAM}

    def current_stream(self) -> Stream:
        raw = torch.cuda.current_stream(self.torch_device)
        return CudaStream(self._names.get(raw.cuda_stream, f"external-{raw.cuda_stream:#x}"), raw)

    def new_stream(self, name: str) -> Stream:
        raw = torch.cuda.Stream(self.torch_device)
        self._names[raw.cuda_stream] = name
        return CudaStream(name, raw)

    @contextmanager
    def stream(self, s: Stream) -> Iterator[Stream]:
        with torch.cuda.stream(_raw_cuda(s)):
            yield s

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.torch_device)

    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.pin_memory()

    def empty_pinned(self, size: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(tuple(size), dtype=dtype, pin_memory=True)

    def copy_(self, dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return dst.copy_(src, non_blocking=True)

    def to_host(self, src: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is not None:
            return out.copy_(src, non_blocking=True)
        # For a device tensor, torch allocates the host result pinned, so this is truly async.
        return src.to("cpu", non_blocking=True, copy=True)

    def record_stream(self, tensor: torch.Tensor, s: Stream) -> None:
        if tensor.device.type == "cuda":
            tensor.record_stream(_raw_cuda(s))


# -------------------------------------------------------------------------------------------- CPU

@dataclass(frozen=True)
class CpuEvent(Event):
    """Always complete: the work before it ran synchronously when it was issued."""

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


@dataclass(eq=False)
class CpuStream(Stream):
    name: str

    def wait_stream(self, other: Stream) -> None:
        pass

    def wait_event(self, event: Event) -> None:
        pass

    def record_event(self) -> Event:
        return CpuEvent()

    def synchronize(self) -> None:
        pass


class CpuDevice(Device):
    """The host as a device: synchronous work, so streams only name where work was issued."""

    def __init__(self, platform: Platform | None = None, clock: str | None = None) -> None:
        self.platform = platform or Platform("cpu")
        self.torch_device = torch.device("cpu")
        self.clock = host_clock(clock)
        self._now = HOST_CLOCKS[self.clock]
        self._default = CpuStream(DEFAULT_STREAM)
        self._local = threading.local()

    def _stack(self) -> list[Stream]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = [self._default]
        return stack

    def current_stream(self) -> Stream:
        return self._stack()[-1]

    def new_stream(self, name: str) -> Stream:
        return CpuStream(name)

    @contextmanager
    def stream(self, s: Stream) -> Iterator[Stream]:
        stack = self._stack()
        stack.append(s)
        try:
            yield s
        finally:
            stack.pop()

    def synchronize(self) -> None:
        pass

    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def empty_pinned(self, size: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(tuple(size), dtype=dtype)

    def copy_(self, dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return dst.copy_(src)

    def to_host(self, src: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is not None:
            return out.copy_(src)
        # Always a copy, as on a GPU: the caller may overwrite src while holding the result.
        return src.to("cpu", copy=True)

    def record_stream(self, tensor: torch.Tensor, s: Stream) -> None:
        pass

    def now(self) -> float:
        """The wall clock, or the process's CPU time (``clock == "process"``)."""
        return self._now()


# -------------------------------------------------------------------------------------- recording

@dataclass(frozen=True)
class Call:
    """One recorded device action. ``stream`` is the stream acting (or current, for copies)."""

    op: str  # new_stream, enter_stream, exit_stream, wait_stream, wait_event, record_event,
    #          stream_synchronize, event_synchronize, event_query, synchronize, copy, to_host,
    #          pin, empty_pinned, record_stream, to_host_sync, reads_done
    stream: str | None = None
    other: str | None = None  # wait_stream: the stream waited on
    event: int | None = None  # record_event / wait_event / event_*: the event's number
    detail: str | None = None  # copies: "cuda->cpu"; allocations: shape and dtype; query: result


@dataclass(frozen=True, eq=False)
class RecordedEvent(Event):
    number: int
    inner: Event
    device: RecordingDevice

    def synchronize(self) -> None:
        self.device.calls.append(Call("event_synchronize", event=self.number))
        self.inner.synchronize()

    def query(self) -> bool:
        done = self.inner.query()
        self.device.calls.append(Call("event_query", event=self.number, detail=str(done)))
        return done


@dataclass(frozen=True)
class RecordedStream(Stream):
    inner: Stream
    device: RecordingDevice = field(compare=False)

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    def wait_stream(self, other: Stream) -> None:
        other = self.device.unwrap_stream(other)
        self.device.calls.append(Call("wait_stream", stream=self.name, other=other.name))
        self.inner.wait_stream(other)

    def wait_event(self, event: Event) -> None:
        if not isinstance(event, RecordedEvent):
            raise TypeError(f"stream {self.name!r} of a RecordingDevice got a foreign event")
        self.device.calls.append(Call("wait_event", stream=self.name, event=event.number))
        self.inner.wait_event(event.inner)

    def record_event(self) -> Event:
        number = next(self.device._numbers)
        self.device.calls.append(Call("record_event", stream=self.name, event=number))
        return RecordedEvent(number, self.inner.record_event(), self.device)

    def synchronize(self) -> None:
        self.device.calls.append(Call("stream_synchronize", stream=self.name))
        self.inner.synchronize()


class RecordingDevice(Device):
    """Forwards everything to ``inner`` and appends a ``Call`` per action to ``calls``.

    Lookups (``current_stream``) are not recorded; everything that orders, copies or allocates is.
    """

    def __init__(self, inner: Device) -> None:
        self.inner = inner
        self.platform = inner.platform
        self.torch_device = inner.torch_device
        self.calls: list[Call] = []
        self._numbers = itertools.count(1)

    def unwrap_stream(self, s: Stream) -> Stream:
        if not isinstance(s, RecordedStream) or s.device is not self:
            raise TypeError(f"stream {s.name!r} does not belong to this RecordingDevice")
        return s.inner

    def ops(self) -> list[str]:
        return [c.op for c in self.calls]

    def calls_of(self, *ops: str) -> list[Call]:
        return [c for c in self.calls if c.op in ops]

    def clear(self) -> None:
        self.calls.clear()

    def current_stream(self) -> Stream:
        return RecordedStream(self.inner.current_stream(), self)

    def new_stream(self, name: str) -> Stream:
        self.calls.append(Call("new_stream", stream=name))
        return RecordedStream(self.inner.new_stream(name), self)

    @contextmanager
    def stream(self, s: Stream) -> Iterator[Stream]:
        inner = self.unwrap_stream(s)
        with self.inner.stream(inner):
            self.calls.append(Call("enter_stream", stream=s.name))
            try:
                yield s
            finally:
                self.calls.append(Call("exit_stream", stream=s.name))

    def synchronize(self) -> None:
        self.calls.append(Call("synchronize"))
        self.inner.synchronize()

    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        self.calls.append(Call("pin", detail=_describe(tensor.shape, tensor.dtype)))
        return self.inner.pin(tensor)

    def empty_pinned(self, size: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        self.calls.append(Call("empty_pinned", detail=_describe(size, dtype)))
        return self.inner.empty_pinned(size, dtype)

    def copy_(self, dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        self.calls.append(Call("copy", stream=self.inner.current_stream().name,
                               detail=f"{src.device.type}->{dst.device.type}"))
        return self.inner.copy_(dst, src)

    def to_host(self, src: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        self.calls.append(Call("to_host", stream=self.inner.current_stream().name,
                               detail=f"{src.device.type}->cpu"))
        return self.inner.to_host(src, out)

    def record_stream(self, tensor: torch.Tensor, s: Stream) -> None:
        inner = self.unwrap_stream(s)
        self.calls.append(Call("record_stream", stream=s.name))
        self.inner.record_stream(tensor, inner)

    def to_host_sync(self, src: torch.Tensor) -> torch.Tensor:
        self.calls.append(Call("to_host_sync", stream=self.inner.current_stream().name,
                               detail=f"{src.device.type}->cpu"))
        return self.inner.to_host_sync(src)

    def host_list(self, tensor: torch.Tensor) -> list:
        return self.inner.host_list(tensor)

    def name_buffer(self, tensor: torch.Tensor, name: str) -> None:
        self.inner.name_buffer(tensor, name)

    def declare_reads_done(self, event: Event, tensors: Sequence[torch.Tensor]) -> None:
        if not isinstance(event, RecordedEvent):
            raise TypeError("declare_reads_done got an event this RecordingDevice did not record")
        self.calls.append(Call("reads_done", stream=self.inner.current_stream().name, event=event.number,
                               detail=str(len(tensors))))
        self.inner.declare_reads_done(event.inner, tensors)

    @property
    def shares_host_memory(self) -> bool:
        return self.inner.shares_host_memory

    def mark_device(self, tensor: torch.Tensor) -> None:
        self.inner.mark_device(tensor)

    def now(self) -> float:
        return self.inner.now()

    def begin_run(self) -> None:
        self.inner.begin_run()


def _describe(size: Sequence[int], dtype: torch.dtype) -> str:
    return f"{list(size)} {str(dtype).removeprefix('torch.')}"
