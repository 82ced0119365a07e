"""The scheduler: waiting queue, running batch, chunked request, and the normal (non-overlapped) event loop.

One step = pick the next batch (prefill first, else decode), run it (forward + sample, returning a
BatchResult), then process the result (append tokens, finish checks, free or cache memory). The
three stages are separate methods so that an overlapped loop can pipeline them later.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from scheduler_core.batch import FinishReason, Req, ScheduleBatch, release
from scheduler_core.device import CpuDevice, Device
from scheduler_core.grammar import apply_masks, grammar_masks
from scheduler_core.mem import KVAllocator, ReqToTokenPool
from scheduler_core.model.llama import KVCache
from scheduler_core.model.loader import LoadedModel
from scheduler_core.overlap import run_overlap_loop
from scheduler_core.platform import ActivePolicy
from scheduler_core.policy import PrefillAdder, order_waiting
from scheduler_core.pools import Pools
from scheduler_core.radix_cache import RadixCache
from scheduler_core.records import BatchResult, SpecResult, StepRecord
from scheduler_core.sampling import sample
from scheduler_core.spec import (
    Draft,
    NgramDraft,
    SpecConfig,
    SpecStats,
    can_speculate,
    draft_steps,
    has_room,
    make_draft,
    reserve,
    reserve_span,
    spec_result,
    verify,
)

# After a retraction, assume every running request still decodes this many steps (sglang's rule).
RETRACT_DECODE_STEPS = 20


@dataclass
class SchedulerConfig:
    max_running_requests: int = 32
    kv_tokens: int = 16384
    chunked_prefill_size: int | None = 1024
    max_prefill_tokens: int = 4096
    schedule_policy: str = "fcfs"
    enable_radix_cache: bool = True
    init_new_token_ratio: float = 0.7
    min_new_token_ratio: float = 0.1
    new_token_ratio_decay: float = 0.001
    # Decode batches whose requests share at least this many cached prefix tokens attend to them
    # once (cascade attention); 0 disables it.
    cascade_min_prefix: int = 32
    # Run the running requests' decode tokens inside a prefill batch (one forward instead of two):
    # on a CPU every forward is a full pass over the weights, whatever its size.
    enable_mixed_chunk: bool = True
    # Speculative decoding (spec.py): None decodes one token per request and step.
    speculative: SpecConfig | None = None
    # schedule_policy "priority": a waiting request preempts running ones whose priority is lower by
    # at least this much when it does not fit otherwise (upstream's preemption threshold).
    priority_preemption_threshold: int = 1


@dataclass
class Scheduler:
    loaded: LoadedModel
    config: SchedulerConfig
    device: torch.device
    waiting: list[Req] = field(default_factory=list)
    running: ScheduleBatch = field(default_factory=lambda: ScheduleBatch([]))
    chunked_req: Req | None = None
    steps: list[StepRecord] = field(default_factory=list)
    retracted_total: int = 0
    preempted_total: int = 0
    _finished: list[Req] = field(default_factory=list)
    # Overlap loops (overlap.py): the stream/event facade and the sync policy they obey (None: the
    # defaults for `device`), and whether an extend batch may overlap the extend batch before it.
    streams: Device | None = None
    sync_policy: ActivePolicy | None = None
    overlap_consecutive_prefill: bool = True

    def __post_init__(self) -> None:
        cfg, model_cfg = self.config, self.loaded.config
        allocator = KVAllocator(cfg.kv_tokens)
        dtype = next(self.loaded.model.parameters()).dtype
        self.pools = Pools(
            req_to_token=ReqToTokenPool(cfg.max_running_requests + 1, model_cfg.max_context, self.device,
                                        mirror=self.streams is not None and not self.streams.shares_host_memory
                                        or self.device.type != "cpu"),
            allocator=allocator,
            kv_cache=KVCache(model_cfg, cfg.kv_tokens, dtype, self.device),
            tree=RadixCache(allocator, disabled=not cfg.enable_radix_cache),
        )
        self.new_token_ratio = cfg.init_new_token_ratio
        self.draft: Draft | None = (make_draft(cfg.speculative, self.loaded, self.pools.kv_cache)
                                    if cfg.speculative is not None else None)
        self.spec_stats = SpecStats()
        if self.streams is not None:
            self._declare_device_memory(self.streams)

    def _declare_device_memory(self, streams: Device) -> None:
        """Tell the device facade which tensors are device memory, under their names."""
        pools = self.pools
        for tensor, name in ((pools.req_to_token.table, "req_to_token"), (pools.req_to_token.seq_lens, "seq_lens"),
                             (pools.kv_cache.k, "kv_cache.k"), (pools.kv_cache.v, "kv_cache.v")):
            streams.mark_device(tensor)
            streams.name_buffer(tensor, name)
        # Buffers too (the rotary cos/sin tables): on a GPU they live beside the weights, and a gather
        # from them is device work whichever loop built the positions it reads.
        for name, tensor in (*self.loaded.model.named_parameters(), *self.loaded.model.named_buffers()):
            streams.mark_device(tensor)
            streams.name_buffer(tensor, name)

    # -- requests -----------------------------------------------------------------------------
    def add_request(self, req: Req) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.chunked_req or not self.running.is_empty())

    # -- scheduling ---------------------------------------------------------------------------
    def get_next_batch_to_run(self) -> ScheduleBatch | None:
        self._abort_waiting()
        self._preempt_for_priority()
        if self.config.enable_mixed_chunk and not self.running.is_empty() and (self.waiting or self.chunked_req):
            self._update_running_batch()  # the decode slots come first; new requests get the rest
            batch = self._get_new_batch_prefill(decode_reserve=len(self.running))
            if batch is not None and not self.running.is_empty():
                for req in self.running.reqs:
                    req.extend_len = 1
                batch = ScheduleBatch(batch.reqs + self.running.reqs, mode="extend", mixed=True)
            if batch is not None:
                return batch
            return None if self.running.is_empty() else self.running
        batch = self._get_new_batch_prefill()
        if batch is not None:
            return batch
        if self.running.is_empty():
            return None
        self._update_running_batch()
        return None if self.running.is_empty() else self.running

    def _preempt_for_priority(self) -> None:
        """Priority scheduling with preemption: while the most important waiting request does not
        fit (a request row, ``max_running_requests``, its KV plus a decode slot per running request)
        and a running request is less important by the threshold, that one (the least important,
        newest first) goes back to the waiting queue with its tokens so far, its KV freed, as a
        retraction (an in-flight result for it is stale)."""
        if self.config.schedule_policy != "priority" or not self.waiting or self.chunked_req is not None:
            return
        head = max(self.waiting, key=lambda r: r.priority)
        while self.running.reqs:
            victim = min(self.running.reqs, key=lambda r: (r.priority, -r.arrival, -r.rid))
            if head.priority - victim.priority < self.config.priority_preemption_threshold or self._fits(head):
                return
            self.running.reqs.remove(victim)
            release(victim, self.pools, cache=False)
            victim.retractions += 1
            self.preempted_total += 1
            self.waiting.append(victim)

    def _fits(self, req: Req) -> bool:
        pools = self.pools
        return (pools.req_to_token.available() > 0 and len(self.running) < self.config.max_running_requests
                and pools.can_alloc(req.seq_len + len(self.running)))

    def _abort_waiting(self) -> None:
        for req in [r for r in self.waiting if r.to_abort is not None]:
            self.waiting.remove(req)
            req.check_finished(self.loaded.tokenizer, self.loaded.config.max_context)
            self._finished.append(req)

    def _get_new_batch_prefill(self, decode_reserve: int = 0) -> ScheduleBatch | None:
        if not self.waiting and self.chunked_req is None:
            return None
        max_new = self.config.max_running_requests - len(self.running)
        if max_new <= 0:
            return None
        adder = PrefillAdder(self.pools, self.running.reqs, self.new_token_ratio,
                             self.config.max_prefill_tokens, self.config.chunked_prefill_size, max_new,
                             decode_reserve=decode_reserve)
        if self.chunked_req is not None:
            resumed = adder.add(self.chunked_req)
            if not adder.can_run:
                return None
        else:
            resumed = True
        if resumed:
            for req in order_waiting(self.waiting, self.config.schedule_policy, self.pools):
                if not adder.add(req):
                    break
        if not adder.can_run:
            return None
        admitted = set(map(id, adder.can_run))
        self.waiting = [r for r in self.waiting if id(r) not in admitted]
        self.chunked_req = adder.chunked
        return ScheduleBatch(adder.can_run, mode="extend")

    def _update_running_batch(self) -> None:
        """Make sure every running request gets a KV slot this step, retracting if the pool is short."""
        if self.pools.can_alloc(len(self.running)):
            self.new_token_ratio = max(self.new_token_ratio - self.config.new_token_ratio_decay,
                                       self.config.min_new_token_ratio)
            return
        retracted = self.running.retract_decode(self.pools)
        if not self.pools.can_alloc(len(self.running)):
            # A single request that no longer fits the whole pool cannot make progress.
            req = self.running.reqs[0]
            req.finish_reason = FinishReason(
                "abort", message=f"KV pool exhausted: {self.config.kv_tokens} slots cannot hold {req.seq_len} tokens")
            release(req, self.pools, cache=False)
            self._finished.append(req)
            self.running.reqs = []
        self.retracted_total += len(retracted)
        self.waiting = retracted[::-1] + self.waiting
        reqs = self.running.reqs
        if reqs:
            decoded = sum(len(r.output_ids) for r in reqs)
            budget = sum(r.sampling.max_new_tokens for r in reqs)
            self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(reqs)) / budget)

    def speculating(self, batch: ScheduleBatch | None) -> bool:
        """True when ``batch`` runs as a speculative verify step: greedy, unconstrained decode requests
        with room for the step's KV reservation (``spec.has_room``); else it decodes normally."""
        return (self.draft is not None and batch is not None and can_speculate(batch)
                and has_room(batch.reqs, self.pools, self.draft.config, self.loaded.config.max_context))

    # -- running ------------------------------------------------------------------------------
    def run_batch(self, batch: ScheduleBatch) -> BatchResult:
        if self.speculating(batch):
            return self.run_verify(batch)
        start = time.perf_counter()
        started = self.streams.now() if self.streams is not None else start
        if batch.mode == "extend":
            forward_batch = batch.prepare_for_extend(self.pools, self.device)
        else:
            forward_batch = batch.prepare_for_decode(self.pools, self.device, self.config.cascade_min_prefix)
        logits = self.loaded.model(forward_batch, self.pools.kv_cache)
        rows = [i for i, r in enumerate(batch.reqs) if r.prefill_done]
        tokens: list[int | None] = [None] * len(batch.reqs)
        margins: list[float | None] = [None] * len(batch.reqs)
        if rows:
            picked = [batch.reqs[i] for i in rows]
            picked_logits = apply_masks(logits[rows] if len(rows) < len(batch.reqs) else logits,
                                        grammar_masks(picked, logits.shape[-1], self.device))
            ids, gaps = sample(picked_logits, [r.sampling for r in picked], [r.generator for r in picked])
            for i, tok, gap in zip(rows, ids, gaps):
                tokens[i], margins[i] = tok, gap
        seconds = time.perf_counter() - start
        shared = 0 if forward_batch.prefix_slots is None else forward_batch.prefix_slots.numel()
        self.steps.append(StepRecord(batch.mode, len(batch.reqs), forward_batch.input_ids.numel(), seconds, shared,
                                     batch.mixed, started))
        return BatchResult(tokens, margins, seconds)

    def run_verify(self, batch: ScheduleBatch) -> BatchResult:
        """A speculative step of the normal loop: draft, verify in one forward, accept (spec.py)."""
        assert self.draft is not None
        start = time.perf_counter()
        started = self.streams.now() if self.streams is not None else start
        reqs, pools, span = batch.reqs, self.pools, reserve_span(self.draft.config)
        lens = [r.kv_len for r in reqs]
        reserve(reqs, pools, lens, span)
        steps = draft_steps(reqs, self.draft.config)
        rows = torch.tensor([r.req_pool_idx for r in reqs], device=self.device)
        kv_table = pools.req_to_token.table[rows, : max(lens) + steps + 1]
        drafts = draft_lens = None
        if isinstance(self.draft, NgramDraft):
            drafts, draft_lens = (t.to(self.device) for t in self.draft.propose(reqs))
        out = verify(self.loaded, pools.kv_cache, self.draft, kv_table,
                     torch.tensor([r.output_ids[-1] for r in reqs], device=self.device),
                     torch.tensor(lens, device=self.device), steps, drafts, draft_lens)
        seconds = time.perf_counter() - start
        self.steps.append(StepRecord("decode", len(reqs), len(reqs) * (steps + 1), seconds, 0, False, started))
        return spec_result(out.tokens.tolist(), out.margins.tolist(), out.accepted.tolist(), out.new_seq_lens.tolist(),
                           seconds)

    def process_batch_result(self, batch: ScheduleBatch, result: BatchResult) -> None:
        now = self.streams.now() if self.streams is not None else time.perf_counter()  # virtual on the simulator
        tokenizer, max_context = self.loaded.tokenizer, self.loaded.config.max_context
        if result.spec is not None:
            self._process_spec_result(batch, result.spec, now)
            return
        for req, tok, gap in zip(batch.reqs, result.next_token_ids, result.margins):
            if tok is None or req.finished:  # overlap: a request that finished one batch earlier
                continue
            req.output_ids.append(tok)
            req.margins.append(gap)
            req.token_times.append(now)
            if req.grammar is not None:
                req.grammar.advance(tok)
            req.check_finished(tokenizer, max_context)
            if req.finished:
                release(req, self.pools, cache=True)
                self._finished.append(req)
        if batch.mode == "extend":
            # A request that got a token has finished its prefill (the chunked one has not); in a
            # mixed batch the running requests are already in the running batch.
            running = set(map(id, self.running.reqs))
            done = [r for r, tok in zip(batch.reqs, result.next_token_ids)
                    if tok is not None and not r.finished and id(r) not in running]
            self.running.merge(ScheduleBatch(done))
        self.running.filter_finished()

    def _process_spec_result(self, batch: ScheduleBatch, spec: SpecResult, now: float) -> None:
        """Append each request's produced tokens (up to its finish) and set its KV length to the
        device's; the slots reserved past it stay with their positions for the next verify step."""
        tokenizer, max_context = self.loaded.tokenizer, self.loaded.config.max_context
        for i, req in enumerate(batch.reqs):
            if req.finished or not spec.tokens[i]:  # finished earlier, or retracted while in flight
                continue
            appended = 0
            for tok, gap in zip(spec.tokens[i], spec.margins[i]):
                req.output_ids.append(tok)
                req.margins.append(gap)
                req.token_times.append(now)
                appended += 1
                req.check_finished(tokenizer, max_context)
                if req.finished:
                    break
            self.spec_stats.record(len(spec.tokens[i]) - 1, appended)
            req.kv_len = min(spec.new_kv_lens[i], req.seq_len)
            if req.finished:
                release(req, self.pools, cache=True)
                self._finished.append(req)
        self.running.filter_finished()

    # -- loops --------------------------------------------------------------------------------
    def event_loop_overlap(self, on_finish=None) -> None:
        """Like event_loop_normal, but batch N+1 is scheduled and launched before batch N's result is
        processed (see overlap.py)."""
        run_overlap_loop(self, on_finish)

    def event_loop_normal(self, on_finish=None) -> None:
        """Run until no request is waiting or running; `on_finish(req)` is called for each finished one."""
        streams = self.streams or CpuDevice()
        while self.has_work():
            # One host step on the current stream; the result is read synchronously, as .tolist() does.
            with streams.stream(streams.current_stream()):
                batch = self.get_next_batch_to_run()
                if batch is not None:
                    result = self.run_batch(batch)
                    streams.current_stream().synchronize()
                    self.process_batch_result(batch, result)
            drained = self._drain(on_finish)
            if batch is None and not drained and self.has_work():
                self._abort_unschedulable()

    def _abort_unschedulable(self) -> None:
        """Nothing runs and nothing can be admitted: refuse the head request so the others proceed."""
        req = self.chunked_req or self.waiting[0]
        if req is self.chunked_req:
            self.chunked_req = None
        else:
            self.waiting.pop(0)
        req.finish_reason = FinishReason("abort", message=(
            f"cannot schedule a request of {req.seq_len} tokens: KV pool has {self.config.kv_tokens} slots, "
            f"{self.pools.allocator.available()} free"))
        release(req, self.pools, cache=False)
        self._finished.append(req)

    def _drain(self, on_finish) -> int:
        finished, self._finished = self._finished, []
        for req in finished:
            if not req.text and req.finish_reason and req.finish_reason.kind != "stop_str":
                req.text = self.loaded.tokenizer.decode(req.output_ids)
            if on_finish is not None:
                on_finish(req)
        return len(finished)
