"""The device facade: CPU semantics, the recording wrapper, make_device, and real CUDA/HIP streams."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from scheduler_core.device import DEFAULT_STREAM, Call, CpuDevice, CudaDevice, RecordingDevice
from scheduler_core.devices import make_device
from scheduler_core.platform import Platform, PlatformError

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")


# --- CpuDevice ---------------------------------------------------------------------------------

def test_cpu_current_stream_starts_as_the_default():
    assert CpuDevice().current_stream().name == DEFAULT_STREAM


def test_cpu_stream_context_sets_and_restores_the_current_stream():
    device = CpuDevice()
    forward, copy = device.new_stream("forward"), device.new_stream("copy")
    with device.stream(forward):
        with device.stream(copy):
            assert device.current_stream() is copy
        assert device.current_stream() is forward
    assert device.current_stream().name == DEFAULT_STREAM


def test_cpu_stream_context_restores_after_an_exception():
    device = CpuDevice()
    with pytest.raises(RuntimeError), device.stream(device.new_stream("forward")):
        raise RuntimeError("boom")
    assert device.current_stream().name == DEFAULT_STREAM


def test_cpu_current_stream_is_per_thread():
    device = CpuDevice()
    seen: list[str] = []
    with device.stream(device.new_stream("forward")):
        worker = threading.Thread(target=lambda: seen.append(device.current_stream().name))
        worker.start()
        worker.join()
    assert seen == [DEFAULT_STREAM]


def test_cpu_events_are_complete_when_recorded():
    device = CpuDevice()
    forward = device.new_stream("forward")
    event = forward.record_event()
    assert event.query() is True
    event.synchronize()  # returns at once
    device.new_stream("schedule").wait_event(event)
    device.current_stream().wait_stream(forward)
    device.synchronize()


def test_cpu_to_host_is_a_copy_not_an_alias():
    device = CpuDevice()
    source = torch.tensor([1, 2, 3])
    host = device.to_host(source)
    source.fill_(0)
    assert host.tolist() == [1, 2, 3]


def test_cpu_to_host_into_a_buffer_fills_it():
    device = CpuDevice()
    out = device.empty_pinned((3,), torch.int64)
    assert device.to_host(torch.tensor([4, 5, 6]), out) is out
    assert out.tolist() == [4, 5, 6]


def test_cpu_copy_writes_the_destination():
    device = CpuDevice()
    dst = torch.zeros(2)
    device.copy_(dst, torch.ones(2))
    assert dst.tolist() == [1.0, 1.0]


def test_cpu_clock_is_the_wall_clock_by_default(monkeypatch):
    monkeypatch.delenv("PARALLAX_HOST_CLOCK", raising=False)
    device = CpuDevice()
    start = device.now()
    time.sleep(0.05)
    assert device.clock == "wall" and device.now() - start >= 0.05


def test_cpu_process_clock_does_not_count_time_the_process_was_not_running(monkeypatch):
    monkeypatch.setenv("PARALLAX_HOST_CLOCK", "process")
    device = CpuDevice()
    start, wall = device.now(), time.perf_counter()
    time.sleep(0.2)
    assert device.clock == "process"
    assert device.now() - start < 0.5 * (time.perf_counter() - wall)


def test_cpu_process_clock_counts_work():
    device = CpuDevice(clock="process")
    start = device.now()
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    assert device.now() - start >= 0.05


def test_an_unknown_host_clock_is_refused_by_name(monkeypatch):
    monkeypatch.setenv("PARALLAX_HOST_CLOCK", "cpu-cycles")
    with pytest.raises(PlatformError, match=r"PARALLAX_HOST_CLOCK='cpu-cycles' is not a host clock; expected one "
                                            r"of wall, process"):
        CpuDevice()


def test_cpu_pinning_is_plain_host_memory():
    device = CpuDevice()
    tensor = torch.arange(4)
    assert device.pin(tensor) is tensor
    buffer = device.empty_pinned([2, 3], torch.int32)
    assert (tuple(buffer.shape), buffer.dtype, buffer.device.type) == ((2, 3), torch.int32, "cpu")


# --- RecordingDevice ---------------------------------------------------------------------------

def overlap_step(device, war_barrier: bool, copy_stream: bool) -> None:
    """A sketch of one overlap step, shaped like the loop the policy tests will drive."""
    schedule, forward = device.new_stream("schedule"), device.new_stream("forward")
    copy = device.new_stream("copy")
    with device.stream(schedule):
        forward.wait_stream(schedule)
        with device.stream(forward):
            tokens = torch.tensor([7, 8])
        if war_barrier:
            schedule.wait_stream(forward)
        if copy_stream:
            copy.wait_stream(forward)
            with device.stream(copy):
                host = device.to_host(tokens)
                done = copy.record_event()
        else:
            with device.stream(forward):
                host = device.to_host(tokens)
                done = forward.record_event()
        done.synchronize()
    assert host.tolist() == [7, 8]


def test_recording_keeps_every_call_in_order():
    device = RecordingDevice(CpuDevice())
    overlap_step(device, war_barrier=True, copy_stream=True)
    assert device.calls == [
        Call("new_stream", stream="schedule"),
        Call("new_stream", stream="forward"),
        Call("new_stream", stream="copy"),
        Call("enter_stream", stream="schedule"),
        Call("wait_stream", stream="forward", other="schedule"),
        Call("enter_stream", stream="forward"),
        Call("exit_stream", stream="forward"),
        Call("wait_stream", stream="schedule", other="forward"),
        Call("wait_stream", stream="copy", other="forward"),
        Call("enter_stream", stream="copy"),
        Call("to_host", stream="copy", detail="cpu->cpu"),
        Call("record_event", stream="copy", event=1),
        Call("exit_stream", stream="copy"),
        Call("event_synchronize", event=1),
        Call("exit_stream", stream="schedule"),
    ]


def test_recording_tells_the_policies_apart():
    barrier_and_copy, neither = RecordingDevice(CpuDevice()), RecordingDevice(CpuDevice())
    overlap_step(barrier_and_copy, war_barrier=True, copy_stream=True)
    overlap_step(neither, war_barrier=False, copy_stream=False)
    waits = lambda d: [(c.stream, c.other) for c in d.calls_of("wait_stream")]  # noqa: E731
    copies = lambda d: [c.stream for c in d.calls_of("to_host", "copy")]  # noqa: E731
    assert waits(barrier_and_copy) == [("forward", "schedule"), ("schedule", "forward"),
                                       ("copy", "forward")]
    assert waits(neither) == [("forward", "schedule")]
    assert (copies(barrier_and_copy), copies(neither)) == (["copy"], ["forward"])


def test_recording_names_the_copy_direction_and_the_current_stream():
    device = RecordingDevice(CpuDevice())
    device.copy_(torch.zeros(1), torch.ones(1))
    assert device.calls == [Call("copy", stream=DEFAULT_STREAM, detail="cpu->cpu")]


def test_recording_logs_pinned_allocations():
    device = RecordingDevice(CpuDevice())
    device.empty_pinned((32,), torch.int64)
    device.pin(torch.zeros(2, 3))
    assert device.calls == [Call("empty_pinned", detail="[32] int64"),
                            Call("pin", detail="[2, 3] float32")]


def test_recording_logs_event_queries_with_their_result():
    device = RecordingDevice(CpuDevice())
    event = device.current_stream().record_event()
    device.new_stream("schedule").wait_event(event)
    assert event.query() is True
    assert device.calls[-2:] == [Call("wait_event", stream="schedule", event=1),
                                 Call("event_query", event=1, detail="True")]


def test_recording_numbers_events_in_order():
    device = RecordingDevice(CpuDevice())
    stream = device.new_stream("forward")
    stream.record_event()
    stream.record_event()
    assert [c.event for c in device.calls_of("record_event")] == [1, 2]


def test_recording_does_not_log_lookups():
    device = RecordingDevice(CpuDevice())
    device.current_stream()
    assert device.calls == []


def test_recorded_current_stream_equals_the_entered_stream():
    device = RecordingDevice(CpuDevice())
    forward = device.new_stream("forward")
    with device.stream(forward):
        assert device.current_stream() == forward


def test_recording_rejects_a_stream_of_another_device():
    device, other = RecordingDevice(CpuDevice()), RecordingDevice(CpuDevice())
    foreign = other.new_stream("forward")
    with pytest.raises(TypeError, match="'forward' does not belong"):
        device.new_stream("schedule").wait_stream(foreign)
    with pytest.raises(TypeError, match="does not belong"):
        with device.stream(foreign):
            pass
    assert device.ops() == ["new_stream"]


def test_recording_rejects_a_foreign_event():
    device = RecordingDevice(CpuDevice())
    with pytest.raises(TypeError, match="foreign event"):
        device.new_stream("schedule").wait_event(CpuDevice().current_stream().record_event())


def test_recording_clear_forgets_the_calls():
    device = RecordingDevice(CpuDevice())
    device.synchronize()
    device.clear()
    assert device.calls == []


# --- make_device -------------------------------------------------------------------------------

def test_make_device_for_cpu():
    device = make_device(Platform("cpu"))
    assert isinstance(device, CpuDevice) and device.platform == Platform("cpu")


def test_make_device_follows_parallax_device(monkeypatch):
    monkeypatch.setenv("PARALLAX_DEVICE", "cpu")
    assert isinstance(make_device(), CpuDevice)


def test_make_device_for_a_simulated_platform_is_the_simulator():
    device = make_device(Platform("sim", "rocm-mi300x"))
    assert type(device).__name__ == "SimDevice" and device.profile.name == "rocm-mi300x"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_device_without_a_gpu_is_a_clear_error():
    with pytest.raises(PlatformError, match="needs a visible GPU"):
        CudaDevice()


# --- CudaDevice (CUDA or ROCm) -----------------------------------------------------------------

@needs_gpu
def test_cuda_streams_are_named_and_entered():
    device = make_device()
    assert isinstance(device, CudaDevice)
    forward = device.new_stream("forward")
    assert device.current_stream().name == DEFAULT_STREAM
    with device.stream(forward):
        assert device.current_stream() == forward
    assert device.current_stream().name == DEFAULT_STREAM


@needs_gpu
def test_cuda_wait_stream_orders_work_across_streams():
    device = make_device()
    producer, consumer = device.new_stream("forward"), device.new_stream("copy")
    data = torch.zeros(1 << 20, device=device.torch_device)
    producer.wait_stream(device.current_stream())  # the zeros come first
    with device.stream(producer):
        torch.cuda._sleep(50_000_000)  # keep the producer busy so an unordered read would race
        data.fill_(1.0)
    consumer.wait_stream(producer)
    with device.stream(consumer):
        total = data.sum()
        done = consumer.record_event()
    assert done.query() is False  # still behind the sleep
    done.synchronize()
    assert done.query() is True
    assert total.item() == float(1 << 20)


@needs_gpu
def test_cuda_to_host_lands_in_pinned_memory_after_the_event():
    device = make_device()
    forward = device.new_stream("forward")
    with device.stream(forward):
        host = device.to_host(torch.arange(5, device=device.torch_device))
        done = forward.record_event()
    done.synchronize()
    assert host.is_pinned() and host.tolist() == [0, 1, 2, 3, 4]
    assert device.empty_pinned((4,), torch.int64).is_pinned()


@needs_gpu
def test_recording_over_cuda_records_and_forwards():
    device = RecordingDevice(make_device())
    forward = device.new_stream("forward")
    with device.stream(forward):
        host = device.to_host(torch.ones(3, device=device.torch_device))
        forward.record_event().synchronize()
    assert host.tolist() == [1.0, 1.0, 1.0]
    assert [c.op for c in device.calls] == ["new_stream", "enter_stream", "to_host",
                                            "record_event", "event_synchronize", "exit_stream"]
