"""Offline engine API: `Engine(...).generate(prompts, sampling_params)` → token ids, text, finish reason, timings."""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Sequence

import torch

from scheduler_core.batch import FinishReason, Req
from scheduler_core.device import CpuDevice, Device
from scheduler_core.disagg import BACKENDS, run_distributed, run_inproc
from scheduler_core.grammar import Grammar, GrammarBackend
from scheduler_core.model.loader import LoadedModel, load_model
from scheduler_core.overlap import default_device_and_policy
from scheduler_core.platform import ActivePolicy
from scheduler_core.policy import POLICIES
from scheduler_core.sampling import SamplingParams
from scheduler_core.scheduler import Scheduler, SchedulerConfig
from scheduler_core.spec import SpecConfig


@dataclass
class GenerateOutput:
    index: int  # position in the prompts list
    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    finish_reason: FinishReason
    error: str | None = None  # set when the request was refused; the others still run
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)
    cached_tokens: int = 0
    retractions: int = 0


class Engine:
    def __init__(self, model: str | LoadedModel = "smollm2-135m", device: str = "cpu", max_running_requests: int = 32,
                 kv_tokens: int = 16384, chunked_prefill_size: int | None = 1024, max_prefill_tokens: int = 4096,
                 schedule_policy: str = "fcfs", enable_radix_cache: bool = True,
                 dtype: torch.dtype = torch.float32, seed: int = 0, check_invariants: bool = True,
                 num_threads: int | None = None, cascade_min_prefix: int = 32,
                 enable_mixed_chunk: bool = True, overlap: bool = True, disaggregation: str | None = None,
                 sync_policy: ActivePolicy | None = None, streams: Device | None = None,
                 speculative: SpecConfig | None = None) -> None:
        if schedule_policy not in POLICIES:
            raise ValueError(f"unknown schedule_policy {schedule_policy!r}; expected one of {', '.join(POLICIES)}")
        if max_running_requests <= 0 or kv_tokens <= 0:
            raise ValueError("max_running_requests and kv_tokens must be positive")
        if chunked_prefill_size is not None and chunked_prefill_size <= 0:
            raise ValueError("chunked_prefill_size must be positive or None")
        if num_threads is not None:
            # On a shared CPU, fewer intra-op threads than cores avoids OpenMP spin-wait stalls.
            torch.set_num_threads(num_threads)
        self.device = torch.device(device)
        if isinstance(model, LoadedModel):  # share one loaded model between engines (tests, benches)
            self.loaded, self.model_name = model, model.source
        else:
            self.loaded, self.model_name = load_model(model, self.device, dtype, seed), model
        # The projections' packed copies now, for this thread count, not during the first requests.
        self.loaded.model.pack_weights()
        self.tokenizer = self.loaded.tokenizer
        self.config = SchedulerConfig(
            max_running_requests=max_running_requests, kv_tokens=kv_tokens,
            chunked_prefill_size=chunked_prefill_size, max_prefill_tokens=max_prefill_tokens,
            schedule_policy=schedule_policy, enable_radix_cache=enable_radix_cache,
            cascade_min_prefix=cascade_min_prefix, enable_mixed_chunk=enable_mixed_chunk, speculative=speculative)
        if disaggregation not in (None, *BACKENDS):
            raise ValueError(f"unknown disaggregation {disaggregation!r}; expected None or one of {', '.join(BACKENDS)}")
        # Overlap: batch N+1 is scheduled while batch N runs (overlap.py); disaggregation: a prefill
        # scheduler hands KV + first token to a decode scheduler (disagg.py), in-process or over
        # torch.distributed. The sync policy and device facade default to the platform's.
        self.overlap, self.disaggregation = overlap, disaggregation
        if streams is None or sync_policy is None:
            default_streams, default_sync = default_device_and_policy(self.device)
            streams, sync_policy = streams or default_streams, sync_policy or default_sync
        self.sync_policy, self.streams = sync_policy, streams
        self.scheduler = Scheduler(self.loaded, self.config, self.device, streams=streams, sync_policy=sync_policy)
        # The decode side of in-process disaggregation (self.scheduler is the prefill side).
        self.decode_scheduler = (Scheduler(self.loaded, self.config, self.device, streams=streams,
                                           sync_policy=sync_policy) if disaggregation == "inproc" else None)
        self.check_invariants = check_invariants
        self._rids = itertools.count()

    @cached_property
    def grammar_backend(self) -> GrammarBackend:
        """Compiles constraints against this engine's tokenizer (the vocabulary is read once)."""
        return GrammarBackend(self.tokenizer, self.loaded.config.vocab_size)

    def settings(self) -> dict[str, object]:
        """Engine settings, for a results document's context."""
        c = self.config
        return {"model": self.model_name, "model_name": self.loaded.config.name,
                "max_running_requests": c.max_running_requests, "kv_tokens": c.kv_tokens,
                "chunked_prefill_size": c.chunked_prefill_size, "max_prefill_tokens": c.max_prefill_tokens,
                "schedule_policy": c.schedule_policy, "radix_cache": c.enable_radix_cache,
                "cascade_min_prefix": c.cascade_min_prefix, "mixed_chunk": c.enable_mixed_chunk,
                "device": str(self.device), "dtype": str(next(self.loaded.model.parameters()).dtype),
                "overlap": self.overlap, "disaggregation": self.disaggregation,
                "num_threads": torch.get_num_threads(), **self.sync_policy.as_context(),
                # only when on, so the context (and the series it keys) of every other run is unchanged
                **({"speculative": dataclasses.asdict(c.speculative)} if c.speculative is not None else {}),
                **({"clock": "process"} if isinstance(self.streams, CpuDevice) and self.streams.clock == "process"
                   else {})}

    def flush_cache(self) -> None:
        """Drop every unlocked prefix-cache entry (between benchmark repeats)."""
        for sched in (self.scheduler, self.decode_scheduler):
            if sched is not None:
                sched.pools.tree.evict(self.config.kv_tokens)

    def validate(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Raises ValueError naming the problem with one request."""
        if not prompt_ids:
            raise ValueError("empty prompt: a request needs at least one prompt token")
        context = self.loaded.config.max_context
        if len(prompt_ids) >= context:
            raise ValueError(f"prompt has {len(prompt_ids)} tokens, longer than the model context of {context} "
                             "(at least one token must be left to generate)")
        if len(prompt_ids) >= self.config.kv_tokens:
            raise ValueError(f"prompt has {len(prompt_ids)} tokens, more than the KV pool of "
                             f"{self.config.kv_tokens} slots")
        vocab = self.loaded.config.vocab_size
        if any(not 0 <= t < vocab for t in prompt_ids):
            raise ValueError(f"prompt token ids must be in [0, {vocab})")
        params.validate()

    def generate(self, prompts: Sequence[str] | Sequence[list[int]],
                 sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
                 on_finish: Callable[[GenerateOutput], None] | None = None,
                 grammars: Sequence[Grammar | None] | None = None,
                 priorities: Sequence[int] | None = None) -> list[GenerateOutput]:
        """Run all prompts through continuous batching. Bad requests come back with `error` set and
        finish reason "abort"; the rest are served normally. ``grammars[i]`` constrains prompt i's
        output (``engine.grammar_backend.regex(...)`` / ``.json_schema(...)``); ``priorities[i]`` is its
        priority under ``schedule_policy="priority"`` (higher first)."""
        if priorities is not None and len(priorities) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(priorities)} priorities")
        if grammars is not None and len(grammars) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(grammars)} grammars")
        if isinstance(prompts, str):
            raise TypeError("prompts must be a list of strings or of token-id lists, not one string")
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(prompts)
        else:
            params = list(sampling_params)
            if len(params) != len(prompts):
                raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        outputs: list[GenerateOutput | None] = [None] * len(prompts)
        index: dict[int, int] = {}
        start = self.streams.now()  # the clock token times use: wall time, or the simulator's virtual time
        for i, (prompt, p) in enumerate(zip(prompts, params)):
            ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
            try:
                self.validate(ids, p)
            except ValueError as exc:
                outputs[i] = GenerateOutput(i, ids, [], "", FinishReason("abort", message=str(exc)), error=str(exc))
                continue
            req = Req(rid=next(self._rids), input_ids=ids, sampling=p,
                      prompt=prompt if isinstance(prompt, str) else None, arrival=start,
                      grammar=None if grammars is None else grammars[i],
                      priority=0 if priorities is None else int(priorities[i]))
            index[req.rid] = i
            self.scheduler.add_request(req)

        def finished(req: Req) -> None:
            out = self._output(index[req.rid], req)
            outputs[index[req.rid]] = out
            if on_finish is not None:
                on_finish(out)

        self._run(finished)
        if self.check_invariants:
            self.scheduler.pools.check_idle_invariant()
            if self.decode_scheduler is not None:
                self.decode_scheduler.pools.check_idle_invariant()
        return [o for o in outputs if o is not None]

    def _run(self, finished: Callable[[Req], None]) -> None:
        if self.disaggregation == "inproc":
            run_inproc(self.scheduler, self.decode_scheduler, self.overlap, finished)
        elif self.disaggregation == "torch.distributed":
            reqs, self.scheduler.waiting = self.scheduler.waiting, []
            done, _ = run_distributed(self.loaded, self.config, str(self.device), self.overlap, reqs,
                                      num_threads=torch.get_num_threads())
            for req in done:  # each rank checked its own pools before reporting
                finished(req)
        elif self.overlap:
            self.scheduler.event_loop_overlap(finished)
        else:
            self.scheduler.event_loop_normal(finished)

    @staticmethod
    def _output(i: int, req: Req) -> GenerateOutput:
        times = req.token_times
        return GenerateOutput(
            index=i, prompt_ids=req.input_ids, output_ids=list(req.output_ids), text=req.text,
            finish_reason=req.finish_reason,
            error=req.finish_reason.message if req.finish_reason.kind == "abort" else None,
            ttft_s=times[0] - req.arrival if times else None,
            itl_s=[b - a for a, b in zip(times, times[1:])], margins=list(req.margins),
            cached_tokens=req.cached_tokens, retractions=req.retractions)
