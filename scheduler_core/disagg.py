"""Disaggregated prefill and decode: a prefill scheduler that only prefills, and a decode scheduler that
receives each request's KV and first token through a transfer and decodes it to the end.

- ``PrefillWorker`` runs a ``Scheduler`` that never decodes: for every request whose prefill ends it
  gathers the request's KV, sends a ``Handoff`` (KV + first token + request) and releases the
  request (its prompt stays in the prefill side's prefix cache). Requests that end on the prefill
  side (aborted, unschedulable) are sent without KV, so every output comes from the decode side.
- ``DecodeWorker`` admits handoffs when its pool has room (KV written into its own cache), then
  runs the ordinary scheduling (decode, retraction; a retracted request is recomputed locally).
- Both have a normal and an overlap version (``overlap=True``): the overlap versions launch batch
  N before processing N-1 through ``OverlapPipeline``, so the WAR barrier, the copy stream and the
  forward-prepare D2H stream apply in both loops exactly as the sync policy says.
- In one process the KV handover crosses streams (the prefill side gathers on its stream, the
  decode side writes on its own), ordered as a GPU engine orders it: the prefill side records an
  event after the gather, the decode side waits on it before writing and marks the tensors used by
  its stream (``record_stream``), so the allocator does not reuse them under the write.
- Transfers: ``InProcTransfer`` (a queue; both workers stepped in turn in one thread by
  ``run_inproc``) and ``DistTransfer`` (two processes over ``torch.distributed``, rank 0 prefill
  and rank 1 decode, started by ``run_distributed`` with ``torch.multiprocessing`` spawn on a free
  loopback port). The backend is gloo, or NCCL when the engine runs on CUDA and at least two GPUs
  are visible (NCCL cannot pair two ranks on one GPU); with gloo, GPU KV is staged through the host.
"""
from __future__ import annotations

import collections
import dataclasses
import os
import pickle
import queue
import socket
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable

import torch

from scheduler_core.batch import FinishReason, Req, ScheduleBatch, release
from scheduler_core.device import Device, Event
from scheduler_core.overlap import InFlight, OverlapLoop, OverlapPipeline, scheduler_device_and_policy
from scheduler_core.records import BatchResult
from scheduler_core.sampling import SamplingParams
from scheduler_core.scheduler import Scheduler

BACKENDS = ("inproc", "torch.distributed")


@dataclass
class Handoff:
    """One request passed from prefill to decode. ``k``/``v`` are None for a request that ended on
    the prefill side (``finish_reason`` set)."""

    rid: int
    input_ids: list[int]
    sampling: SamplingParams
    prompt: str | None
    arrival: float
    output_ids: list[int]
    margins: list[float]
    token_times: list[float]
    cached_tokens: int
    finish_reason: FinishReason | None = None
    text: str = ""
    k: torch.Tensor | None = None  # [layers, len(input_ids), kv_heads, head_dim]
    v: torch.Tensor | None = None
    ready: Event | None = None  # in-process: recorded on the producing stream after k and v were gathered
    grammar: Any = None  # the request's constraint, advanced by the first token on the prefill side
    priority: int = 0

    def to_req(self) -> Req:
        req = Req(rid=self.rid, input_ids=list(self.input_ids), sampling=self.sampling, prompt=self.prompt,
                  output_ids=list(self.output_ids), margins=list(self.margins), finish_reason=self.finish_reason,
                  cached_tokens=self.cached_tokens, text=self.text, arrival=self.arrival,
                  token_times=list(self.token_times), grammar=self.grammar, priority=self.priority)
        return req


class Transfer(ABC):
    """Prefill -> decode channel. ``recv`` returns what arrived and whether the prefill side ended."""

    @abstractmethod
    def send(self, item: Handoff) -> None: ...

    @abstractmethod
    def send_end(self) -> None: ...

    @abstractmethod
    def recv(self, block: bool) -> tuple[list[Handoff], bool]:
        """Everything that has arrived; with ``block``, wait for at least one item or the end."""


class InProcTransfer(Transfer):
    """Both schedulers in one process: the KV tensors are handed over as they are."""

    def __init__(self) -> None:
        self._queue: collections.deque[Handoff] = collections.deque()
        self._ended = False
        self.sent = 0

    def send(self, item: Handoff) -> None:
        self._queue.append(item)
        self.sent += 1

    def send_end(self) -> None:
        self._ended = True

    def recv(self, block: bool) -> tuple[list[Handoff], bool]:
        if block and not self._queue and not self._ended:
            raise RuntimeError("in-process transfer: the decode side would wait forever (prefill is not stepping)")
        items = list(self._queue)
        self._queue.clear()
        return items, self._ended and not self._queue


# Header of a DistTransfer message: kind, pickled-metadata bytes, KV tokens.
_END, _HANDOFF, _NO_KV = 0, 1, 2


class DistTransfer(Transfer):
    """Between two ranks of an initialised ``torch.distributed`` group (prefill sends, decode receives).

    Each message is a fixed-size header (kind, metadata bytes, KV tokens), the request's pickled
    metadata as bytes, then K and V. The receiving side runs the blocking receives in a thread
    and queues what arrives, so the decode loop never waits while it has work of its own (gloo's
    ``irecv`` cannot be polled: its ``is_completed()`` stays False until ``wait()``).
    """

    def __init__(self, kv_shape: tuple[int, int, int], kv_dtype: torch.dtype, comm_device: torch.device,
                 peer: int) -> None:
        import torch.distributed as dist
        self.dist = dist
        self.layers, self.kv_heads, self.head_dim = kv_shape
        self.kv_dtype = kv_dtype
        self.comm_device = comm_device
        self.peer = peer
        self._inbox: queue.Queue[Handoff | BaseException | None] = queue.Queue()
        self._receiver: threading.Thread | None = None
        self._ended = False
        self.sent = 0

    def _send_header(self, kind: int, nbytes: int, tokens: int) -> None:
        self.dist.send(torch.tensor([kind, nbytes, tokens], dtype=torch.int64, device=self.comm_device), self.peer)

    def send(self, item: Handoff) -> None:
        meta = pickle.dumps(dataclasses.replace(item, k=None, v=None, ready=None))
        kind = _NO_KV if item.k is None else _HANDOFF
        self._send_header(kind, len(meta), 0 if item.k is None else item.k.shape[1])
        self.dist.send(torch.frombuffer(bytearray(meta), dtype=torch.uint8).to(self.comm_device), self.peer)
        if item.k is not None:
            self.dist.send(item.k.to(self.comm_device).contiguous(), self.peer)
            self.dist.send(item.v.to(self.comm_device).contiguous(), self.peer)
        self.sent += 1

    def send_end(self) -> None:
        self._send_header(_END, 0, 0)

    def _receive_all(self) -> None:
        try:
            header = torch.zeros(3, dtype=torch.int64, device=self.comm_device)
            while True:
                self.dist.recv(header, self.peer)
                kind, nbytes, tokens = header.tolist()
                if kind == _END:
                    self._inbox.put(None)
                    return
                meta = torch.empty(nbytes, dtype=torch.uint8, device=self.comm_device)
                self.dist.recv(meta, self.peer)
                item: Handoff = pickle.loads(meta.cpu().numpy().tobytes())
                if kind == _HANDOFF:
                    shape = (self.layers, tokens, self.kv_heads, self.head_dim)
                    item.k = torch.empty(shape, dtype=self.kv_dtype, device=self.comm_device)
                    item.v = torch.empty(shape, dtype=self.kv_dtype, device=self.comm_device)
                    self.dist.recv(item.k, self.peer)
                    self.dist.recv(item.v, self.peer)
                    if self.comm_device.type == "cuda":  # NCCL receives are ordered on this thread's stream only
                        torch.cuda.current_stream(self.comm_device).synchronize()
                self._inbox.put(item)
        except BaseException as exc:  # handed to the decode loop, which raises it
            self._inbox.put(exc)

    def recv(self, block: bool) -> tuple[list[Handoff], bool]:
        if self._receiver is None:
            self._receiver = threading.Thread(target=self._receive_all, name="kv-receiver", daemon=True)
            self._receiver.start()
        items: list[Handoff] = []
        while not self._ended:
            try:
                got = self._inbox.get(block=block and not items)
            except queue.Empty:
                break
            if isinstance(got, BaseException):
                raise RuntimeError(f"KV transfer from rank {self.peer} failed: {got}") from got
            if got is None:
                self._ended = True
            else:
                items.append(got)
        return items, self._ended


# ------------------------------------------------------------------------------------------ prefill

class PrefillWorker:
    """Only prefills; hands every prefilled request to the decode side. ``step()`` is one iteration."""

    def __init__(self, sched: Scheduler, transfer: Transfer, overlap: bool) -> None:
        self.sched = sched
        self.transfer = transfer
        self.overlap = overlap
        self.pipe: OverlapPipeline | None = None
        if overlap:
            device, policy = scheduler_device_and_policy(sched)
            self.pipe = OverlapPipeline(sched, device, policy, prefix="prefill.")
        self.pending: InFlight | None = None
        self.ended = False

    @property
    def done(self) -> bool:
        return self.ended

    def step(self) -> None:
        if self.ended:
            return
        sched = self.sched
        processed = self.pending is not None
        if self.pipe is None:
            batch = sched.get_next_batch_to_run()
            if batch is not None:
                self._hand_off(batch, sched.run_batch(batch))
        else:
            with self.pipe.device.stream(self.pipe.schedule):
                batch = sched.get_next_batch_to_run()
                launched = None
                if batch is not None:
                    launched, record = self.pipe.launch(batch, merge_prefilled=False)
                    sched.steps.append(record)
                if self.pending is not None:
                    inflight, self.pending = self.pending, None
                    self._hand_off(inflight.batch, self.pipe.finish(inflight))
                self.pending = launched
        ended_here = list(sched._finished)
        drained = sched._drain(None)
        for req in ended_here:  # aborted or unschedulable on this side: reported by the decode side
            self.transfer.send(_handoff(req, None, None))
        if batch is None and not processed and not drained and sched.has_work():
            sched._abort_unschedulable()
        if not sched.has_work() and self.pending is None and not sched._finished:
            self.transfer.send_end()
            self.ended = True

    def _hand_off(self, batch: ScheduleBatch, result: BatchResult) -> None:
        now = time.perf_counter()
        pools = self.sched.pools
        device, _ = scheduler_device_and_policy(self.sched)
        for req, tok, gap in zip(batch.reqs, result.next_token_ids, result.margins):
            if tok is None:  # a chunk of a longer prompt: its prefill goes on
                continue
            req.output_ids.append(tok)
            req.margins.append(gap)
            req.token_times.append(now)
            if req.grammar is not None:
                req.grammar.advance(tok)
            slots = pools.req_to_token.req_to_token[req.req_pool_idx, : req.kv_len].to(pools.kv_cache.k.device)
            k = pools.kv_cache.k.index_select(1, slots)
            v = pools.kv_cache.v.index_select(1, slots)
            device.name_buffer(k, "handoff.k")
            device.name_buffer(v, "handoff.v")
            # The consumer may be on another stream: it waits for this event before reading k and v.
            self.transfer.send(_handoff(req, k, v, device.current_stream().record_event()))
            release(req, pools, cache=True)


def _handoff(req: Req, k: torch.Tensor | None, v: torch.Tensor | None, ready: Event | None = None) -> Handoff:
    return Handoff(rid=req.rid, input_ids=req.input_ids, sampling=req.sampling, prompt=req.prompt,
                   arrival=req.arrival, output_ids=list(req.output_ids), margins=list(req.margins),
                   token_times=list(req.token_times), cached_tokens=req.cached_tokens,
                   finish_reason=req.finish_reason, text=req.text, k=k, v=v, ready=ready, grammar=req.grammar,
                   priority=req.priority)


# ------------------------------------------------------------------------------------------- decode

class DecodeWorker:
    """Admits handoffs into its own pools and decodes them to the end. ``step(block)`` is one iteration;
    it waits for the transfer only when ``block`` is set and it has nothing else to do."""

    def __init__(self, sched: Scheduler, transfer: Transfer, overlap: bool,
                 on_finish: Callable[[Req], None] | None = None) -> None:
        self.sched = sched
        self.transfer = transfer
        self.on_finish = on_finish
        self.loop = OverlapLoop(sched, on_finish, prefix="decode.") if overlap else None
        self.queue: collections.deque[Handoff] = collections.deque()
        self.ended = False
        self.received = 0

    def busy(self) -> bool:
        return self.loop.busy() if self.loop is not None else self.sched.has_work()

    @property
    def done(self) -> bool:
        return self.ended and not self.queue and not self.busy()

    def step(self, block: bool = False) -> None:
        sched = self.sched
        if not self.ended:
            items, self.ended = self.transfer.recv(block=block and not self.queue and not self.busy())
            self.received += len(items)
            for item in items:
                if item.finish_reason is not None:
                    sched._finished.append(item.to_req())
                else:
                    self.queue.append(item)
        if self.loop is not None:
            # The KV writes go on the schedule stream: the next launch's forward waits on it.
            with self.loop.device.stream(self.loop.pipe.schedule):
                self._admit()
            if self.loop.busy():
                self.loop.step()
            else:
                sched._drain(self.on_finish)
            return
        self._admit()
        batch = sched.get_next_batch_to_run()
        if batch is not None:
            sched.process_batch_result(batch, sched.run_batch(batch))
        drained = sched._drain(self.on_finish)
        if batch is None and not drained and sched.has_work():
            sched._abort_unschedulable()

    def _admit(self) -> None:
        """Move queued handoffs into the running batch while a row and their KV fit; the first
        token's finish check runs here (a request may end on it)."""
        sched, pools = self.sched, self.sched.pools
        device, _ = scheduler_device_and_policy(sched)
        tokenizer, max_context = sched.loaded.tokenizer, sched.loaded.config.max_context
        while self.queue:
            item = self.queue[0]
            req = item.to_req()
            req.check_finished(tokenizer, max_context)
            if req.finished:
                self.queue.popleft()
                sched._finished.append(req)
                continue
            n = len(item.input_ids)
            if (len(sched.running) >= sched.config.max_running_requests or pools.req_to_token.available() == 0
                    or not pools.can_alloc(n + len(sched.running) + 1)):
                return
            self.queue.popleft()
            slots = pools.alloc_tokens(n)
            req.req_pool_idx = pools.req_to_token.alloc()
            pools.req_to_token.write(req.req_pool_idx, 0, slots)
            req.kv_len, req.tree_len, req.last_node = n, 0, None
            dst = slots.to(pools.kv_cache.k.device)
            k, v = item.k.to(pools.kv_cache.k.device), item.v.to(pools.kv_cache.v.device)
            if item.ready is not None:  # in-process handover: the gather ran on the prefill side's stream
                wait_for_handoff(device, item.ready, (k, v))
            pools.kv_cache.k.index_copy_(1, dst, k)
            pools.kv_cache.v.index_copy_(1, dst, v)
            sched.running.merge(ScheduleBatch([req]))


def wait_for_handoff(device: Device, ready: Event, tensors: tuple[torch.Tensor, ...]) -> None:
    """The current stream waits until the producer's gather is done, and ``tensors`` count as used by
    it (``record_stream``): the producer's allocator must not reuse them before this stream's write."""
    stream = device.current_stream()
    stream.wait_event(ready)
    for t in tensors:
        device.record_stream(t, stream)


# ------------------------------------------------------------------------------------------ drivers

def run_inproc(prefill: Scheduler, decode: Scheduler, overlap: bool,
               on_finish: Callable[[Req], None] | None = None) -> None:
    """Both schedulers in this thread, stepped in turn until the decode side has finished everything."""
    transfer = InProcTransfer()
    p = PrefillWorker(prefill, transfer, overlap)
    d = DecodeWorker(decode, transfer, overlap, on_finish)
    while not d.done:
        p.step()
        d.step(block=False)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class DistJob:
    """Everything a spawned rank needs (pickled to it)."""

    loaded: Any  # LoadedModel
    config: Any  # SchedulerConfig
    device: str
    overlap: bool
    reqs: list[Req]
    port: int
    num_threads: int
    environ: dict[str, str]


def _rank_main(rank: int, job: DistJob, results: Any) -> None:
    import torch.distributed as dist
    os.environ.update(job.environ)
    torch.set_num_threads(job.num_threads)
    device = torch.device(job.device)
    nccl = device.type == "cuda" and torch.cuda.device_count() >= 2
    if nccl:
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if nccl else "gloo", init_method=f"tcp://127.0.0.1:{job.port}",
                            rank=rank, world_size=2)
    try:
        sched = Scheduler(job.loaded if device.type == "cpu" else _moved(job.loaded, device), job.config, device)
        cfg = sched.loaded.config
        transfer = DistTransfer((cfg.num_layers, cfg.num_kv_heads, cfg.head_dim), sched.pools.kv_cache.k.dtype,
                                device if nccl else torch.device("cpu"), peer=1 - rank)
        finished: list[Req] = []
        if rank == 0:
            for req in job.reqs:
                req.__post_init__()  # the seeded generator does not travel; rebuild it from the seed
                sched.add_request(req)
            worker = PrefillWorker(sched, transfer, job.overlap)
            while not worker.done:
                worker.step()
        else:
            dworker = DecodeWorker(sched, transfer, job.overlap, finished.append)
            while not dworker.done:
                dworker.step(block=True)
        sched.pools.check_idle_invariant()
        for req in finished:
            req.generator = None
        results.put((rank, "ok", finished, len(sched.steps)))
    except BaseException as exc:  # reported to the parent, which raises it
        results.put((rank, "error", f"{type(exc).__name__}: {exc}", 0))
        raise
    finally:
        dist.destroy_process_group()


def _moved(loaded: Any, device: torch.device) -> Any:
    loaded.model.to(device)
    return loaded


def run_distributed(loaded: Any, config: Any, device: str, overlap: bool, reqs: list[Req],
                    num_threads: int = 1, timeout_s: float = 600.0) -> tuple[list[Req], dict[int, int]]:
    """Prefill on rank 0 and decode on rank 1 in two spawned processes; returns the finished requests
    (as the decode rank saw them) and each rank's number of steps. Each rank checks its pools are
    leak-free at the end; a failure in either rank raises here."""
    import torch.multiprocessing as mp
    for req in reqs:
        req.generator = None  # rebuilt from the seed on the other side (Req.__post_init__ is not rerun)
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    env = {k: v for k, v in os.environ.items() if k.startswith("PARALLAX_")}
    job = DistJob(loaded, config, device, overlap, reqs, free_port(), num_threads, env)
    procs = mp.spawn(_rank_main, args=(job, results), nprocs=2, join=False)
    reports: dict[int, tuple[str, Any, int]] = {}
    deadline = time.monotonic() + timeout_s
    while len(reports) < 2:
        if not results.empty():
            rank, status, payload, steps = results.get()
            reports[rank] = (status, payload, steps)
            if status == "error":
                break
            continue
        if procs.join(timeout=0.05):
            break
        if time.monotonic() > deadline:
            for p in procs.processes:
                p.kill()
            raise TimeoutError(f"disaggregated run did not finish in {timeout_s:.0f} s")
    while not results.empty():
        rank, status, payload, steps = results.get()
        reports[rank] = (status, payload, steps)
    errors = [f"rank {r}: {payload}" for r, (status, payload, _) in sorted(reports.items()) if status == "error"]
    try:
        while not procs.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise TimeoutError(f"disaggregated ranks did not exit in {timeout_s:.0f} s")
    except Exception as exc:
        if not errors:
            raise
        raise RuntimeError("; ".join(errors)) from exc
    if errors or len(reports) < 2:
        raise RuntimeError("; ".join(errors) or "a disaggregated rank exited without reporting")
    return reports[1][1], {r: rep[2] for r, rep in reports.items()}
