"""The simulator's C++ core (``scheduler_core/sim/native_core.cpp``) against its Python reference.

The pinned results (test_pinned_results.py) run whole engines on both hot paths; here the two race
detectors take the same 1,000 seeded random programs of stream operations, allocations, frees,
names, record_stream and read-done claims, and must report the same hazards after every step. Also:
where the core cannot be built the simulator says why and runs on Python; a bad setting is refused.
"""
from __future__ import annotations

import gc
import logging
import random
import weakref
from typing import Iterator

import pytest
import torch

from scheduler_core import cpu_kernels
from scheduler_core.cpu_kernels import ops_observed
from scheduler_core.decode_attention import gathered_decode_attention
from scheduler_core.platform import Platform, PlatformError
from scheduler_core.sim import device as device_module
from scheduler_core.sim import native
from scheduler_core.sim.device import SimDevice
from scheduler_core.sim.race import HOST, Hazard, RaceDetector, format_stack
from scheduler_core.sim.timeline import NativeTimeline, Timeline

from .conftest import cpp_compiler

PROGRAMS = 1000
KEYS = (11, 12, 13, 14)


def random_program(rng: random.Random) -> tuple[int, list[tuple]]:
    streams = rng.randint(2, 4)
    actions: list[tuple] = []
    events = 0
    for step in range(rng.randint(6, 40)):
        kind = rng.choices(["op", "host_op", "record", "wait_event", "wait_stream", "sync_event", "sync_stream",
                            "sync_device", "allocate", "free", "name", "record_stream", "reads_done", "fresh"],
                           [10, 2, 2, 2, 2, 1, 1, 0.3, 1, 2, 0.5, 0.7, 1, 1])[0]
        s = rng.randint(1, streams)
        key = rng.choice(KEYS)
        stack = (f"program.py:{step} in step{step}",)
        if kind in ("op", "host_op"):
            reads = rng.sample(KEYS, rng.randint(0, 3))
            writes = rng.sample(KEYS, rng.randint(0, 2))  # may overlap the reads, as an in-place op's do
            actions.append(("op", HOST if kind == "host_op" else s, reads, writes, stack))
        elif kind == "fresh":
            actions.append(("fresh", s, rng.sample(KEYS, rng.randint(0, 1)), key, stack))
        elif kind == "record":
            actions.append(("record", s, events))
            events += 1
        elif kind in ("wait_event", "sync_event", "reads_done"):
            if events:
                actions.append((kind, s, rng.randrange(events), rng.sample(KEYS, rng.randint(1, 2)), stack))
        elif kind == "wait_stream":
            actions.append(("wait_stream", s, rng.choice([t for t in range(1, streams + 1) if t != s])))
        elif kind == "sync_stream":
            actions.append(("sync_stream", s))
        elif kind == "sync_device":
            actions.append(("sync_device",))
        elif kind == "allocate":
            actions.append(("allocate", key, rng.choice([HOST, s]), rng.choice([None, f"buffer{key}"])))
        elif kind == "free":
            actions.append(("free", key, stack))
        elif kind == "name":
            actions.append(("name", key, f"named{key}"))
        else:
            actions.append(("record_stream", key, s))
    return streams, actions


def run(detector, streams: int, actions: list[tuple]) -> list[list[tuple]]:
    """The hazards each action returned (ops, frees) and, at the end, every hazard reported."""
    for i in range(streams):
        assert detector.new_stream(f"s{i + 1}") == i + 1
    events: dict[int, tuple] = {}
    returned: list[list[tuple]] = []
    for index, action in enumerate(actions):
        kind = action[0]
        if kind == "op":
            returned.append(_rows(detector.op(action[1], f"op{index}", list(action[2]), list(action[3]), action[4])))
        elif kind == "fresh":
            fresh = [(action[3], f"fresh{index}")]
            returned.append(_rows(detector.op(action[1], f"op{index}", list(action[2]), [], action[4], fresh)))
        elif kind == "record":
            events[action[2]] = detector.record(action[1])
        elif kind == "wait_event":
            detector.wait_event(action[1], events[action[2]])
        elif kind == "sync_event":
            detector.sync_event(events[action[2]])
        elif kind == "reads_done":
            detector.reads_done(action[1], events[action[2]], list(action[3]), action[4])
        elif kind == "wait_stream":
            detector.wait_stream(action[1], action[2])
        elif kind == "sync_stream":
            detector.sync_stream(action[1])
        elif kind == "sync_device":
            detector.sync_device()
        elif kind == "allocate":
            detector.allocate(action[1], action[2], action[3])
        elif kind == "free":
            returned.append(_rows(detector.free(action[1], f"free{index}", action[2])))
        elif kind == "name":
            detector.name(action[1], action[2])
        else:
            detector.record_stream(action[1], action[2])
    returned.append(_rows(detector.hazards))
    return returned


def _rows(hazards: list[Hazard]) -> list[tuple]:
    return [(h.kind, h.buffer, h.first_op, h.first_stream, h.first_stack, h.second_op, h.second_stream,
             h.second_stack) for h in hazards]


@pytest.fixture(scope="module")
def core():
    if not cpp_compiler():
        pytest.skip("no C++ compiler: nothing to compare")
    module = native.core()
    assert module is not None, "the simulator's C++ core did not build (see the warning above)"
    return module


def test_the_cpp_detector_reports_what_the_python_one_does_on_1000_random_programs(core) -> None:
    rng = random.Random(31)
    kinds = set()
    for _ in range(PROGRAMS):
        streams, actions = random_program(rng)
        expected = run(RaceDetector(), streams, actions)
        got = run(core.Detector(format_stack=format_stack, hazard=Hazard, stack_factory=None, label=None),
                  streams, actions)
        assert got == expected, actions
        kinds |= {row[0] for row in expected[-1]}
    # The programs reach every kind of report, so agreeing is not agreeing on silence.
    assert kinds == {"read-after-write", "write-after-read", "write-after-write", "use-after-free",
                     "read-after-read-done"}


def test_the_cpp_timeline_answers_extent_and_idle_time_as_the_python_one_does(core) -> None:
    rng = random.Random(7)
    for _ in range(200):
        python, cpp = Timeline(), NativeTimeline(core.Spans(True))
        for _ in range(rng.randrange(0, 40)):
            track, start = rng.choice(["forward", "copy", "host"]), rng.uniform(0, 100)
            end, issued = start + rng.choice([0.0, rng.uniform(0, 9)]), rng.choice([0.0, 1.5, rng.uniform(0, 100)])
            python.host_us = cpp.host_us = issued
            python.add(track, "op", start, end)
            cpp.add(track, "op", start, end)
        for _ in range(5):
            track, lo = rng.choice(["forward", "copy", "schedule"]), rng.choice([0.0, 1.5, rng.uniform(0, 100)])
            hi = lo + rng.uniform(-5, 60)
            assert cpp.idle_gaps(track, lo, hi) == python.idle_gaps(track, lo, hi)
            try:
                expected: object = python.extent(track, lo)
            except ValueError as error:
                expected = str(error)
            try:
                got: object = cpp.extent(track, lo)
            except ValueError as error:
                got = str(error)
            assert got == expected


def _views_and_copies(inference: bool) -> list[tuple]:
    """Views, and ops that are views only when they can be (``reshape`` of a transposed tensor
    copies), on device memory; the spans the simulator recorded."""
    device = SimDevice(Platform("sim", "cuda-h100"))
    x = torch.arange(24.0).reshape(4, 6)
    with torch.inference_mode(inference):
        with device.stream(device.current_stream()):
            device.mark_device(x)
            t = x.t()
            parts = [t.reshape(-1), t.flatten(), x.unsqueeze(0).expand(3, 4, 6).contiguous(),
                     x.narrow(1, 2, 3).unsqueeze(-1) * 1,
                     x.permute(1, 0).contiguous(), x.unflatten(1, (2, 3)).sum(), x[1:3, ::2] * 2,
                     *x.split(2, dim=1), x.select(0, 1) + 1]
            del parts
    return device.timeline.signature()


@pytest.mark.parametrize("inference", [True, False], ids=["inference", "autograd"])
def test_the_core_sees_views_and_the_copies_some_of_them_make_as_python_does(
        core, monkeypatch: pytest.MonkeyPatch, inference: bool) -> None:
    """The core lets the dispatcher pass plain views by its hook (they record nothing); a view that
    may copy (a math kernel: ``reshape``, ``flatten``) must still be seen whole, as the Python
    mode sees it, and not as the copy inside it."""
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    expected = _views_and_copies(inference)
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    assert _views_and_copies(inference) == expected
    # Under autograd the copies are seen as clones; under inference mode neither path sees them
    # (docs/sim.md, known limits), but both see the arithmetic on the views.
    assert [name for _, name, _, _ in expected].count("clone") == (0 if inference else 4)
    assert {"mul.Tensor", "sum", "add.Tensor"} <= {name for _, name, _, _ in expected}


def test_plain_views_pass_the_hook_by_and_views_that_may_copy_do_not(core) -> None:
    def hook_entry(op: str) -> str:
        return next(line for line in torch._C._dispatch_dump_table(op).splitlines()
                    if line.startswith("TESTING_ONLY_GenericMode:"))
    for view in ("aten::transpose.int", "aten::view", "aten::unsqueeze", "aten::split.Tensor", "aten::select.int"):
        assert "fallthrough" in hook_entry(view), view
    for op in ("aten::reshape", "aten::flatten.using_ints", "aten::contiguous", "aten::add.Tensor"):
        assert "backend fallback" in hook_entry(op), op


def _decode_batch(lens: list[int], span: int, heads: int = 6, kv_heads: int = 2, head_dim: int = 40) -> tuple:
    """A decode batch as the model builds it under the simulator (``Attention._attend``)."""
    generator = torch.Generator().manual_seed(sum(lens) * 7 + span)
    q = torch.randn((len(lens), 1, heads, head_dim), generator=generator).transpose(1, 2)
    rows_k = torch.randn((len(lens), span, kv_heads, head_dim), generator=generator)
    rows_v = torch.randn((len(lens), span, kv_heads, head_dim), generator=generator)
    mask = (torch.arange(span)[None, :] < torch.tensor(lens)[:, None]).view(len(lens), 1, 1, span)
    return q, rows_k.transpose(1, 2), rows_v.transpose(1, 2), mask


def _sdpa_on_the_device(q, keys, values, mask) -> torch.Tensor:
    device = SimDevice(Platform("sim", "cuda-h100"))
    with torch.inference_mode(), device.stream(device.current_stream()):  # as the model runs
        for t in (q, keys, values, mask):
            device.mark_device(t)
        return torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)


@pytest.mark.parametrize("lens,span", [([5, 1, 3], 5), ([1], 1), ([9, 9, 2, 7], 9)])
@pytest.mark.usefixtures("one_torch_thread")
def test_the_cores_decode_attention_is_the_python_routes_bit_for_bit(
        core, monkeypatch: pytest.MonkeyPatch, lens: list[int], span: int) -> None:
    batch = _decode_batch(lens, span)
    expected = gathered_decode_attention(*batch)
    assert expected is not None
    python_calls: list[tuple] = []
    monkeypatch.setattr(device_module, "gathered_decode_attention", lambda *a: python_calls.append(a))
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    assert torch.equal(_sdpa_on_the_device(*batch), expected)
    assert python_calls == []  # computed in the core, not by a call back into Python


@pytest.mark.usefixtures("one_torch_thread")
def test_a_mask_the_kernel_cannot_take_is_left_to_torch_by_the_core(core, monkeypatch: pytest.MonkeyPatch) -> None:
    q, keys, values, mask = _decode_batch([4, 2, 3], 4)
    mask[1, 0, 0] = torch.tensor([1, 0, 1, 0], dtype=torch.bool)  # a hole: no prefix
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    expected = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
    assert torch.equal(_sdpa_on_the_device(q, keys, values, mask), expected)


@pytest.mark.parametrize("rows,columns,routed", [(64, 96, False), (512, 512, True)], ids=["small", "prepacked"])
def test_only_a_projection_the_prepacked_kernel_takes_is_routed_to_it(
        core, monkeypatch: pytest.MonkeyPatch, rows: int, columns: int, routed: bool) -> None:
    """Below ``PREPACK_MIN_ELEMENTS`` ``cpu_kernels.linear`` is F.linear: the core runs the op itself
    instead of calling into Python for it."""
    x = torch.randn(4, columns, generator=torch.Generator().manual_seed(3))
    weight = torch.randn(rows, columns, generator=torch.Generator().manual_seed(4))
    calls: list[tuple] = []
    monkeypatch.setattr(device_module, "linear", lambda *a: calls.append(a) or cpu_kernels.linear(*a))
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    device = SimDevice(Platform("sim", "cuda-h100"))
    with torch.inference_mode(), device.stream(device.current_stream()):
        device.mark_device(weight)
        got = torch.nn.functional.linear(x, weight)
    assert len(calls) == (1 if routed else 0)
    assert torch.equal(got, cpu_kernels.linear(x, weight))
    assert device.timeline.signature()[-1][1] == "linear"  # timed as the projection either way


def test_a_simulator_uses_the_core_where_it_builds(core, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    assert SimDevice(Platform("sim", "cuda-h100"))._core is not None
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    assert SimDevice(Platform("sim", "cuda-h100"))._core is None


def test_without_a_compiler_the_simulator_says_why_and_runs_on_python(
        tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("PARALLAX_KERNEL_CACHE", str(tmp_path / "cache"))
    native.core.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="scheduler_core.sim.native"):
            device = SimDevice(Platform("sim", "cuda-h100"))
        assert device._core is None
        assert "C++ core is unavailable: no C compiler" in caplog.text and "no-such-compiler" in caplog.text
        assert "(set CXX)" in caplog.text
    finally:
        native.core.cache_clear()


def test_a_bad_hot_path_setting_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(native.NATIVE_ENV, "yes")
    with pytest.raises(PlatformError, match="PARALLAX_SIM_NATIVE='yes': use 1"):
        SimDevice(Platform("sim", "cuda-h100"))


def _open_a_step_and_return(device: SimDevice) -> None:
    """Enters a host step in a generator and returns with it suspended inside (this frame enters it)."""
    def step() -> Iterator[None]:
        with device.stream(device.current_stream()):
            yield
    steps = step()
    next(steps)


def test_a_step_left_open_in_an_abandoned_generator_ends_when_it_is_collected(core, monkeypatch) -> None:
    # The C++ core only: on the Python path torch's stack of dispatch modes holds the open step's
    # mode, and with it the device, until the step is closed by hand.
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    device = SimDevice(Platform("sim", "cuda-h100"), noise=False)
    _open_a_step_and_return(device)
    assert ops_observed()
    # The step's frame, its generator and the device refer to each other: garbage once the device is
    # dropped, which the collector must be able to see whole to close the step.
    collected = weakref.ref(device)
    del device
    gc.collect()
    assert collected() is None
    assert not ops_observed()  # the step ended: nothing watches this thread's ops any more


def _paged_batch(lens: list[int], span: int, slots: int = 64, kv_heads: int = 2, head_dim: int = 40) -> tuple:
    """A KV cache, each request's slots padded to ``span`` (padding reads slot 0), and the flat
    index the model gathers with (``Attention._attend``)."""
    generator = torch.Generator().manual_seed(sum(lens) * 11 + span)
    k_cache = torch.randn((slots, kv_heads, head_dim), generator=generator)
    v_cache = torch.randn((slots, kv_heads, head_dim), generator=generator)
    index = torch.zeros((len(lens), span), dtype=torch.int64)
    for b, n in enumerate(lens):
        index[b, :n] = torch.randperm(slots - 1, generator=generator)[:n] + 1
    return k_cache, v_cache, index.reshape(-1)


def _gathered_attention_on_the_device(q, k_cache, v_cache, index, mask) -> tuple[torch.Tensor, list]:
    batch, span = mask.shape[0], mask.shape[3]
    device = SimDevice(Platform("sim", "cuda-h100"))
    with torch.inference_mode(), device.stream(device.current_stream()):
        for t in (q, k_cache, v_cache, index, mask):
            device.mark_device(t)
        shape = (batch, span, k_cache.shape[1], k_cache.shape[2])
        keys = torch.index_select(k_cache, 0, index).view(shape).transpose(1, 2)
        values = torch.index_select(v_cache, 0, index).view(shape).transpose(1, 2)
        out = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
    return out, device.timeline.signature()


@pytest.mark.parametrize("lens,span", [([5, 1, 3], 5), ([9, 9, 2, 7], 9)])
@pytest.mark.usefixtures("one_torch_thread")
def test_a_decode_batchs_gathers_are_timed_as_before_and_read_from_the_cache_bit_for_bit(
        core, monkeypatch: pytest.MonkeyPatch, lens: list[int], span: int) -> None:
    """The core records a decode batch's two gathers as they are but lets the attention kernel read
    the rows from the cache (no copy): the same values as the kernel on the copies, the same timeline
    as the Python path's."""
    k_cache, v_cache, index = _paged_batch(lens, span)
    q = torch.randn((len(lens), 1, 6, 40), generator=torch.Generator().manual_seed(5)).transpose(1, 2)
    mask = (torch.arange(span)[None, :] < torch.tensor(lens)[:, None]).view(len(lens), 1, 1, span)
    shape = (len(lens), span, 2, 40)
    expected = gathered_decode_attention(q, k_cache[index].view(shape).transpose(1, 2),
                                         v_cache[index].view(shape).transpose(1, 2), mask)
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    python_out, python_timeline = _gathered_attention_on_the_device(q, k_cache, v_cache, index, mask)
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    out, timeline = _gathered_attention_on_the_device(q, k_cache, v_cache, index, mask)
    assert torch.equal(python_out, expected) and torch.equal(out, expected)
    assert timeline == python_timeline
    assert [name for _, name, *_ in timeline].count("index_select") == 2


@pytest.mark.usefixtures("one_torch_thread")
def test_a_gather_another_op_reads_holds_the_cache_rows(core, monkeypatch: pytest.MonkeyPatch) -> None:
    k_cache, _, index = _paged_batch([7, 3], 7)
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    device = SimDevice(Platform("sim", "cuda-h100"))
    with torch.inference_mode(), device.stream(device.current_stream()):
        device.mark_device(k_cache)
        gathered = torch.index_select(k_cache, 0, index)
        doubled = gathered.view(2, 7, -1) * 2  # a view, then an op that reads the rows
    assert torch.equal(doubled, k_cache[index].view(2, 7, -1) * 2)


@pytest.mark.usefixtures("one_torch_thread")
def test_a_gather_read_after_its_step_holds_the_cache_rows(core, monkeypatch: pytest.MonkeyPatch) -> None:
    k_cache, _, index = _paged_batch([4, 6, 2], 6)
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    device = SimDevice(Platform("sim", "cuda-h100"))
    with torch.inference_mode(), device.stream(device.current_stream()):
        device.mark_device(k_cache)
        gathered = torch.index_select(k_cache, 0, index)
    assert torch.equal(gathered, k_cache[index])  # outside the step: nothing dispatches through the core


@pytest.mark.usefixtures("one_torch_thread")
def test_a_gather_holds_the_rows_from_before_a_later_write_to_its_source(core, monkeypatch: pytest.MonkeyPatch) -> None:
    k_cache, _, index = _paged_batch([5, 5], 5)
    before = k_cache[index].clone()
    monkeypatch.setenv(native.NATIVE_ENV, "1")
    device = SimDevice(Platform("sim", "cuda-h100"))
    with torch.inference_mode(), device.stream(device.current_stream()):
        device.mark_device(k_cache)
        gathered = torch.index_select(k_cache, 0, index)
        k_cache.index_copy_(0, index[:3], torch.zeros(3, 2, 40))  # the next token's K written, say
        doubled = gathered * 2
    assert torch.equal(doubled, before * 2)
