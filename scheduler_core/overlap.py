"""The overlap machinery: the future-token relay, launching a batch on the forward stream, the result copy.

In the overlap loop the CPU schedules batch N+1 while the device still runs batch N, so N's sampled
tokens are not on the host when N+1 is built. The relay (``FutureMap``) fixes that without a CPU
round trip: batch N stores its tokens in a device ring, the host writes ``-slot`` placeholders for
them, and N+1's input ids are gathered from the ring on the device.

``OverlapPipeline.launch`` runs one batch (forward stream, WAR barrier, result copy) and returns an
``InFlight`` holding every tensor the device may still use; ``OverlapPipeline.finish`` waits for its
``copy_done`` event and returns the ``BatchResult``. Every synchronisation choice comes from the
``ActivePolicy`` (see docs/sync_policy.md); nothing here asks which platform it runs on.
``run_overlap_loop`` is the plain overlap event loop (``Scheduler.event_loop_overlap``); the
disaggregated loops in ``disagg.py`` reuse the pipeline.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from scheduler_core.batch import Req, ScheduleBatch
from scheduler_core.device import CpuDevice, Device, Event, Stream
from scheduler_core.devices import make_device
from scheduler_core.grammar import apply_masks, grammar_masks
from scheduler_core.model.loader import LoadedModel
from scheduler_core.platform import ActivePolicy, Platform, detect_platform, resolve_policy
from scheduler_core.pools import Pools
from scheduler_core.records import BatchResult, StepRecord
from scheduler_core.sampling import sample
from scheduler_core.spec import Draft, NgramDraft, draft_steps, reserve, reserve_span, spec_result, verify

# Launched batches kept alive by the record buffer: N+1 is launched before N is processed, so two.
RECORD_SLOTS = 2

class Scheduler(Protocol):
    """What the overlap machinery uses of ``scheduler.Scheduler`` (which imports this module; this
    module does not import it back)."""

    loaded: LoadedModel
    config: Any
    device: torch.device
    pools: Pools
    running: ScheduleBatch
    steps: list[StepRecord]
    streams: Device | None
    sync_policy: ActivePolicy | None
    overlap_consecutive_prefill: bool

    draft: Draft | None

    def get_next_batch_to_run(self) -> ScheduleBatch | None: ...
    def speculating(self, batch: ScheduleBatch | None) -> bool: ...
    def process_batch_result(self, batch: ScheduleBatch, result: BatchResult) -> None: ...
    def has_work(self) -> bool: ...
    def _drain(self, on_finish: Callable[[Req], None] | None) -> int: ...
    def _abort_unschedulable(self) -> None: ...
    def _declare_device_memory(self, streams: Device) -> None: ...


def default_device_and_policy(torch_device: torch.device) -> tuple[Device, ActivePolicy]:
    """The facade and policy (with PARALLAX_* overrides) for an engine on ``torch_device``.

    A GPU device follows the detected platform. A CPU device is the CPU platform, unless
    PARALLAX_DEVICE names a simulated one: then the engine runs on the simulator's device
    (``scheduler_core.sim``), which computes on the CPU and times the work on virtual streams.
    """
    platform = detect_platform()
    if torch_device.type == "cpu":
        if not platform.simulated:
            return CpuDevice(Platform("cpu")), resolve_policy(Platform("cpu"))
        return make_device(platform), resolve_policy(platform)
    return make_device(platform, torch_device.index or 0), resolve_policy(platform)


def scheduler_device_and_policy(sched: Scheduler) -> tuple[Device, ActivePolicy]:
    """The scheduler's ``streams`` and ``sync_policy``, filling in defaults for its torch device."""
    if sched.streams is None or sched.sync_policy is None:
        device, policy = default_device_and_policy(sched.device)
        if sched.streams is None:
            sched.streams = device
            sched._declare_device_memory(device)
        sched.sync_policy = sched.sync_policy or policy
    return sched.streams, sched.sync_policy


class FutureMap:
    """Sampled tokens the host has not read yet, in a device buffer indexed by request pool row
    (as upstream SGLang's pool-indexed future map): row ``r`` lives at slot ``r + 1``, so ``-slot``
    is always negative and slot 0 is never used.

    The forward of batch N *stashes* its tokens at its requests' slots; the host *publishes* a
    request's placeholder into the next batch's input ids while the token is unread. ``pending``
    maps a request to (its slot, the launch that stashed its newest token), so processing batch N
    drops the entry only if no later launch has stashed a newer token for that request.

    A speculative verify step also leaves its draft state here: each request's last produced token
    (the bonus token, in ``buf``) and its new KV length (``seq_lens_buf``, upstream's
    ``new_seq_lens_buf``), then records ``publish_ready``. The next verify step is prepared before
    the host knows either: ``lens_pending`` holds a request's slot and how far the step may move its
    length (the next step's upper bound), and the schedule stream resolves the ``-slot`` length placeholders only after waiting on
    ``publish_ready`` (``resolve_lens``).
    """

    def __init__(self, device: Device, rows: int) -> None:
        self.device = device
        self.rows = rows
        self.buf = torch.zeros(rows + 1, dtype=torch.int64, device=device.torch_device)
        device.mark_device(self.buf)
        device.name_buffer(self.buf, "future_map")
        self.seq_lens_buf = torch.zeros(rows + 1, dtype=torch.int64, device=device.torch_device)
        device.mark_device(self.seq_lens_buf)
        device.name_buffer(self.seq_lens_buf, "future_map.new_seq_lens")
        # id(req) -> (slot, launch number, the request's retraction count at that launch)
        self.pending: dict[int, tuple[int, int, int]] = {}
        # id(req) -> (slot, launch number, retraction count, positions the step may add to the KV length)
        self.lens_pending: dict[int, tuple[int, int, int, int]] = {}
        self.publish_ready: Event | None = None  # recorded after the latest verify step's publish

    @staticmethod
    def slot_of(pool_row: int) -> int:
        return pool_row + 1

    def placeholder(self, req: Req) -> int | None:
        """``-slot`` when the request's newest token is still only on the device, else None. A token
        stashed before the request was retracted is stale: the request restarts from its host tokens."""
        entry = self.pending.get(id(req))
        if entry is None or entry[2] != req.retractions:
            return None
        return -entry[0]

    def length(self, req: Req) -> tuple[int, int]:
        """The request's KV length for the next step as the host writes it (``-slot`` while a verify
        step's length is only on the device) and an upper bound on its value. With one batch in flight
        the host's ``kv_len`` is where that step started, so the bound is that plus the step's span."""
        entry = self.lens_pending.get(id(req))
        if entry is None or entry[2] != req.retractions:
            return req.kv_len, req.kv_len
        return -entry[0], req.kv_len + entry[3]

    def stash(self, slots: torch.Tensor, tokens: torch.Tensor) -> None:
        """Queued on the current (forward) stream."""
        self.buf[slots] = tokens

    def stash_lens(self, slots: torch.Tensor, seq_lens: torch.Tensor) -> None:
        """A verify step's new KV lengths, queued on the current (forward) stream."""
        self.seq_lens_buf[slots] = seq_lens

    def resolve(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Input ids with every ``-slot`` placeholder replaced by the token stored there (on the device)."""
        return torch.where(input_ids < 0, self.buf[(-input_ids).clamp(min=0)], input_ids)

    def resolve_lens(self, lens: torch.Tensor) -> torch.Tensor:
        """KV lengths with every ``-slot`` placeholder replaced by the published length (on the current
        stream, which must have waited for ``publish_ready``)."""
        return torch.where(lens < 0, self.seq_lens_buf[(-lens).clamp(min=0)], lens)

    def publish(self, reqs: list[Req], slots: list[int], launch: int) -> None:
        for req, slot in zip(reqs, slots):
            self.pending[id(req)] = (slot, launch, req.retractions)

    def publish_lens(self, reqs: list[Req], slots: list[int], launch: int, span: int) -> None:
        for req, slot in zip(reqs, slots):
            self.lens_pending[id(req)] = (slot, launch, req.retractions, span)

    def retire(self, reqs: list[Req], launch: int) -> None:
        """The host has read launch ``launch``'s tokens (and lengths) for ``reqs``."""
        for req in reqs:
            for table in (self.pending, self.lens_pending):
                entry = table.get(id(req))
                if entry is not None and entry[1] == launch:
                    del table[id(req)]


@dataclass
class InFlight:
    """A launched batch whose result the host has not processed yet, and what keeps it alive."""

    batch: ScheduleBatch  # a snapshot: the scheduler's batches change after launch
    rows: list[int]  # rows that sampled a token
    launch: int  # the launch number (future-map bookkeeping)
    retractions: list[int]  # each request's retraction count at launch: a changed one makes its result stale
    tokens_host: torch.Tensor | None
    margins_host: torch.Tensor | None
    copy_done: Event | None
    expected_seq_lens: list[int]  # what the host believes each sampled row's KV length is
    seq_lens_host: torch.Tensor | None
    prepare_done: Event | None  # the forward-prepare D2H copy (policy.fwd_prepare_d2h)
    seconds: float
    keep_alive: list[torch.Tensor] = field(default_factory=list)
    spec: bool = False  # a speculative verify step (tokens_host: [B, K+2], the accepted count last)
    publish_ready: Event | None = None  # a verify step: recorded after its lengths were published


class RelayError(RuntimeError):
    """The device's view of a batch disagrees with the host's: the relay is out of step."""


class OverlapPipeline:
    """Streams, the future map and the forward-prepare buffers of one overlapped scheduler."""

    def __init__(self, scheduler: Scheduler, device: Device, policy: ActivePolicy, prefix: str = "") -> None:
        """``prefix`` starts the streams' names (two pipelines on one device: "prefill.", "decode.")."""
        self.scheduler = scheduler
        self.device = device
        self.policy = policy
        rows = scheduler.config.max_running_requests + 1
        self.schedule = device.new_stream(f"{prefix}schedule")
        self.forward = device.new_stream(f"{prefix}forward")
        self.prefix = prefix
        self.copy: Stream | None = device.new_stream(f"{prefix}copy") if policy.copy_stream else None
        self.grammar_copy: Stream | None = None  # the grammar path's copy stream where the policy has none
        self.prepare_d2h: Stream | None = None
        self._pinned: list[torch.Tensor] = []
        if policy.fwd_prepare_d2h:
            self.prepare_d2h = device.new_stream(f"{prefix}fwd_prepare_d2h")
            # Two buffers: batch N+1 is launched before batch N's copy is read.
            self._pinned = [device.empty_pinned((rows,), torch.int64) for _ in range(2)]
        self._launches = 0
        # Upstream's batch_record_buf: each launched batch stays referenced for two launches.
        self.record_buf: list[list[torch.Tensor] | None] = [None] * RECORD_SLOTS
        self._record_ct = 0
        self.futures = FutureMap(device, rows)
        for i, buf in enumerate(self._pinned):
            device.name_buffer(buf, f"seq_lens_host[{i}] (pinned)")

    # -- launch -------------------------------------------------------------------------------
    def launch(self, batch: ScheduleBatch, merge_prefilled: bool = True) -> tuple[InFlight, StepRecord]:
        """Run ``batch`` on the forward stream and queue its result copy; returns without waiting.

        Returns the in-flight batch and its step record (the caller appends it to ``sched.steps``).

        Call inside ``device.stream(self.schedule)``. With ``merge_prefilled`` the requests that
        finish their prefill here join the running batch now, since the next batch is scheduled
        before this one's result is processed.
        """
        sched, device, futures = self.scheduler, self.device, self.futures
        start = time.perf_counter()
        started = device.now()
        # Tokens the host has not seen yet enter as -slot placeholders, for exactly as long as the
        # batch is prepared: Req.output_ids only ever holds real tokens.
        placeholders: list[Req] = []
        for req in batch.reqs:
            placeholder = futures.placeholder(req)
            if placeholder is not None:
                req.output_ids.append(placeholder)
                placeholders.append(req)
        try:
            if batch.mode == "extend":
                forward_batch = batch.prepare_for_extend(sched.pools, device.torch_device)
            else:
                forward_batch = batch.prepare_for_decode(sched.pools, device.torch_device,
                                                         sched.config.cascade_min_prefix)
            rows = [i for i, r in enumerate(batch.reqs) if r.prefill_done]
        finally:
            for req in placeholders:
                req.output_ids.pop()
        snapshot = ScheduleBatch(list(batch.reqs), mode=batch.mode, mixed=batch.mixed)
        shared = 0 if forward_batch.prefix_slots is None else forward_batch.prefix_slots.numel()
        n_tokens = forward_batch.input_ids.numel()
        if merge_prefilled and batch.mode == "extend":
            running = set(map(id, sched.running.reqs))
            sched.running.merge(ScheduleBatch([batch.reqs[i] for i in rows if id(batch.reqs[i]) not in running]))

        fwd = self.forward
        fwd.wait_stream(self.schedule)
        tokens = margins = seq_lens_host = prepare_done = None
        launch_no = self._launches
        # Built on the schedule stream, read on the forward stream: the two-slot record buffer keeps
        # them alive until the launch after next, by when the host has waited for this batch's
        # result (upstream's ``batch_record_buf``), so the allocator cannot hand their memory back early.
        shared_tensors = forward_batch.tensors()
        for t, name in zip(shared_tensors, _batch_tensor_names(forward_batch)):
            device.mark_device(t)  # built on the device by the schedule stream (host->device copies)
            device.name_buffer(t, name)
        # A grammar's masks follow the host's tokens (the loop did not overlap this batch); built on the
        # schedule stream, applied before the pick on the forward stream (delayed sampling).
        masks = grammar_masks([batch.reqs[i] for i in rows], sched.loaded.config.vocab_size, device.torch_device)
        if masks is not None:
            device.mark_device(masks)
            device.name_buffer(masks, "grammar.vocab_mask")
            shared_tensors.append(masks)
        self._record_batch(shared_tensors)
        del shared_tensors
        keep: list[torch.Tensor] = []
        with device.stream(fwd):
            forward_batch.input_ids = futures.resolve(forward_batch.input_ids)
            # The forward's last read of the shared request tables (req_to_token, seq_lens) is the
            # attention metadata gathered before the layers run; the read-done event goes right after.
            forward_batch.materialize()
            shared_read_done = None
            if self.policy.war_barrier and self.policy.war_barrier_read_gated:
                shared_read_done = fwd.record_event()
                device.declare_reads_done(shared_read_done, self._shared_buffers())
            seq_lens = forward_batch.positions[forward_batch.logits_index] + 1
            device.name_buffer(seq_lens, "seq_lens (forward prepare)")
            ready = fwd.record_event() if self.prepare_d2h is not None else None
            logits = sched.loaded.model(forward_batch, sched.pools.kv_cache)
            if rows:
                picked = [batch.reqs[i] for i in rows]
                tokens, margins = _sample_on_device(logits[rows] if len(rows) < len(batch.reqs) else logits,
                                                    picked, device.torch_device, masks)
                device.name_buffer(tokens, "next_token_ids")
                device.name_buffer(margins, "next_token_margins")
                slots = [futures.slot_of(req.req_pool_idx) for req in picked]
                futures.stash(torch.tensor(slots, device=device.torch_device), tokens)
                futures.publish(picked, slots, launch_no)
                keep += [tokens, margins, seq_lens]
        del forward_batch
        # Outside speculative decoding the host already knows every length: no per-step blocking copy.
        # With the forward-prepare D2H stream (CUDA) the lengths still go to a pinned buffer without
        # blocking anyone, and ``finish`` checks them against the host's (a relay check).
        if self.prepare_d2h is not None and ready is not None:
            pinned = self._pinned[self._launches % 2][: seq_lens.numel()]
            self.prepare_d2h.wait_event(ready)
            with device.stream(self.prepare_d2h):
                seq_lens_host = device.to_host(seq_lens, out=pinned)
                device.name_buffer(seq_lens_host, "seq_lens_host (pinned)")
                prepare_done = self.prepare_d2h.record_event()
            device.record_stream(seq_lens, self.prepare_d2h)
        self._launches += 1

        tokens_host = margins_host = copy_done = None
        if tokens is not None:
            # Upstream's delayed-sampling (grammar) path copies on the copy stream with no HIP branch.
            tokens_host, margins_host, copy_done = self._copy_result(tokens, margins, grammar=masks is not None)
        else:
            # Nothing sampled (a middle prefill chunk): the host still waits for the batch before the
            # record buffer lets its tensors go.
            copy_done = fwd.record_event()
        # The scheduler must not overwrite what the in-flight forward still reads: read-gated, only
        # until the forward's last shared read; coarse (forced, or no event), the whole forward.
        self._war_barrier(shared_read_done)

        seconds = time.perf_counter() - start
        step = StepRecord(batch.mode, len(batch.reqs), n_tokens, seconds, shared, batch.mixed, started)
        expected = [r.kv_len for r in batch.reqs]  # seq_lens has one entry per request
        return InFlight(snapshot, rows, launch_no, [r.retractions for r in batch.reqs], tokens_host, margins_host,
                        copy_done, expected, seq_lens_host,
                        prepare_done, seconds, keep), step

    def launch_verify(self, batch: ScheduleBatch) -> tuple[InFlight, StepRecord]:
        """A speculative step, as upstream's spec v2 runs it under overlap: draft, verify and accept on
        the forward stream, prepared before the host knows the previous verify step's outcome.

        Each request's last token and KV length come from where the previous step left them on the
        device (the future map's ``-slot`` placeholders); the host reserves KV slots up to the length's
        upper bound plus this step's span (``spec.reserve``), and the schedule stream resolves the
        lengths only after waiting on the previous step's ``publish_ready`` (upstream's
        ``resolve_seq_lens_cpu``; under ``hip_publish_sync`` the host synchronises on it instead,
        #26672). The self-draft then runs on the device; the n-gram draft reads the host's tokens (the
        loop does not overlap it). The step stashes its bonus tokens and new lengths for the next one
        and records ``publish_ready``. The new lengths come back to the host on the forward-prepare D2H
        stream after that event (CUDA), after the host synchronised on it in ``finish`` (HIP), or with
        a copy on the forward stream. Call inside ``device.stream(self.schedule)``.
        """
        sched, device, futures = self.scheduler, self.device, self.futures
        draft = sched.draft
        assert draft is not None
        start = time.perf_counter()
        started = device.now()
        reqs = list(batch.reqs)
        span = reserve_span(draft.config)
        last: list[int] = []
        lens: list[int] = []
        bounds: list[int] = []
        for req in reqs:
            placeholder = futures.placeholder(req)
            last.append(req.output_ids[-1] if placeholder is None else placeholder)
            length, bound = futures.length(req)
            lens.append(length)
            bounds.append(bound)
        reserve(reqs, sched.pools, bounds, span)  # writes the request table (schedule stream)
        steps = draft_steps(reqs, draft.config)
        torch_device = device.torch_device
        slots_host = [futures.slot_of(r.req_pool_idx) for r in reqs]
        rows = torch.tensor([r.req_pool_idx for r in reqs], device=torch_device)
        slots = torch.tensor(slots_host, device=torch_device)
        last_dev = torch.tensor(last, device=torch_device)
        lens_dev = torch.tensor(lens, device=torch_device)
        drafts = draft_lens = None
        if isinstance(draft, NgramDraft):
            drafts, draft_lens = (t.to(torch_device) for t in draft.propose(reqs))
        shared_tensors = [rows, slots, last_dev, lens_dev]
        names = ["spec.rows", "spec.slots", "spec.last_token", "spec.seq_lens"]
        if drafts is not None and draft_lens is not None:
            shared_tensors += [drafts, draft_lens]
            names += ["spec.drafts", "spec.draft_lens"]
        if any(length < 0 for length in lens):
            # The draft state of the verify step still in flight: read only after its publish_ready.
            event = futures.publish_ready
            assert event is not None
            if self.policy.hip_publish_sync:
                event.synchronize()  # HIP: the host waits instead of the stream (#26672)
            else:
                self.schedule.wait_event(event)
            lens_dev = futures.resolve_lens(lens_dev)
            shared_tensors.append(lens_dev)
            names.append("spec.seq_lens (resolved)")
        for t, name in zip(shared_tensors, names):
            device.mark_device(t)
            device.name_buffer(t, name)
        self._record_batch(shared_tensors)
        del shared_tensors
        snapshot = ScheduleBatch(reqs, mode="decode")
        launch_no = self._launches
        fwd = self.forward
        fwd.wait_stream(self.schedule)
        with device.stream(fwd):
            last_dev = futures.resolve(last_dev)
            # The forward's last read of the request table: every slot this step can touch, by position.
            kv_table = sched.pools.req_to_token.table[rows, : max(bounds) + steps + 1]
            shared_read_done = None
            if self.policy.war_barrier and self.policy.war_barrier_read_gated:
                shared_read_done = fwd.record_event()
                device.declare_reads_done(shared_read_done, self._shared_buffers())
            out = verify(sched.loaded, sched.pools.kv_cache, draft, kv_table, last_dev, lens_dev, steps, drafts,
                         draft_lens)
            futures.stash(slots, out.bonus)
            futures.stash_lens(slots, out.new_seq_lens)
            results = torch.cat((out.tokens, out.accepted[:, None]), 1)
            new_seq_lens = out.new_seq_lens
            device.name_buffer(results, "spec.tokens")
            device.name_buffer(out.margins, "spec.margins")
            device.name_buffer(new_seq_lens, "spec.new_seq_lens")
            publish_ready = fwd.record_event()
        futures.publish(reqs, slots_host, launch_no)
        futures.publish_lens(reqs, slots_host, launch_no, steps + 1)
        futures.publish_ready = publish_ready
        seq_lens_host = prepare_done = None
        if self.policy.hip_publish_sync:
            pass  # ``finish`` synchronises the host on publish_ready, then copies the lengths (#26672)
        elif self.prepare_d2h is not None:
            pinned = self._pinned[self._launches % 2][: new_seq_lens.numel()]
            self.prepare_d2h.wait_event(publish_ready)
            with device.stream(self.prepare_d2h):
                seq_lens_host = device.to_host(new_seq_lens, out=pinned)
                prepare_done = self.prepare_d2h.record_event()
            device.record_stream(new_seq_lens, self.prepare_d2h)
        else:
            with device.stream(fwd):
                seq_lens_host = device.to_host(new_seq_lens)
                prepare_done = fwd.record_event()
        if seq_lens_host is not None:
            device.name_buffer(seq_lens_host, "spec.new_seq_lens_host")
        self._launches += 1
        tokens_host, margins_host, copy_done = self._copy_result(results, out.margins)
        self._war_barrier(shared_read_done)
        seconds = time.perf_counter() - start
        step = StepRecord("decode", len(reqs), len(reqs) * (steps + 1), seconds, 0, False, started)
        return InFlight(snapshot, list(range(len(reqs))), launch_no, [r.retractions for r in reqs], tokens_host,
                        margins_host, copy_done, [], seq_lens_host, prepare_done, seconds,
                        [results, out.margins, new_seq_lens], spec=True, publish_ready=publish_ready), step

    def _copy_result(self, tokens: torch.Tensor, margins: torch.Tensor,
                     grammar: bool = False) -> tuple[torch.Tensor, torch.Tensor, Event]:
        """Queue the device->host copy of a batch's sampled tokens: on the copy stream under the
        policy's ``copy_stream``, and always for a grammar batch (upstream's delayed-sampling copy has
        no HIP branch: a latent #29075-shaped cost on ROCm); else on the forward stream."""
        device, fwd = self.device, self.forward
        if grammar and self.copy is None:
            self.grammar_copy = self.grammar_copy or device.new_stream(f"{self.prefix}copy")
        copy = self.copy or (self.grammar_copy if grammar else None)
        if copy is not None:
            copy.wait_stream(fwd)
            with device.stream(copy):
                tokens_host, margins_host = device.to_host(tokens), device.to_host(margins)
                copy_done = copy.record_event()
            device.record_stream(tokens, copy)
            device.record_stream(margins, copy)
        else:
            with device.stream(fwd):
                tokens_host, margins_host = device.to_host(tokens), device.to_host(margins)
                copy_done = fwd.record_event()
        device.name_buffer(tokens_host, "next_token_ids_host")
        return tokens_host, margins_host, copy_done

    def _war_barrier(self, shared_read_done: Event | None) -> None:
        if self.policy.war_barrier:
            if self.policy.war_barrier_read_gated and shared_read_done is not None:
                self.schedule.wait_event(shared_read_done)
            else:
                self.schedule.wait_stream(self.forward)

    def _finish_verify(self, inflight: InFlight) -> BatchResult:
        assert inflight.copy_done is not None and inflight.publish_ready is not None
        device = self.device
        if inflight.seq_lens_host is None:
            publish_ready = inflight.publish_ready
            publish_ready.synchronize()  # HIP: the host waits on publish_ready, then copies (#26672)
            with device.stream(self.schedule):
                inflight.seq_lens_host = device.to_host(inflight.keep_alive[2])
                device.name_buffer(inflight.seq_lens_host, "spec.new_seq_lens_host")
                inflight.prepare_done = self.schedule.record_event()
        assert inflight.prepare_done is not None
        inflight.copy_done.synchronize()
        inflight.prepare_done.synchronize()
        rows = device.host_list(inflight.tokens_host)
        result = spec_result([row[:-1] for row in rows], device.host_list(inflight.margins_host),
                             [row[-1] for row in rows], device.host_list(inflight.seq_lens_host), inflight.seconds)
        assert result.spec is not None
        for i, req in enumerate(inflight.batch.reqs):
            if req.retractions != inflight.retractions[i]:  # retracted while in flight: its result is stale
                result.spec.tokens[i] = []
        self.futures.retire(inflight.batch.reqs, inflight.launch)
        inflight.keep_alive.clear()
        return result

    def _record_batch(self, tensors: list[torch.Tensor]) -> None:
        """Keep ``tensors`` alive in the next slot of the record buffer (dropping the oldest batch's)."""
        self._record_ct = (self._record_ct + 1) % len(self.record_buf)
        self.record_buf[self._record_ct] = tensors

    def _shared_buffers(self) -> list[torch.Tensor]:
        """What the schedule stream writes and the forward reads: the request tables."""
        pool = self.scheduler.pools.req_to_token
        return [pool.table, pool.seq_lens]

    # -- finish -------------------------------------------------------------------------------
    def finish(self, inflight: InFlight) -> BatchResult:
        """Wait for the batch's result copy and return it; the batch's tensors are released."""
        if inflight.spec:
            return self._finish_verify(inflight)
        n = len(inflight.batch.reqs)
        next_ids: list[int | None] = [None] * n
        margins: list[float | None] = [None] * n
        if inflight.copy_done is not None:
            inflight.copy_done.synchronize()
        if inflight.tokens_host is not None:
            device = self.device
            reqs = inflight.batch.reqs
            for i, tok, gap in zip(inflight.rows, device.host_list(inflight.tokens_host),
                                   device.host_list(inflight.margins_host)):
                if reqs[i].retractions == inflight.retractions[i]:  # a retracted request's token is stale
                    next_ids[i], margins[i] = tok, gap
        if inflight.prepare_done is not None:
            inflight.prepare_done.synchronize()
        if inflight.seq_lens_host is not None:
            seen = self.device.host_list(inflight.seq_lens_host)
            if seen != inflight.expected_seq_lens:
                raise RelayError(f"device KV lengths {seen} != host's {inflight.expected_seq_lens}")
        self.futures.retire([inflight.batch.reqs[i] for i in inflight.rows], inflight.launch)
        inflight.keep_alive.clear()
        return BatchResult(next_ids, margins, inflight.seconds)


def _batch_tensor_names(forward_batch) -> list[str]:
    """Names for ``forward_batch.tensors()``, in the same order (for hazard reports)."""
    names = [f"forward_batch.{k}" for k, v in vars(forward_batch).items() if isinstance(v, torch.Tensor)]
    for g, group in enumerate(forward_batch.groups):
        names += [f"forward_batch.groups[{g}].{k}" for k, v in vars(group).items() if isinstance(v, torch.Tensor)]
    if forward_batch.gather is not None:
        names.append("forward_batch.gather.rows")
    return names


def _sample_on_device(logits: torch.Tensor, reqs: list[Req], device: torch.device,
                      masks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy tokens and top-1/top-2 margins without leaving the device, under the rows' grammar
    masks. Rows that sample with a temperature use the host sampler (seeded per-request generators
    live on the host), which costs a synchronisation; greedy rows never do."""
    logits = apply_masks(logits, masks)
    top = torch.topk(logits, 2, dim=-1)
    tokens = top.indices[:, 0]
    margins = top.values[:, 0] - top.values[:, 1]
    if not all(r.sampling.greedy for r in reqs):
        ids, _ = sample(logits, [r.sampling for r in reqs], [r.generator for r in reqs])
        tokens = torch.tensor(ids, dtype=torch.int64, device=device)
    return tokens, margins


class OverlapLoop:
    """The overlap event loop, one iteration per ``step()``: schedule and launch batch N, then process
    batch N-1 while N runs. ``run_overlap_loop`` drives it; the disaggregated decode loop reuses it.

    As upstream's ``event_loop_overlap``, launched batches wait in ``result_queue`` (a deque of
    ``InFlight``) and ``is_disable_overlap_for_batch`` decides when a batch must not overlap the one
    before it: consecutive extend batches with ``sched.overlap_consecutive_prefill`` off, and a batch
    that needs its predecessor's tokens on the host first (grammar: ``ScheduleBatch.needs_host_tokens``;
    an n-gram verify step, whose drafts come from the host's tokens; a non-speculative batch after a
    verify step, which needs that step's KV lengths on the host). A self-draft verify step overlaps the
    batch before it, verify steps included (``OverlapPipeline.launch_verify``). Scheduling may retract
    running requests while the previous batch is in flight (as upstream SGLang does): that batch's
    result for a retracted request is stale and skipped.
    """

    def __init__(self, sched: Scheduler, on_finish: Callable[[Req], None] | None = None, prefix: str = "") -> None:
        self.sched = sched
        self.on_finish = on_finish
        self.device, self.policy = scheduler_device_and_policy(sched)
        self.pipe = OverlapPipeline(sched, self.device, self.policy, prefix)
        self.result_queue: deque[InFlight] = deque()
        self.last_batch: ScheduleBatch | None = None
        self.disabled_overlaps = 0  # batches that waited for their predecessor's result

    @property
    def pending(self) -> InFlight | None:
        """The oldest launched batch not processed yet."""
        return self.result_queue[0] if self.result_queue else None

    def busy(self) -> bool:
        return self.sched.has_work() or bool(self.result_queue)

    def is_disable_overlap_for_batch(self, batch: ScheduleBatch | None) -> bool:
        if batch is None or not self.result_queue:
            return False
        last = self.result_queue[-1]
        consecutive_prefill = (not self.sched.overlap_consecutive_prefill and batch.mode == "extend"
                               and last.batch.mode == "extend")
        # A verify step overlaps the batch before it when its draft runs on the device: the future map
        # carries each request's last token and KV length from the step in flight. The n-gram draft
        # reads the host's tokens, and any other batch after a verify step needs its lengths on the host.
        speculating = self.sched.speculating(batch)
        draft = self.sched.draft
        host_draft = speculating and draft is not None and not draft.on_device
        after_verify = last.spec and not speculating
        return consecutive_prefill or batch.needs_host_tokens() or host_draft or after_verify

    def pop_and_process(self) -> bool:
        """Process the oldest launched batch; False when none was in flight."""
        if not self.result_queue:
            return False
        inflight = self.result_queue.popleft()
        self.sched.process_batch_result(inflight.batch, self.pipe.finish(inflight))
        return True

    def step(self) -> None:
        sched = self.sched
        with self.device.stream(self.pipe.schedule):
            batch = sched.get_next_batch_to_run()
            disable_overlap = self.is_disable_overlap_for_batch(batch)
            processed = False
            if disable_overlap and batch is not None:
                self.disabled_overlaps += 1
                processed = self.pop_and_process()
                batch.filter_finished()  # requests the processed result finished do not run again
                if batch.is_empty():
                    batch = None
            if batch is not None:
                launch = self.pipe.launch_verify if sched.speculating(batch) else self.pipe.launch  # after any processing
                launched, record = launch(batch)
                sched.steps.append(record)
                self.result_queue.append(launched)
            if not disable_overlap:
                while len(self.result_queue) > (1 if batch is not None else 0):
                    processed = self.pop_and_process() or processed
            self.last_batch = batch
            drained = sched._drain(self.on_finish)
            # Nothing ran, nothing was in flight to free memory, nothing finished: stuck for good.
            if batch is None and not processed and not drained and sched.has_work():
                sched._abort_unschedulable()


def run_overlap_loop(sched: Scheduler, on_finish: Callable[[Req], None] | None = None) -> None:
    """Run the overlap loop until no request is waiting, running or in flight."""
    loop = OverlapLoop(sched, on_finish)
    while loop.busy():
        loop.step()
