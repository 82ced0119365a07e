"""The demo's engine history: the story of SGLang's two overlap-scheduler regressions, replayed as
honest edits of a copy of `scheduler_core/`.

Each commit changes the copied source the way the real pull request changed SGLang's, so the
runner measures what that commit's code does:

- the WAR barrier (`schedule_stream.wait_stream(forward_stream)`, with the forward-prepare D2H
  stream) turned on for every platform, as right after SGLang #26380, then made CUDA-only again;
- the decode result's device-to-host copy moved onto a dedicated copy stream on every platform,
  as right after SGLang #29075, then ROCm kept on the forward stream;
- a synchronisation the code needs (`prepare_d2h.wait_event(ready)`: the forward-prepare D2H
  stream must wait until the forward wrote the sequence lengths it copies) dropped, which costs
  nothing and only the race detector sees (the `hazards` metric on `cuda-sim`, whose policy uses
  that stream), restored a few commits later.

Pushes group the commits the way a maintainer would push them, so that a regression can land
inside a multi-commit push whose head alone is measured: the bisect then finds the culprit.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from app.git.workdir import git

POLICY_FILE = "scheduler_core/platform.py"
OVERLAP_FILE = "scheduler_core/overlap.py"
ROCM_DEFAULT = '"rocm": SyncPolicy(war_barrier=False, copy_stream=False, fwd_prepare_d2h=False),'
ROCM_WAR_BARRIER = '"rocm": SyncPolicy(war_barrier=True, copy_stream=False, fwd_prepare_d2h=True),'
ROCM_COPY_STREAM = '"rocm": SyncPolicy(war_barrier=False, copy_stream=True, fwd_prepare_d2h=False),'
PREPARE_WAIT = "            self.prepare_d2h.wait_event(ready)\n"
PREPARE_WAIT_DROPPED = "            pass  # (prepare_d2h.wait_event(ready) removed: the copy no longer waits)\n"


class StoryError(RuntimeError):
    """The copied engine does not contain the code a story commit edits (the engine changed)."""


@dataclass(frozen=True)
class Change:
    """One commit: its message, what it means for the demo, and the edit it makes."""

    message: str
    edit: Callable[[Path], None]
    role: str = "neutral"  # neutral | regression | fix | hazard | hazard-fix
    platforms: tuple[str, ...] = ()  # where its effect is expected (regressions and hazards)


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if text.count(old) != 1:
        raise StoryError(f"{path.name}: expected exactly one occurrence of {old.strip()!r} to edit, "
                         f"found {text.count(old)}; the demo's story no longer fits scheduler_core")
    path.write_text(text.replace(old, new))


def _note(line: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        notes = root / "NOTES.md"
        notes.write_text((notes.read_text() if notes.exists() else "# Engine notes\n\n") + f"- {line}\n")
    return edit


def _policy(old: str, new: str) -> Callable[[Path], None]:
    return lambda root: _replace(root / POLICY_FILE, old, new)


def _overlap(old: str, new: str) -> Callable[[Path], None]:
    return lambda root: _replace(root / OVERLAP_FILE, old, new)


@dataclass
class Story:
    """The pushes, in order; each is a list of commits."""

    pushes: list[list[Change]] = field(default_factory=list)

    def changes(self) -> list[Change]:
        return [change for push in self.pushes for change in push]


# A level change is tested with a rank test on the measured commits on each side of it, so each
# level needs a few pushes (five before and four after reach p <= 0.01; see docs/detection.md).
LEVEL_PUSHES = 5


def default_story(quick: bool = False) -> Story:
    """The full story; `quick` keeps one performance regression (the WAR barrier) and the hazard,
    for tests."""

    def quiet(n: int, what: str) -> list[list[Change]]:
        return [[Change(f"docs: {what} ({i + 1})", _note(f"{what} ({i + 1})"))] for i in range(n)]

    def note(what: str) -> Change:
        return Change(f"docs: {what}", _note(what))

    war_on = Change("overlap: WAR barrier on every platform (schedule stream waits for the forward stream, "
                    "as in SGLang #26380)", _policy(ROCM_DEFAULT, ROCM_WAR_BARRIER), "regression", ("rocm-sim",))
    war_fix = Change("overlap: WAR barrier and its forward-prepare D2H stream are CUDA-only again",
                     _policy(ROCM_WAR_BARRIER, ROCM_DEFAULT), "fix", ("rocm-sim",))
    copy_on = Change("overlap: copy decode results on a dedicated copy stream on every platform "
                     "(as in SGLang #29075)", _policy(ROCM_DEFAULT, ROCM_COPY_STREAM), "regression", ("rocm-sim",))
    copy_fix = Change("overlap: ROCm copies decode results on the forward stream again",
                      _policy(ROCM_COPY_STREAM, ROCM_DEFAULT), "fix", ("rocm-sim",))
    drop_wait = Change("overlap: the forward-prepare D2H copy no longer waits for the forward (looked redundant)",
                       _overlap(PREPARE_WAIT, PREPARE_WAIT_DROPPED), "hazard", ("cuda-sim",))
    restore_wait = Change("overlap: the forward-prepare D2H copy waits for the forward again (it copies its output)",
                          _overlap(PREPARE_WAIT_DROPPED, PREPARE_WAIT), "hazard-fix", ("cuda-sim",))

    level = LEVEL_PUSHES - 1
    pushes: list[list[Change]] = [[Change("engine under test", lambda root: None)]]
    pushes += quiet(LEVEL_PUSHES, "baseline measurements")
    # The regression lands in the middle of a three-commit push: only its head is measured.
    pushes.append([note("tidy the scheduler docs"), war_on, note("rename a helper")])
    pushes += quiet(level, "after the barrier")
    pushes.append([war_fix])
    pushes += quiet(1, "after the fix")
    # The hazard: free on the timeline, seen only by the race detector on cuda-sim (the only policy
    # with the forward-prepare D2H stream once the barrier is CUDA-only again).
    pushes.append([drop_wait])
    pushes += quiet(1, "with the dropped wait")
    pushes.append([note("comment the prepare path"), restore_wait])
    if not quick:
        pushes += quiet(level - 2, "between the stories")
        pushes.append([note("comment the copy stream"), copy_on, note("typo")])
        pushes += quiet(level, "after the copy stream")
        pushes.append([copy_fix])
    # Four quiet pushes in the quick story too: a dip of the real-timed cpu series near the end
    # (a slow stretch of a shared machine) needs later commits to be withdrawn by the detector.
    pushes += quiet(level, "quiet again")
    return Story(pushes)


@dataclass(frozen=True)
class PullStory:
    """The pull request told after the history: it turns the WAR barrier on for every platform
    (as SGLang #26380 did), gets a failing check on rocm-sim only, and the author pushes the
    CUDA-only fix to the same branch; the check turns green and it is merged."""

    number: int
    branch: str
    title: str
    regression: Change
    fix: Change


def pull_request_story() -> PullStory:
    return PullStory(
        number=1, branch="war-barrier-everywhere",
        title="overlap: order the schedule stream after the forward stream on every platform",
        regression=Change("overlap: WAR barrier on every platform (as in SGLang #26380)",
                          _policy(ROCM_DEFAULT, ROCM_WAR_BARRIER), "regression", ("rocm-sim",)),
        fix=Change("overlap: keep the WAR barrier CUDA-only (review: it costs ROCm its overlap)",
                   _policy(ROCM_WAR_BARRIER, ROCM_DEFAULT), "fix", ("rocm-sim",)))


@dataclass
class EngineRepository:
    """A git repository holding a copy of `scheduler_core/`, grown one push at a time."""

    path: Path
    commits: dict[str, Change] = field(default_factory=dict)

    @classmethod
    def create(cls, path: Path, source_root: Path) -> EngineRepository:
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        git(path, "init", "-q", "-b", "main")
        shutil.copytree(source_root / "scheduler_core", path / "scheduler_core",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        (path / "README.md").write_text("The engine under test, copied by `parallax demo`.\n")
        return cls(path)

    def head(self) -> str | None:
        try:
            return git(self.path, "rev-parse", "HEAD")
        except Exception:  # no commit yet
            return None

    def checkout(self, branch: str, create: bool = False) -> None:
        git(self.path, "checkout", "-q", *(["-b"] if create else []), branch)

    def push(self, changes: list[Change]) -> tuple[str | None, str, list[str]]:
        """Commit `changes` in order; returns (head before, head after, the new SHAs)."""
        before = self.head()
        shas = []
        for change in changes:
            change.edit(self.path)
            git(self.path, "add", "-A")
            git(self.path, "commit", "-q", "--allow-empty", "-m", change.message)
            sha = git(self.path, "rev-parse", "HEAD")
            self.commits[sha] = change
            shas.append(sha)
        return before, shas[-1], shas
