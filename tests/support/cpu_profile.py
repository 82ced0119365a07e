"""Where the test suite's CPU goes: an opt-in pytest plugin (docs/testing.md).

`PARALLAX_TEST_CPU_REPORT=DIR pytest -p tests.support.cpu_profile ...` writes one JSON line per
test to DIR/<worker>.jsonl: its wall time, the CPU its process used (threads included: live
servers, runner threads) and the CPU of the child processes it waited for. Each process also
writes a `session` line with what it used from its start (interpreter, imports, collection) to
its end. Children that are never waited for (Playwright's browser) are not counted, and a child
is counted in the test during which it was waited for; the host's total from /proc/stat is
recorded by every process for comparison.

`python -m tests.support.cpu_profile DIR [--top N]` prints the report: the sessions, the totals,
the N tests with the most CPU and the CPU per test directory."""
from __future__ import annotations

import argparse
import collections
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
        started = time.time()  # the epoch, comparable between workers: who ran what when
        wall, own, children = time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
        yield
        self.write({"test": item.nodeid, "worker": self.worker, "started": round(started, 3),
                    "wall_s": round(time.monotonic() - wall, 3),
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


def report(directory: Path, top: int = 30) -> str:
    """The recorded run as text: sessions, totals, the `top` tests by CPU, CPU per test directory."""
    records = [json.loads(line) for path in sorted(directory.glob("*.jsonl")) for line in path.read_text().splitlines()
               if line.strip()]
    tests = [r for r in records if "test" in r]
    if not tests:
        raise SystemExit(f"error: {directory} holds no test records (was PARALLAX_TEST_CPU_REPORT set to it "
                         f"and the plugin loaded with -p tests.support.cpu_profile?)")

    def cpu(record: dict[str, float]) -> float:
        return record["self_cpu_s"] + record["children_cpu_s"]

    lines = [f"session {r['session']}: wall {r['wall_s']:.0f} s, own CPU {r['self_cpu_s']:.0f} s, children "
             f"{r['children_cpu_s']:.0f} s, host {r['host_cpu_s']:.0f} CPU-s" for r in records if "session" in r]
    lines.append(f"{len(tests)} tests: {sum(map(cpu, tests)):.0f} CPU-s, {sum(r['wall_s'] for r in tests):.0f} s of wall")
    lines.append(f"\n{'CPU s':>7} {'wall s':>7}  test")
    lines += [f"{cpu(r):7.1f} {r['wall_s']:7.1f}  {r['test']}" for r in sorted(tests, key=cpu, reverse=True)[:top]]
    by_directory: collections.Counter[str] = collections.Counter()
    for r in tests:
        by_directory[r["test"].split("::")[0].rsplit("/", 1)[0]] += cpu(r)
    lines.append(f"\n{'CPU s':>7}  directory")
    lines += [f"{seconds:7.1f}  {name}" for name, seconds in by_directory.most_common()]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Report a run recorded with PARALLAX_TEST_CPU_REPORT.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--top", type=int, default=30, help="how many tests to list (default 30)")
    arguments = parser.parse_args()
    if arguments.top < 1:
        parser.error("--top must be at least 1")
    print(report(arguments.directory, arguments.top))
