"""The demo's progress while it plays its story: runner jobs done per platform, and how many
bisects or reproductions are running. On a terminal, a tqdm bar per platform. Anywhere else (a
pipe, a log file, a CI job) a plain line whenever the counts have changed, at most one every
`LINE_EVERY_S`, and the last counts when it closes: bars redrawn into a file are a flood of
carriage returns and cursor moves (186 KB of them for `parallax demo --exit-when-done` written to
a file, 8 December 2026)."""
from __future__ import annotations

import sys
import time
from typing import IO, Callable, Mapping, Sequence

import click
from tqdm import tqdm

LINE_EVERY_S = 5.0


class JobProgress:
    """Shows ``show``'s counts; ``write`` prints a message above the bars (or as a line)."""

    def __init__(self, platforms: Sequence[str], stream: IO[str] | None = None, interactive: bool | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.platforms = tuple(platforms)
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.clock = clock
        self.bars = {p: tqdm(total=0, desc=f"{p:>9}", unit="job", position=i, leave=True, dynamic_ncols=True,
                             file=self.stream) for i, p in enumerate(self.platforms)} if self.interactive else {}
        self._shown = ""
        self._latest = ""
        self._shown_at = float("-inf")

    def __enter__(self) -> "JobProgress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, text: str) -> None:
        if self.interactive:
            tqdm.write(text)
        else:
            click.echo(text)

    def show(self, per_platform: Mapping[str, tuple[int, int]], running: int) -> None:
        """``per_platform``: (done, total) jobs of each platform; ``running``: bisects or
        reproductions under way."""
        if self.interactive:
            for platform, bar in self.bars.items():
                done, total = per_platform.get(platform, (0, 0))
                bar.total, bar.n = total, done
                last = platform == self.platforms[-1]
                bar.set_postfix_str(f"bisects or reproductions running {running}" if last else "", refresh=False)
                bar.refresh()
            return
        counts = ", ".join(f"{p} {done}/{total}" for p in self.platforms
                           for done, total in [per_platform.get(p, (0, 0))])
        self._latest = f"jobs done: {counts}; bisects or reproductions running: {running}"
        now = self.clock()
        if self._latest != self._shown and now - self._shown_at >= LINE_EVERY_S:
            self._print_latest(now)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()
        self.bars = {}
        if self._latest != self._shown:
            self._print_latest(self.clock())

    def _print_latest(self, now: float) -> None:
        print(self._latest, file=self.stream, flush=True)
        self._shown, self._shown_at = self._latest, now
