"""The demo's progress written to a file or a pipe: plain lines, only when the counts change, at
most one every `LINE_EVERY_S`, and the last counts at the end; no bar redraws."""
from __future__ import annotations

import io

from app.demo.progress import LINE_EVERY_S, JobProgress

PLATFORMS = ("cpu", "cuda-sim", "rocm-sim")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_file_gets_plain_lines_of_the_counts_and_no_bar_redraws() -> None:
    out, clock = io.StringIO(), Clock()
    with JobProgress(PLATFORMS, stream=out, clock=clock) as progress:
        progress.show({"cpu": (0, 1), "cuda-sim": (1, 1)}, running=0)
        clock.now += LINE_EVERY_S
        progress.show({"cpu": (1, 1), "cuda-sim": (1, 1), "rocm-sim": (1, 2)}, running=1)
    assert out.getvalue().splitlines() == [
        "jobs done: cpu 0/1, cuda-sim 1/1, rocm-sim 0/0; bisects or reproductions running: 0",
        "jobs done: cpu 1/1, cuda-sim 1/1, rocm-sim 1/2; bisects or reproductions running: 1",
    ]
    assert "\r" not in out.getvalue() and "\x1b" not in out.getvalue()


def test_changes_come_at_most_one_line_per_interval_and_the_last_counts_at_the_end() -> None:
    out, clock = io.StringIO(), Clock()
    progress = JobProgress(PLATFORMS, stream=out, clock=clock)
    for done in range(5):  # five changes within one interval
        progress.show({"cpu": (done, 4)}, running=0)
        clock.now += LINE_EVERY_S / 10
    assert len(out.getvalue().splitlines()) == 1
    progress.close()
    assert out.getvalue().splitlines()[-1].startswith("jobs done: cpu 4/4,")


def test_unchanged_counts_print_nothing_more() -> None:
    out, clock = io.StringIO(), Clock()
    with JobProgress(PLATFORMS, stream=out, clock=clock) as progress:
        for _ in range(3):
            progress.show({"cpu": (1, 1)}, running=0)
            clock.now += 2 * LINE_EVERY_S
    assert len(out.getvalue().splitlines()) == 1


def test_a_terminal_gets_bars_not_lines() -> None:
    out = io.StringIO()
    with JobProgress(PLATFORMS, stream=out, interactive=True) as progress:
        progress.show({"cpu": (1, 2)}, running=0)
    assert "jobs done:" not in out.getvalue() and "cpu" in out.getvalue()
