"""The simulated GPU: a ``Device`` whose streams and events are virtual, behind the same facade as
CUDA and the CPU.

Tensor values are computed eagerly on the CPU with the plain run's kernels (the prepacked linear of
``scheduler_core.cpu_kernels`` included), so outputs are the real outputs. While the engine works
inside ``device.stream(...)``, a hook sees every aten op (the C++ core of ``native_core.cpp`` where it
builds, else the ``TorchDispatchMode`` below, which is its reference), attributes it to the
current virtual stream, gives it a duration from the profile (FLOPs over throughput or bytes over
bandwidth, plus the kernel launch cost) and places it on the virtual timeline: an op starts when its
stream is free and the host has issued it. Copies, event records, cross-stream waits and host
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

import inspect
import os
import random
import sys
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Iterator, NamedTuple, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from scheduler_core.cpu_kernels import (
    PREPACK_MIN_ELEMENTS,
    linear,
    native_decode_attention,
    prepacked_projections,
    set_ops_observed,
)
from scheduler_core.decode_attention import gathered_decode_attention, kernel_addresses
from scheduler_core.device import DEFAULT_STREAM, Device, Event, Stream
from scheduler_core.platform import Platform, PlatformError
from scheduler_core.sim import native
from scheduler_core.sim.profile import Profile, load_profile
from scheduler_core.sim.race import HOST, Clock, Hazard, RaceDetector, format_stack
from scheduler_core.sim.timeline import NativeTimeline, Timeline

NOISE_ENV = "PARALLAX_SIM_NOISE"
HOST_TIME_ENV = "PARALLAX_SIM_HOST_TIME"  # "fixed" (default) or "measured"
SEED_ENV = "PARALLAX_SIM_SEED"
ATTEMPT_ENV = "PARALLAX_ATTEMPT"
JOB_ENV = "PARALLAX_JOB_ID"
STACK_DEPTH = 8
# torch's storage weak references as plain integers (what StorageWeakRef wraps, without a Python
# object and a bound method per block, which the garbage collector would have to walk).
_expired = torch.UntypedStorage._expired
_free_weak_ref = torch.UntypedStorage._free_weak_ref
# Computed with the plain CPU run's prepacked kernel (scheduler_core.cpu_kernels), timed as itself.
_LINEAR = torch.ops.aten.linear.default
# A decode batch's attention: computed with the plain run's decode-attention kernel, timed as itself.
_SDPA = torch.ops.aten.scaled_dot_product_attention.default
_INDEX_SELECT = torch.ops.aten.index_select.default  # the C++ core defers a decode batch's K/V gathers
_GQA = {"enable_gqa": True}  # the model's call; the mask arrives positionally
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
    # Weakly: the device holds its streams, and a cycle would keep a finished run's device (its
    # detector, timeline and core) alive until a full garbage collection, which ``run_reference``
    # defers (``older_objects_frozen``): the next run then paid for fresh memory.
    device_ref: weakref.ReferenceType[SimDevice] = field(repr=False)

    @property
    def device(self) -> SimDevice:
        device = self.device_ref()
        if device is None:
            raise ReferenceError(f"stream {self.name!r}: its SimDevice is gone")
        return device

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
        self.device = weakref.proxy(device)  # the device holds its mode (``SimStream.device_ref``)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode wraps the hook in a torch._dynamo.disable by default; the simulator never
        # runs under torch.compile, and the wrapper costs more than many of the ops it sees.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        dev = self.device
        start = time.perf_counter() if dev._measure_host else 0.0
        out = None
        if func is _LINEAR and dev._prepacked_linear and not kwargs and len(args) == 2:
            out = linear(*args)  # the plain CPU run's kernel: its values, its speed
        elif func is _SDPA and dev._native_attention and len(args) == 4 and kwargs == _GQA:
            out = gathered_decode_attention(*args)  # (q, keys, values, mask); None: not a decode batch
        if out is None:
            # func._op is what OpOverload.__call__ calls: one Python frame less per op.
            out = func._op(*args, **kwargs) if kwargs else func._op(*args)
        if not dev._paused:
            dev._on_op(func, args, kwargs, out)
        if dev._measure_host:
            dev._dispatch_s += time.perf_counter() - start
        return out


@dataclass(frozen=True)
class _OpInfo:
    name: str
    skip: bool  # no device work: a view (metadata only) or one of _IGNORED
    write_args: frozenset[int]
    write_kwargs: frozenset[str]
    mutates: bool  # some argument is written (else the outputs are what the op writes)
    flops: Any  # torch.utils.flop_counter's formula for the op, or None


class _Label(NamedTuple):  # a tuple, as race.Access
    """A fresh block's name, formatted only when a report names it."""

    shape: tuple[int, ...]
    dtype: torch.dtype

    def __str__(self) -> str:
        return f"tensor{list(self.shape)} {str(self.dtype).removeprefix('torch.')}"


# ``_Label((shape, dtype))`` without the NamedTuple's Python ``__new__`` (one per fresh output).
_new_label = partial(tuple.__new__, _Label)


class SimDevice(Device):
    """Virtual streams and events on the CPU, timed by a profile, checked by the race detector."""

    def __init__(self, platform: Platform, profile: Profile | None = None, noise: bool | None = None,
                 seed: int | None = None, keep_spans: bool = True, host_time: str | None = None) -> None:
        if not platform.simulated:
            raise ValueError(f"SimDevice needs a simulated platform, not {platform.name}")
        self.platform = platform
        self.profile = profile or load_profile(platform.profile or "")
        self.torch_device = torch.device("cpu")
        # The per-op work runs in the C++ core where it builds (sim/native.py), else in Python here.
        core = native.core() if native.wanted() else None
        if core is not None:
            self.detector: Any = core.Detector(format_stack=_format_stack, hazard=Hazard, stack_factory=_stack_of,
                                               label=_label_of)
            self.timeline: Any = NativeTimeline(core.Spans(keep_spans))
        else:
            self.detector = RaceDetector(format_stack=_format_stack)
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
            raise PlatformError(f"{HOST_TIME_ENV}={self.host_time!r}: use fixed or measured")
        self._measure_host = self.host_time == "measured"
        p = self.profile  # the hot path's constants, computed as the formulas in the docs write them
        self._matmul_rate, self._vector_rate, self._hbm_rate = p.matmul_tflops * 1e6, p.vector_tflops * 1e6, p.hbm_gbps * 1e3
        self._launch_us = p.kernel_launch_us
        self._dispatch_s = 0.0
        self._step_started = (0.0, 0.0)
        self._prepacked_linear = prepacked_projections()
        self._native_attention = native_decode_attention()
        self._core: Any = None
        if core is not None:
            self._core = core.Recorder(self.detector, self.timeline.spans_store, self.ready, _native_op_facts, linear,
                                       _native_flops, self._matmul_rate, self._vector_rate, self._hbm_rate,
                                       self._launch_us, self._prepacked_linear, self._measure_host)
            self._core.prepack_min_elements = PREPACK_MIN_ELEMENTS
            addresses = kernel_addresses() if self._native_attention else None
            if addresses is not None:
                self._core.use_attention_kernel(*addresses)
            self._key = self._core.key  # type: ignore[method-assign]
            self._is_device = self._core.is_device  # type: ignore[method-assign]
            self._sweep = self._core.sweep  # type: ignore[method-assign]
        self._default = self.new_stream(DEFAULT_STREAM)
        self._stack: list[SimStream] = [self._default]
        self._depth = 0
        self._entry: Any = None  # the frame that entered the current host step (``stream``)
        self._observed_before = False
        self._outer: Sequence[tuple[Any, int]] = _NO_FRAMES  # the stack above it
        self._mode = _OpRecorder(self)
        if self._core is not None:
            self._core.set_stream(self._default.sid, self._default.name)
        self._paused = False
        self._ops: dict[int, _OpInfo] = {}  # by id() of the OpOverload
        self._flop_cache: dict[tuple, float] = {}
        self._refs: dict[int, int] = {}  # data pointer -> weak reference to the storage there
        weakref.finalize(self, _release, self._refs)
        self._device_mem: set[int] = set()  # blocks of device memory (the rest is host memory)
        self.begin_run()

    # -- facade -----------------------------------------------------------------------------------
    @property
    def shares_host_memory(self) -> bool:
        return False

    def current_stream(self) -> Stream:
        return self._stack[-1]

    def new_stream(self, name: str) -> Stream:
        s = SimStream(name, self.detector.new_stream(name), weakref.ref(self))
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
            self._step_started = (time.perf_counter(), self._dispatched_s())
            # The frame that entered the step (past contextlib's) and the stack above it, walked once.
            self._entry = _step_entry(sys._getframe(2))
            self._outer = _stack_from(self._entry.f_back) if self._entry is not None else _NO_FRAMES
            if self._core is not None:
                self._core.enter(self._entry, self._outer)
                self._observed_before = set_ops_observed(True)
            else:
                self._mode.__enter__()
        self._depth += 1
        self._stack.append(s)
        if self._core is not None:
            self._core.set_stream(s.sid, s.name)
        try:
            yield s
        finally:
            self._stack.pop()
            self._depth -= 1
            if self._core is not None:
                self._core.set_stream(self._stack[-1].sid, self._stack[-1].name)
            if outermost:
                if self._core is not None:
                    self._core.exit()
                    set_ops_observed(self._observed_before)
                else:
                    self._mode.__exit__(None, None, None)
                self._entry, self._outer = None, _NO_FRAMES  # the frame is not kept past its step
                if self.host_time == "measured":
                    wall, dispatched = self._step_started
                    host_s = (time.perf_counter() - wall) - (self._dispatched_s() - dispatched)
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
            self.detector.op(HOST, "host read", [key], [], _stack(0, self._entry, self._outer))
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

    def declare_reads_done(self, event: Event, tensors: Sequence[torch.Tensor]) -> None:
        if not isinstance(event, SimEvent) or event.device is not self:
            raise TypeError("declare_reads_done got a foreign event")
        keys = [k for k in (self._key(t, event.stream.sid) for t in tensors) if k is not None]
        self.detector.reads_done(event.stream.sid, event.clock, keys, _stack(0, self._entry, self._outer))

    def now(self) -> float:
        return self.timeline.host_us * 1e-6

    def begin_run(self) -> None:
        """A measured repetition starts: draw this run's speed factor from the profile's noise."""
        self.runs += 1
        cv = self.profile.noise_cv if self.noise else 0.0
        self.speed = max(0.5, self._rng.gauss(1.0, cv)) if cv > 0 else 1.0
        if self._core is not None:
            self._core.speed = self.speed

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
        if self._core is not None:
            self._core.paused = True
        try:
            yield
        finally:
            self._paused = paused
            if self._core is not None:
                self._core.paused = paused

    def _dispatched_s(self) -> float:
        """Seconds spent inside device ops so far (``host_time="measured"`` leaves them out)."""
        return self._core.dispatch_s if self._core is not None else self._dispatch_s

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
        self.detector.op(s.sid, name, reads, writes, _stack(0, self._entry, self._outer))

    def _key(self, t: torch.Tensor, actor: int) -> int | None:
        """The block of ``t``'s storage; a storage not seen before (or a dead one's address, reused)
        is a fresh block owned by ``actor``."""
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr == 0:
            return None
        ref = self._refs.get(ptr)
        if ref is None or _expired(ref):
            self._fresh(ptr, storage, t, actor, ref)
        return ptr

    def _fresh(self, ptr: int, storage: Any, t: torch.Tensor, actor: int, dead: int | None) -> None:
        """A new block at ``ptr``; ``dead`` is the weak reference to the storage that was there."""
        if dead is not None:
            self._drop(ptr, dead)
        self._refs[ptr] = storage._weak_ref()
        self.detector.allocate(ptr, actor, _Label(t.shape, t.dtype))

    def _drop(self, ptr: int, dead: int) -> None:
        """The storage at ``ptr`` has died (its address is being reused): free its block."""
        _free_weak_ref(dead)
        self.detector.free(ptr)
        self._device_mem.discard(ptr)

    def _sweep(self) -> None:
        """Free the blocks other streams used whose storage has died since the last look."""
        cross = self.detector.cross
        if not cross:
            return
        refs = self._refs
        for key in [k for k in cross if _expired(refs[k])]:
            _free_weak_ref(refs.pop(key))
            self._device_mem.discard(key)
            self.detector.free(key, "free (host drops the last reference)")

    def _info(self, func) -> _OpInfo:
        info = self._ops.get(id(func))  # OpOverload hashes in Python; its id is as good a key (ops live forever)
        if info is None:
            info = self._ops[id(func)] = _op_info(func)
        return info

    def _is_device(self, t: torch.Tensor) -> bool:
        ptr = t.untyped_storage().data_ptr()
        return ptr in self._device_mem and not _expired(self._refs[ptr])

    def mark_device(self, tensor: torch.Tensor) -> None:
        """``tensor``'s memory is device memory: ops touching it are device work (timed, checked)."""
        if self._core is not None:
            self._core.mark(tensor, self._stack[-1].sid)
            return
        key = self._key(tensor, self._stack[-1].sid)
        if key is not None:
            self._device_mem.add(key)

    def _on_op(self, func, args: tuple, kwargs: dict | None, out: Any) -> None:
        # The hot path: it runs for every aten op inside a host step, so it is written flat (``_key``,
        # ``_is_device`` and ``_run`` inlined). Host work on host memory leaves after one storage
        # lookup per tensor argument; a device op costs one pass over its tensors.
        info = self._ops.get(id(func)) or self._info(func)
        if info.skip:
            return  # metadata only, or no device work
        device_mem = self._device_mem
        refs = self._refs
        for arg in args:
            if isinstance(arg, torch.Tensor):
                ptr = arg.untyped_storage().data_ptr()
                if ptr in device_mem and not _expired(refs[ptr]):
                    break
            elif isinstance(arg, (list, tuple)) and self._any_on_device(arg):
                break
        else:
            if not kwargs or not self._any_on_device(kwargs.values()):
                return  # host work on host memory: part of the host step, invisible to the device
        s = self._stack[-1]
        sid = s.sid
        reads: list[int] = []
        writes: list[int] = []
        nbytes = 0
        write_args = info.write_args
        for i, arg in enumerate(args):
            if isinstance(arg, torch.Tensor):
                tensors: Any = (arg,)
            elif isinstance(arg, (list, tuple)):
                tensors = _tensor_list(arg)
            else:
                continue  # a scalar, a dtype, ...: no memory
            for t in tensors:
                storage = t.untyped_storage()
                ptr = storage.data_ptr()
                if ptr == 0:
                    continue
                ref = refs.get(ptr)
                if ref is None or _expired(ref):
                    self._fresh(ptr, storage, t, sid, ref)
                (writes if i in write_args else reads).append(ptr)
                device_mem.add(ptr)  # host memory a kernel reads is copied to the device first
                nbytes += t.nbytes
        if kwargs:
            for name, arg in kwargs.items():
                for t in _tensors(arg):
                    key = self._key(t, sid)
                    if key is not None:
                        (writes if name in info.write_kwargs else reads).append(key)
                        device_mem.add(key)
                        nbytes += t.nbytes
        out_numel = 0
        cross, blocks = self.detector.cross, self.detector.blocks
        fresh: list[tuple[int, _Label]] = []  # outputs in new memory: written first by this op
        if not info.mutates:
            for t in ((out,) if isinstance(out, torch.Tensor) else _tensors(out)):
                storage = t.untyped_storage()
                ptr = storage.data_ptr()
                if ptr == 0:
                    continue
                ref = refs.get(ptr)
                if ref is None or _expired(ref):
                    if ref is not None:  # a dead storage's address: its block goes (``_drop``)
                        _free_weak_ref(ref)
                        if ptr in cross:
                            self.detector.free(ptr)
                        else:  # only its owner used it: nothing to check (``RaceDetector.free``)
                            blocks.pop(ptr, None)
                    refs[ptr] = storage._weak_ref()
                    fresh.append((ptr, _new_label((t.shape, t.dtype))))
                else:
                    writes.append(ptr)
                device_mem.add(ptr)
                out_numel += t.numel()
                nbytes += t.nbytes
        if info.flops is not None:
            compute = self._flops(func, info, args, kwargs, out) / self._matmul_rate
        else:
            compute = out_numel / self._vector_rate
        memory = nbytes / self._hbm_rate
        ready = self.ready
        timeline = self.timeline
        start = max(ready[sid], timeline.host_us)
        end = start + (self._launch_us + max(compute, memory)) * self.speed
        ready[sid] = end
        timeline.add(s.name, info.name, start, end)
        self.detector.op(sid, info.name, reads, writes, _stack(2, self._entry, self._outer), fresh)

    def _any_on_device(self, values: Any) -> bool:
        refs = self._refs
        for t in values:
            if isinstance(t, torch.Tensor):
                tensors: Any = (t,)
            elif isinstance(t, (list, tuple)):
                tensors = _tensor_list(t)
            else:
                continue
            for v in tensors:
                ptr = v.untyped_storage().data_ptr()
                if ptr in self._device_mem and not _expired(refs[ptr]):
                    return True
        return False

    def _flops(self, func, info: _OpInfo, args: tuple, kwargs: dict | None, out: Any) -> float:
        """The op's FLOP count from torch's formula, cached per op and argument shapes."""
        shape_key = (func, _shape_key(args), _shape_key(out))
        flops = self._flop_cache.get(shape_key) if not kwargs else None
        if flops is None:
            flops = info.flops(*args, **(kwargs or {}), out_val=out)
            if not kwargs:
                self._flop_cache[shape_key] = flops
        return flops


def _linear_flops(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
                  out_val: Any = None) -> int:
    """2 x rows x in x out, as torch counts addmm. torch's FLOP table has no entry for aten.linear
    (elsewhere it decomposes into addmm before a FLOP counter sees it); under inference mode the
    dispatch hook sees it whole, and without this the model's matmuls were timed by bytes alone."""
    return 2 * (input.numel() // input.shape[-1]) * weight.shape[0] * weight.shape[1]


_EXTRA_FLOPS = {torch.ops.aten.linear: _linear_flops}


def _op_info(func) -> _OpInfo:
    """What the simulator needs to know of an op, from its schema and torch's FLOP formulas."""
    schema = func._schema
    writes = [(i, a.name) for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    return _OpInfo(name=str(func.name()).removeprefix("aten::"), skip=func in _IGNORED or bool(func.is_view),
                   write_args=frozenset(i for i, _ in writes), write_kwargs=frozenset(n for _, n in writes),
                   mutates=bool(writes),
                   flops=flop_registry.get(func._overloadpacket) or _EXTRA_FLOPS.get(func._overloadpacket))


def _native_op_facts(qualified: str, overload: str) -> tuple:
    """``_op_info`` for the C++ core, which knows an op by its schema's name and overload: (name,
    skip, written argument positions, mutates, FLOPs from a Python formula, kind: 1 a projection,
    2 an attention, 3 a gather, 0 anything else, the op)."""
    namespace, name = qualified.split("::", 1)
    func = getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")
    info = _op_info(func)
    kind = 1 if func is _LINEAR else 2 if func is _SDPA else 3 if func is _INDEX_SELECT else 0
    return (info.name, info.skip, sorted(info.write_args), info.mutates, info.flops is not None and kind != 1, kind,
            func)


def _native_flops(func, values: list, out: Any) -> float:
    """The FLOPs of an op with a formula in torch (the C++ core passes every schema argument)."""
    arguments = func._schema.arguments
    args = [v for a, v in zip(arguments, values) if not a.kwarg_only]
    kwargs = {a.name: v for a, v in zip(arguments, values) if a.kwarg_only}
    return _op_info(func).flops(*args, **kwargs, out_val=out)


def _label_of(shape: tuple[int, ...], dtype: torch.dtype) -> _Label:
    return _new_label((shape, dtype))


def _stack_of(pairs: list[tuple[Any, int]], outer: Sequence[tuple[Any, int]]) -> _Stack:
    """A stack the C++ core captured, as ``_stack`` makes them (for ``_format_stack``)."""
    stack = _Stack(pairs)
    stack.outer = outer
    return stack


def _release(refs: dict[int, int]) -> None:
    for ref in refs.values():
        _free_weak_ref(ref)
    refs.clear()


def _shape_key(value: Any) -> Any:
    """``value`` with every tensor replaced by its shape (what a FLOP formula reads of it)."""
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if isinstance(value, (list, tuple)):
        return tuple(_shape_key(v) for v in value)
    return value


def _tensor_list(values: list | tuple) -> Sequence[torch.Tensor]:
    """The tensors in a list argument (``Tensor[]``, ``Tensor?[]``); an ``int[]`` (a shape, dims) has
    none and is seen by its first element."""
    if not values or type(values[0]) is int:
        return ()
    return [v for v in values if isinstance(v, torch.Tensor)]


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor):
                yield v


_SKIP = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(__file__) + os.sep, "contextlib.py")


class _Stack(list):
    """A captured Python stack, innermost first: (code object, last instruction offset) pairs, then
    ``outer``'s pairs. No frame is kept alive and nothing is formatted until a report names the
    access."""

    __slots__ = ("outer",)

    def frames(self) -> Iterator[tuple[Any, int]]:
        yield from self
        yield from self.outer


_NO_FRAMES: tuple = ()
_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _stack(skip: int = 0, entry: Any = None, outer: Sequence[tuple[Any, int]] = _NO_FRAMES) -> _Stack:
    """The caller's stack, less its ``skip`` innermost frames. ``entry`` is a frame on the stack for the whole host
    step and ``outer`` the pairs from its caller outward, captured once when the step began: the walk
    stops at ``entry``, since every frame above a running ordinary function is suspended in the call
    that leads to it. A stack the walk finds without ``entry`` is walked to its root."""
    # By hand rather than torch's C++ gatherer (``torch._C._profiler.gather_traceback``): capturing is
    # cheaper there, but torch's symbolizer imports torch._dynamo and torch._inductor on its first
    # use, about 0.9-1.5 s of CPU in every job process that reports a hazard.
    frame: Any = sys._getframe(skip + 1)
    stack = _Stack()
    while frame is not None:
        stack.append((frame.f_code, frame.f_lasti))
        if frame is entry:
            stack.outer = outer
            return stack
        frame = frame.f_back
    stack.outer = _NO_FRAMES
    return stack


def _stack_from(frame: Any) -> tuple[tuple[Any, int], ...]:
    """The (code object, last instruction offset) pairs from ``frame`` to the root."""
    pairs = []
    while frame is not None:
        pairs.append((frame.f_code, frame.f_lasti))
        frame = frame.f_back
    return tuple(pairs)


def _step_entry(frame: Any) -> Any:
    """The first frame at or above ``frame`` that cannot be suspended (no generator or coroutine),
    so every frame above it keeps its place while it runs."""
    while frame is not None and frame.f_code.co_flags & _SUSPENDABLE:
        frame = frame.f_back
    return frame


def _line(code: Any, offset: int) -> int | None:
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line
    return None


def _format_stack(stack: Any) -> tuple[str, ...]:
    """The innermost frames outside torch and the simulator, as ``file:line in function``."""
    if isinstance(stack, tuple):
        return format_stack(stack)
    kept = [(code, offset) for code, offset in stack.frames()
            if not code.co_filename.startswith(_SKIP[:2]) and not code.co_filename.endswith(_SKIP[2])]
    return tuple(f"{code.co_filename}:{_line(code, offset)} in {code.co_name}" for code, offset in kept[:STACK_DEPTH])
