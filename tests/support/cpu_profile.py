"""Where the test suite's CPU goes: an opt-in pytest plugin (docs/testing.md).

`PARALLAX_TEST_CPU_REPORT=DIR pytest -p tests.support.cpu_profile ...` writes one JSON line per
test to DIR/<worker>.jsonl: its wall time, the CPU its process used (threads included: live
servers, runner threads) and the CPU of the child processes it waited for. Each process also
writes a `session` line with what it used from its start (interpreter, imports, collection) to
its end. Children that are never waited for (Playwright's browser) are not counted; the host's
total from /proc/stat is recorded by the controller for comparison."""
from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path
from typing import Iterator

import pytest

REPORT_ENV = "PARALLAX_TEST_CPU_REPORT"


def _cpu(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _host_cpu_s() -> float:
    """Busy CPU-seconds of the whole host since boot (every process, every core)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class _Recorder:
    def __init__(self, directory: Path, worker: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.out = (directory / f"{worker}.jsonl").open("a")
        self.worker = worker
        self.host_start = _host_cpu_s()
        self.wall_start = time.monotonic()

    def write(self, record: dict[str, object]) -> None:
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        wall, own, children = time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        yield
        self.write({"test": item.nodeid, "worker": self.worker, "wall_s": round(time.monotonic() - wall, 3),
                    "self_cpu_s": round(_cpu(resource.RUSAGE_SELF) - own, 3),
                    "children_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN) - children, 3)})

    def pytest_unconfigure(self) -> None:
        self.write({"session": self.worker, "wall_s": round(time.monotonic() - self.wall_start, 3),
                    "self_cpu_s": round(_cpu(resource.RUSAGE_SELF), 3),
                    "children_cpu_s": round(_cpu(resource.RUSAGE_CHILDREN), 3),
                    "host_cpu_s": round(_host_cpu_s() - self.host_start, 3)})
        self.out.close()


def pytest_configure(config: pytest.Config) -> None:
    directory = os.environ.get(REPORT_ENV)
    if directory:
        worker = getattr(config, "workerinput", {}).get("workerid", "controller")
        config.pluginmanager.register(_Recorder(Path(directory), worker), "parallax-cpu-profile")
