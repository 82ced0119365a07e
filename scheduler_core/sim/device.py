"""The simulated GPU: a ``Device`` whose streams and events are virtual, behind the same facade as
CUDA and the CPU.

Tensor values are computed eagerly on the CPU, so outputs are the real outputs. While the engine
works inside ``device.stream(...)``, a ``TorchDispatchMode`` sees every aten op, attributes it to the
current virtual stream, gives it a duration from the profile (FLOPs over throughput or bytes over
bandwidth, plus the kernel launch cost) and places it on the virtual timeline: an op starts when
its stream is free and the host has issued it. Copies, event records, cross-stream waits and host
synchronisation have their own profiled costs; each outermost ``device.stream`` block is one host
step and advances the host clock by the profile's fixed host cost, so the same inputs give the same
timeline, bit for bit. Run-to-run noise (the profile's CV) scales device durations by a factor drawn
per measured run from a seed (``PARALLAX_SIM_SEED``, the job's ``PARALLAX_JOB_ID`` and
``PARALLAX_ATTEMPT``, so every job and every retry draws its own run-to-run noise);
``PARALLAX_SIM_NOISE=0`` turns it off.

Every op's reads and writes (from the op schema's alias and mutation information, by storage) go
to the race detector (``race.py``).
"""
from __future__ import annotations

import os
import random
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from scheduler_core.device import DEFAULT_STREAM, Device, Event, Stream
from scheduler_core.platform import Platform
from scheduler_core.sim.profile import Profile, load_profile
from scheduler_core.sim.race import HOST, Clock, Hazard, RaceDetector
from scheduler_core.sim.timeline import Timeline

NOISE_ENV = "PARALLAX_SIM_NOISE"
HOST_TIME_ENV = "PARALLAX_SIM_HOST_TIME"  # "fixed" (default) or "measured"
SEED_ENV = "PARALLAX_SIM_SEED"
ATTEMPT_ENV = "PARALLAX_ATTEMPT"
JOB_ENV = "PARALLAX_JOB_ID"
STACK_DEPTH = 8
# Ops that only read a value into Python (``int(t)``) or only describe a tensor: no device work.
_IGNORED = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.lift_fresh.default,
            torch.ops.aten.detach.default, torch.ops.aten.alias.default}


@dataclass(eq=False)
class SimEvent(Event):
    device: SimDevice
    stream: SimStream
    clock: Clock
    time_us: float

    def synchronize(self) -> None:
        self.device._host_wait(self.time_us, "event synchronize")
        self.device.detector.sync_event(self.clock)

    def query(self) -> bool:
        done = self.device.timeline.host_us >= self.time_us
        if done:
            self.device.detector.sync_event(self.clock)
        return done


@dataclass(eq=False)
class SimStream(Stream):
    name: str
    sid: int
    device: SimDevice = field(repr=False)

    def wait_stream(self, other: Stream) -> None:
        dev = self.device
        other = dev._own(other)
        dev._sweep()
        dev.detector.wait_stream(self.sid, other.sid)
        # wait_stream records an event on ``other``: the producing stream pays the dependency.
        dev._run(other, f"dependency for {self.name}", dev.profile.cross_stream_source_us * dev.speed)
        dev._stall(self, dev.ready[other.sid], f"wait_stream({other.name})")

    def wait_event(self, event: Event) -> None:
        dev = self.device
        if not isinstance(event, SimEvent) or event.device is not dev:
            raise TypeError(f"stream {self.name!r} of a SimDevice got a foreign event")
        dev._sweep()
        dev.detector.wait_event(self.sid, event.clock)
        # The producing stream already paid for recording the event (event_record_us).
        dev._stall(self, event.time_us, "wait_event")

    def record_event(self) -> Event:
        dev = self.device
        dev._sweep()
        end = dev._run(self, "record_event", dev.profile.event_record_us)
        return SimEvent(dev, self, dev.detector.record(self.sid), end)

    def synchronize(self) -> None:
        dev = self.device
        dev._sweep()
        dev._host_wait(dev.ready[self.sid], f"{self.name} synchronize")
        dev.detector.sync_stream(self.sid)


class _OpRecorder(TorchDispatchMode):
    def __init__(self, device: SimDevice) -> None:
        super().__init__()
        self.device = device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        start = time.perf_counter()
        out = func(*args, **kwargs)
        if not self.device._paused:
            self.device._on_op(func, args, kwargs, out)
        self.device._dispatch_s += time.perf_counter() - start
        return out


@dataclass(frozen=True)
class _OpInfo:
    name: str
    view: bool
    write_args: tuple[int, ...]
    write_kwargs: tuple[str, ...]


class SimDevice(Device):
    """Virtual streams and events on the CPU, timed by a profile, checked by the race detector."""

    def __init__(self, platform: Platform, profile: Profile | None = None, noise: bool | None = None,
                 seed: int | None = None, keep_spans: bool = True, host_time: str | None = None) -> None:
        if not platform.simulated:
            raise ValueError(f"SimDevice needs a simulated platform, not {platform.name}")
        self.platform = platform
        self.profile = profile or load_profile(platform.profile or "")
        self.torch_device = torch.device("cpu")
        self.detector = RaceDetector()
        self.timeline = Timeline(keep_spans=keep_spans)
        self.ready: dict[int, float] = {}
        self.streams: list[SimStream] = []
        self.noise = os.environ.get(NOISE_ENV, "1") != "0" if noise is None else noise
        base_seed = int(os.environ.get(SEED_ENV, "0")) if seed is None else seed
        job, attempt = (int(os.environ.get(name, "0") or 0) for name in (JOB_ENV, ATTEMPT_ENV))
        self._rng = random.Random((base_seed * 1_000_003 + job) * 1_009 + attempt)
        self.speed = 1.0
        self.runs = 0
        # "fixed": each host step costs the profile's host_step_us (deterministic). "measured": the
        # wall time the host step took outside device ops (their CPU compute and the simulator's
        # bookkeeping are excluded), so a slower scheduler shows on the timeline; not deterministic.
        self.host_time = host_time or os.environ.get(HOST_TIME_ENV, "fixed")
        if self.host_time not in ("fixed", "measured"):
            raise ValueError(f"{HOST_TIME_ENV}={self.host_time!r}: use fixed or measured")
        self._dispatch_s = 0.0
        self._step_started = (0.0, 0.0)
        self._default = self.new_stream(DEFAULT_STREAM)
        self._stack: list[SimStream] = [self._default]
        self._depth = 0
        self._mode = _OpRecorder(self)
        self._paused = False
        self._ops: dict[Any, _OpInfo] = {}
        self._refs: dict[int, StorageWeakRef] = {}
        self._device_mem: set[int] = set()  # blocks of device memory (the rest is host memory)
        self.begin_run()

    # -- facade -----------------------------------------------------------------------------------
    @property
    def shares_host_memory(self) -> bool:
        return False

    def current_stream(self) -> Stream:
        return self._stack[-1]

    def new_stream(self, name: str) -> Stream:
        s = SimStream(name, self.detector.new_stream(name), self)
        self.ready[s.sid] = 0.0
        self.streams.append(s)
        return s

    @contextmanager
    def stream(self, s: Stream) -> Iterator[Stream]:
        s = self._own(s)
        self._sweep()
        outermost = self._depth == 0
        if outermost:  # one host step: the scheduler's own work
            if self.host_time == "fixed":
                self._host_work(self.profile.host_step_us, "host step")
            self._step_started = (time.perf_counter(), self._dispatch_s)
            self._mode.__enter__()
        self._depth += 1
        self._stack.append(s)
        try:
            yield s
        finally:
            self._stack.pop()
            self._depth -= 1
            if outermost:
                self._mode.__exit__(None, None, None)
                if self.host_time == "measured":
                    wall, dispatched = self._step_started
                    host_s = (time.perf_counter() - wall) - (self._dispatch_s - dispatched)
                    self._host_work(max(host_s, 0.0) * 1e6, "host step (measured)")
            self._sweep()

    def synchronize(self) -> None:
        self._sweep()
        self._host_wait(max(self.ready.values()), "device synchronize")
        self.detector.sync_device()

    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        with self._pause():
            out = tensor.clone()
        self._key(out, HOST)
        return out

    def empty_pinned(self, size: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        with self._pause():
            out = torch.empty(tuple(size), dtype=dtype)
        self._key(out, HOST)
        return out

    def copy_(self, dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        self.mark_device(dst if src.device.type == "cpu" and not self._is_device(src) else src)
        with self._pause():
            dst.copy_(src)
        self._copy(src, dst, "memcpy")
        return dst

    def to_host(self, src: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        self.mark_device(src)
        with self._pause():
            result = out.copy_(src) if out is not None else src.to("cpu", copy=True)
        if out is None:
            self._key(result, HOST)
        self._copy(src, result, "memcpy DtoH")
        return result

    def to_host_sync(self, src: torch.Tensor) -> torch.Tensor:
        result = self.to_host(src)
        self.current_stream().synchronize()
        return result

    def host_list(self, tensor: torch.Tensor) -> list:
        self._sweep()
        key = self._key(tensor, HOST)
        if key is not None:
            self.detector.op(HOST, "host read", [key], [], _stack())
        return tensor.tolist()

    def record_stream(self, tensor: torch.Tensor, s: Stream) -> None:
        s = self._own(s)
        key = self._key(tensor, self.current_stream().sid)
        if key is not None:
            self.detector.record_stream(key, s.sid)

    def name_buffer(self, tensor: torch.Tensor, name: str) -> None:
        key = self._key(tensor, self._stack[-1].sid)
        if key is not None:
            self.detector.name(key, name)

    def now(self) -> float:
        return self.timeline.host_us * 1e-6

    def begin_run(self) -> None:
        """A measured repetition starts: draw this run's speed factor from the profile's noise."""
        self.runs += 1
        cv = self.profile.noise_cv if self.noise else 0.0
        self.speed = max(0.5, self._rng.gauss(1.0, cv)) if cv > 0 else 1.0

    # -- results ----------------------------------------------------------------------------------
    @property
    def hazards(self) -> list[Hazard]:
        self._sweep()
        return self.detector.hazards

    def busy_fraction(self) -> dict[str, float]:
        total = max(max(self.ready.values()), self.timeline.host_us) - (self.timeline.first_us or 0.0)
        return {s.name: self.timeline.busy_us.get(s.name, 0.0) / total for s in self.streams if total > 0}

    def write_trace(self, path: str) -> None:
        self.timeline.write_trace(path, f"{self.platform.name} ({self.profile.device})")

    # -- internals --------------------------------------------------------------------------------
    def _own(self, s: Stream) -> SimStream:
        if not isinstance(s, SimStream) or s.device is not self:
            raise TypeError(f"stream {s.name!r} does not belong to this SimDevice")
        return s

    @contextmanager
    def _pause(self) -> Iterator[None]:
        paused, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = paused

    def _host_work(self, us: float, name: str) -> None:
        start = self.timeline.host_us
        self.timeline.host_us = start + us
        self.timeline.add("host", name, start, start + us)

    def _host_wait(self, until_us: float, name: str) -> None:
        start = self.timeline.host_us
        end = max(start, until_us) + self.profile.host_sync_us
        self.timeline.host_us = end
        self.timeline.add("host", name, start, end)

    def _run(self, s: SimStream, name: str, duration_us: float) -> float:
        start = max(self.ready[s.sid], self.timeline.host_us)
        end = start + duration_us
        self.ready[s.sid] = end
        self.timeline.add(s.name, name, start, end)
        return end

    def _stall(self, s: SimStream, after_us: float, name: str) -> None:
        """The stream idles until ``after_us``, then spends the profile's cross-stream wait cost."""
        start = max(self.ready[s.sid], self.timeline.host_us, after_us)
        end = start + self.profile.stream_wait_us
        self.ready[s.sid] = end
        self.timeline.add(s.name, name, start, end)

    def _copy(self, src: torch.Tensor, dst: torch.Tensor, name: str) -> None:
        self._sweep()
        s = self._stack[-1]
        nbytes = src.numel() * src.element_size()
        p = self.profile
        self._run(s, name, (p.copy_latency_us + nbytes / (p.pcie_gbps * 1e3)) * self.speed)
        reads = [k for k in (self._key(src, s.sid),) if k is not None]
        writes = [k for k in (self._key(dst, s.sid),) if k is not None]
        self.detector.op(s.sid, name, reads, writes, _stack())

    def _key(self, t: torch.Tensor, actor: int) -> int | None:
        """The block of ``t``'s storage; a storage not seen before (or a dead one's address, reused)
        is a fresh block owned by ``actor``."""
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr == 0:
            return None
        ref = self._refs.get(ptr)
        if ref is None or ref.expired():
            if ref is not None:
                self.detector.free(ptr)
                self._device_mem.discard(ptr)
            self._refs[ptr] = StorageWeakRef(storage)
            self.detector.allocate(ptr, actor, f"tensor{list(t.shape)} {str(t.dtype).removeprefix('torch.')}")
        return ptr

    def _sweep(self) -> None:
        """Free the blocks other streams used whose storage has died since the last look."""
        cross = self.detector.cross
        if not cross:
            return
        for key in [k for k in cross if self._refs[k].expired()]:
            del self._refs[key]
            self._device_mem.discard(key)
            self.detector.free(key, "free (host drops the last reference)")

    def _info(self, func) -> _OpInfo:
        info = self._ops.get(func)
        if info is None:
            schema = func._schema
            writes = [(i, a.name) for i, a in enumerate(schema.arguments)
                      if a.alias_info is not None and a.alias_info.is_write]
            info = _OpInfo(name=str(func.name()).removeprefix("aten::"), view=bool(func.is_view),
                           write_args=tuple(i for i, _ in writes), write_kwargs=tuple(n for _, n in writes))
            self._ops[func] = info
        return info

    def _is_device(self, t: torch.Tensor) -> bool:
        ptr = t.untyped_storage().data_ptr()
        return ptr in self._device_mem and not self._refs[ptr].expired()

    def mark_device(self, tensor: torch.Tensor) -> None:
        """``tensor``'s memory is device memory: ops touching it are device work (timed, checked)."""
        key = self._key(tensor, self._stack[-1].sid)
        if key is not None:
            self._device_mem.add(key)

    def _on_op(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        if func in _IGNORED:
            return
        info = self._info(func)
        if info.view:
            return  # metadata only: no device work, no memory access
        inputs = [(i, t) for i, arg in enumerate(args) for t in _tensors(arg)]
        inputs += [(name, t) for name, arg in kwargs.items() for t in _tensors(arg)]
        if not any(self._is_device(t) for _, t in inputs):
            return  # host work on host memory: part of the host step, invisible to the device
        s = self._stack[-1]
        sid = s.sid
        reads: list[int] = []
        writes: list[int] = []
        nbytes = 0
        device_mem = self._device_mem
        for where, t in inputs:
            key = self._key(t, sid)
            if key is not None:
                written = where in info.write_args if isinstance(where, int) else where in info.write_kwargs
                (writes if written else reads).append(key)
                device_mem.add(key)  # host memory a kernel reads is copied to the device first
                nbytes += t.numel() * t.element_size()
        out_numel = 0
        if not info.write_args and not info.write_kwargs:
            for t in _tensors(out):
                key = self._key(t, sid)
                if key is not None:
                    writes.append(key)
                    device_mem.add(key)
                    out_numel += t.numel()
                    nbytes += t.numel() * t.element_size()
        p = self.profile
        count = flop_registry.get(func._overloadpacket)
        if count is not None:
            compute = count(*args, **kwargs, out_val=out) / (p.matmul_tflops * 1e6)
        else:
            compute = out_numel / (p.vector_tflops * 1e6)
        memory = nbytes / (p.hbm_gbps * 1e3)
        self._run(s, info.name, (p.kernel_launch_us + max(compute, memory)) * self.speed)
        self.detector.op(sid, info.name, reads, writes, _stack())


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor):
                yield v


_SKIP = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep, "contextlib.py")


_KEEP_FRAME: dict[Any, bool] = {}


def _stack() -> tuple[tuple[str, int, str], ...]:
    """The innermost Python frames outside torch and the simulator (file, line, function)."""
    frames = []
    f = sys._getframe(2)
    while f is not None and len(frames) < STACK_DEPTH:
        code = f.f_code
        keep = _KEEP_FRAME.get(code)
        if keep is None:
            name = code.co_filename
            keep = _KEEP_FRAME[code] = not name.startswith(_SKIP[:2]) and not name.endswith(_SKIP[2])
        if keep:
            frames.append((code.co_filename, f.f_lineno, code.co_name))
        f = f.f_back
    return tuple(frames)
